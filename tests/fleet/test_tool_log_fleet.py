"""A harness run's tool log across a fleet: its calls before and after a control-plane restart mid-run
all reach the document written when the run ends, and a secret a tool read never reaches the database's
tool-log rows or the document (agentd redacts the record before it is sent)."""

from __future__ import annotations

import json
import pathlib
import sqlite3

from drover.testing import fake_anthropic as fake
from tests.conftest import API_KEY, Fleet, make_repo, wait_for

TOKEN = "ghp_toollog_0123456789abcdef"
SLOW_TEST = (
    "import time\n\n\ndef test_slow():\n"
    "    with open('runs.log', 'a') as f:\n        f.write('ran\\n')\n    time.sleep(12)\n"
)


def entries(db: pathlib.Path, run_id: str) -> list[str]:
    with sqlite3.connect(db) as conn:  # reads the WAL too: what the control plane committed
        return [
            t for (t,) in conn.execute("SELECT text FROM tool_log_entries WHERE run_id = ? ORDER BY seq", (run_id,))
        ]


def test_a_tool_log_survives_a_control_plane_restart_mid_run_and_keeps_no_secret(
    fleet: Fleet, model: fake.FakeAnthropic, tmp_path: pathlib.Path
) -> None:
    repo = make_repo(
        tmp_path / "notes",
        {
            "NOTES.md": f"deploy with {TOKEN}\n",
            "test_wait.py": SLOW_TEST,  # not test_slow.py: the harness tests pgrep for that name host-wide
            "calc.py": "def add(a, b):\n    return a + b\n",
        },
    )
    (tmp_path / "git.token").write_text(TOKEN + "\n")
    model.extend(
        [
            fake.tool_use("read_file", {"path": "NOTES.md"}),
            fake.tool_use("run_command", {"command": "python -m pytest -q test_wait.py"}),
            fake.tool_use("read_file", {"path": "calc.py"}),
            fake.tool_use("complete_task", {"summary": "read the notes"}),
        ]
    )
    fleet.plane.extra_env.update(ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=API_KEY)
    plane = fleet.start_plane()
    plane.cli("project", "add", "notes", "--repo", str(repo), "--git-token-file", str(tmp_path / "git.token"))
    agent = fleet.agent("toollog-keeper")
    db = plane.data_dir / "drover.db"
    with plane.client() as client:
        change = client.submit_change(
            "notes", "read", [{"key": "read", "kind": "implement", "objective": "read", "complexity": "medium"}]
        )
        run_id = wait_for(lambda: client.get_change(change.id).tasks[0].latest_run_id, 30, what="a run")
        wait_for((agent.work_dir / run_id / "repo" / "runs.log").exists, 60, what="the slow command to start")
        wait_for(lambda: entries(db, run_id), 30, what="the first tool call to be stored")
    plane.kill9()  # mid-run: the first call is stored, the command still runs
    plane.start()
    with plane.client() as client:
        list(client.watch(change.id))
        run = client.get_run(run_id)
        task_id = client.get_change(change.id).tasks[0].id
    assert run.state == "succeeded", agent.log()
    document = json.loads(
        (plane.data_dir / "objects" / "context" / "notes" / change.id / task_id / f"tools-{run_id}.json").read_text()
    )
    assert [c["tool"] for c in document["calls"]] == ["read_file", "run_command", "read_file", "complete_task"]
    assert "deploy with ***" in document["calls"][0]["output"] and document["pending"] == {}
    stored = entries(db, run_id)
    assert stored and all(TOKEN not in text for text in stored)
    assert "".join(stored).count("\n") == 4, "each record stored once"
    assert TOKEN not in json.dumps(document)
