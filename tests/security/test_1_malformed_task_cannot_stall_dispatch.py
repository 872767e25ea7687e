"""Finding 1: one malformed Task stopped every run in the fleet. A Task with `files: ["../../"]` was
accepted; dispatch then raised while normalising it, the whole dispatch transaction rolled back every
second, and no queued run of any project started until someone cancelled that Change."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import pytest

import drover
from tests.conftest import Fleet, python_command, task, wait_for

TRUE = python_command("pass")
MALFORMED = [
    ({"files": ["../../"]}, "tasks[0].files[0]"),
    ({"files": ["."]}, "tasks[0].files[0]"),
    ({"files": [""]}, "tasks[0].files[0]"),
    ({"files": ["ok.py", "../etc/passwd"]}, "tasks[0].files[1]"),
    ({"resources": ["table:"]}, "tasks[0].resources[0]"),
    ({"resources": ["/"]}, "tasks[0].resources[0]"),
]


def test_declared_files_and_resources_are_checked_at_submit(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    plane.add_project("web")
    with plane.client() as client:
        for extra, field in MALFORMED:
            with pytest.raises(drover.InvalidArgument) as caught:
                client.submit_change("web", "poison", [task("a", TRUE, **extra)])
            assert caught.value.message.startswith(f"{field}:"), caught.value.message
        assert client.list_changes() == []
        # What is accepted is stored normalised: the claims see exactly what submission checked.
        change = client.submit_change(
            "web", "fine", [task("a", TRUE, files=["./src//a.py", "src/a.py"], resources=["Table:users"])]
        )
        assert list(change.tasks[0].files) == ["src/a.py"]
        assert list(change.tasks[0].resources) == ["table:users"]


def test_the_cli_refuses_a_string_where_a_list_of_files_belongs(fleet: Fleet, tmp_path) -> None:
    plane = fleet.start_plane()
    plane.add_project("web")
    change_file = tmp_path / "change.yaml"
    change_file.write_text(
        "project: web\ngoal: poison\ntasks:\n  - key: a\n    kind: test\n    objective: x\n"
        '    command: ["true"]\n    files: "../../"\n'
    )
    done = subprocess.run(
        [sys.executable, "-m", "drover.cli", "submit", str(change_file), "--target", plane.target],
        capture_output=True,
        text=True,
        env={**plane.env(), "DROVER_TOKEN": plane.admin_token},
    )
    assert done.returncode != 0
    assert f"{change_file}:8: tasks[0].files: expected a list of strings, not a string" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    with plane.client() as client:
        assert client.list_changes() == []


def test_a_poisoned_run_in_the_database_fails_alone_and_the_others_start(fleet: Fleet) -> None:
    """A row that submission would refuse today (planted directly, as an older version or a bug could
    leave it) is failed with its reason in its own transaction; the other queued runs still start."""
    plane = fleet.start_plane()
    plane.add_project("web")
    plane.add_project("api")
    with plane.client() as client:
        poisoned = client.submit_change(
            "web", "poisoned", [task("bad", TRUE, files=["ok.py"]), task("after", TRUE, depends_on=("bad",))]
        )
        db = sqlite3.connect(plane.data_dir / "drover.db")
        with db:
            db.execute(
                "UPDATE tasks SET spec = ? WHERE change_id = ? AND key = 'bad'",
                (json.dumps({"files": ["../../"]}), poisoned.id),
            )
        db.close()
        healthy = [client.submit_change("api", f"healthy {i}", [task("ok", TRUE)]) for i in range(3)]
        fleet.agent("worker", capacity=2)
        for change in healthy:
            assert (
                wait_for(
                    lambda c=change: client.get_change(c.id).status in ("succeeded", "failed"),
                    60,
                    what=f"change {change.id} to end",
                )
                and client.get_change(change.id).status == "succeeded"
            )
        final = wait_for(
            lambda: (c := client.get_change(poisoned.id)).status == "failed" and c,
            30,
            what="the poisoned Change to fail",
        )
        bad_run = client.get_run(final.tasks[0].latest_run_id)
    assert {t.key: t.status for t in final.tasks} == {"bad": "failed", "after": "blocked"}
    assert bad_run.state == "cancelled" and bad_run.reason == "assignment_failed"
    assert "'../../' is not a path inside the repository" in final.tasks[0].reason
