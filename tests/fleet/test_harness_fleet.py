"""Harness runs across a fleet: stacked workspaces, candidates, caps, cancel, resume (merge conflicts:
test_conflict_reopening_fleet.py)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time

import pygit2
import pytest

from drover import Client
from drover.testing import fake_anthropic as fake
from tests.conftest import API_KEY, Fleet, wait_for


def start(fleet: Fleet, model: fake.FakeAnthropic, repo: pathlib.Path, *plane_args: str, capacity: int = 1) -> None:
    fleet.plane.extra_env.update(ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=API_KEY)
    fleet.start_plane(*plane_args)
    fleet.plane.add_project("calc", str(repo))
    fleet.agent("worker", capacity=capacity)


def implement(key: str, *deps: str) -> dict:
    # medium complexity routes to sonnet by rule, so no classifier call takes a scripted reply
    return {"key": key, "kind": "implement", "objective": f"do {key}", "depends_on": list(deps), "complexity": "medium"}


def files_under(root: pathlib.Path, skip_suffix: str) -> dict[pathlib.Path, bytes]:
    """Every regular file under root with its bytes, skipping what goes away mid-walk: runs end and unmount
    meanwhile."""
    found = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = pathlib.Path(folder, name)
            if path.suffix == skip_suffix:
                continue
            try:
                if path.is_file():
                    found[path] = path.read_bytes()
            except OSError:
                continue
    return found


def events(client: Client, run_id: str) -> list[dict]:
    return [json.loads(line) for ln in client.run_logs(run_id) if ln.stream == "event" for line in ln.text.splitlines()]


def test_a_task_stacks_on_both_dependencies_and_the_candidate_composes_all(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path
) -> None:
    model.extend(
        [
            fake.tool_use("write_file", {"path": "schema.py", "content": "TABLE = 'users'\n"}),
            fake.tool_use("complete_task", {"summary": "schema"}),
            fake.tool_use("write_file", {"path": "api.py", "content": "ROUTE = '/users'\n"}),
            fake.tool_use("complete_task", {"summary": "api"}),
            fake.tool_use("list_files", {}),
            fake.tool_use(
                "write_file", {"path": "ui.py", "content": "from api import ROUTE\nfrom schema import TABLE\n"}
            ),
            fake.tool_use("complete_task", {"summary": "ui"}),
        ]
    )
    start(fleet, model, calc_repo)
    with fleet.plane.client() as client:
        change = client.submit_change(
            "calc", "users page", [implement("schema"), implement("api"), implement("ui", "schema", "api")]
        )
        list(client.watch(change.id))
        final = client.get_change(change.id)
        sets = {c.task_key: c for c in client.list_changesets(change.id)}
        ui_run = next(t.latest_run_id for t in final.tasks if t.key == "ui")
        listing = next(e for e in events(client, ui_run) if e["kind"] == "tool_result")["text"]
    assert final.status == "succeeded", final
    assert "schema.py" in listing and "api.py" in listing  # both merges were in the workspace
    assert set(sets["ui"].stacked_on) == {sets["schema"].id, sets["api"].id}
    assert list(sets["ui"].own_files) == ["ui.py"]
    assert sets["ui"].start_commit != sets["ui"].base_commit
    origin = pygit2.Repository(str(calc_repo))
    candidate = origin[origin.branches[final.candidate_branch].target].peel(pygit2.Commit)
    assert {"schema.py", "api.py", "ui.py", "calc.py"} <= {e.name for e in candidate.tree}


def test_the_call_cap_ends_the_run_and_the_task_retries_at_its_tier(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    config = tmp_path / "controlplane.toml"
    config.write_text("[tiers.sonnet]\nmax_calls = 2\n")
    model.extend(
        [
            fake.tool_use("list_files", {}),
            fake.tool_use("list_files", {}),  # the first run: capped
            fake.tool_use("list_files", {}),
            fake.tool_use("complete_task", {"summary": "done"}),
        ]
    )
    start(fleet, model, calc_repo, "--config", str(config))
    with fleet.plane.client() as client:
        change = client.submit_change("calc", "loop", [implement("spin")])
        seen = list(client.watch(change.id))
        runs = sorted(client.list_runs(change_id=change.id), key=lambda r: r.attempt)
        final = client.get_change(change.id)
    assert [(r.outcome, r.model_calls, r.tier) for r in runs] == [
        ("run_call_cap", 2, "sonnet"),
        ("completed", 2, "sonnet"),
    ]
    assert len(model.requests) == 4 and final.status == "succeeded"
    retry = next(e for e in seen if e.kind == "task.retrying")
    assert retry.data["reason"] == "first_failure_at_sonnet"


SLOW_TEST = (
    "import pathlib, time\n\n\ndef test_slow():\n"
    "    with open('runs.log', 'a') as f:\n        f.write('ran\\n')\n    time.sleep(60)\n"
)


@pytest.mark.xdist_group("test_slow.py")  # pgrep/pkill -f test_slow.py: one at a time
def test_cancel_during_a_running_tool_stops_it(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path
) -> None:
    model.extend(
        [
            fake.tool_use("write_file", {"path": "test_slow.py", "content": SLOW_TEST}),
            fake.tool_use("run_command", {"command": "python -m pytest -q test_slow.py"}),
        ]
    )
    start(fleet, model, calc_repo)
    agent = fleet.agents[0]
    with fleet.plane.client() as client:
        change = client.submit_change("calc", "slow", [implement("slow")])
        run_id = wait_for(lambda: client.get_change(change.id).tasks[0].latest_run_id, 20)
        marker = agent.work_dir / run_id / "repo" / "runs.log"
        wait_for(marker.exists, 30, what="the slow test to start")
        asked = time.monotonic()
        client.cancel_run(run_id)
        wait_for(lambda: client.get_run(run_id).state == "cancelled", 15, what="the run to be cancelled")
        took = time.monotonic() - asked
        tail = events(client, run_id)[-1]
    assert took < 10
    assert tail["kind"] == "result" and tail["outcome"] == "cancelled"
    assert subprocess.run(["pgrep", "-f", "test_slow.py"], capture_output=True).returncode == 1


@pytest.mark.xdist_group("test_slow.py")  # pgrep/pkill -f test_slow.py: one at a time
def test_a_harness_run_resumes_after_agentd_and_its_supervisor_are_killed(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path
) -> None:
    model.extend(
        [
            fake.tool_use("write_file", {"path": "test_slow.py", "content": SLOW_TEST.replace("60", "30")}),
            fake.tool_use("run_command", {"command": "python -m pytest -q test_slow.py"}),
            fake.tool_use("complete_task", {"summary": "resumed"}),
        ]
    )
    start(fleet, model, calc_repo)
    agent = fleet.agents[0]
    with fleet.plane.client() as client:
        change = client.submit_change("calc", "survive", [implement("survive")])
        run_id = wait_for(lambda: client.get_change(change.id).tasks[0].latest_run_id, 20)
        workspace = agent.work_dir / run_id / "repo"
        wait_for((workspace / "runs.log").exists, 30, what="the slow test to start")
        agent.kill9()
        fleet.stop_supervisors()  # the machine went down under the run
        subprocess.run(["pkill", "-9", "-f", "test_slow.py"], check=False)
        agent.start()
        list(client.watch(change.id))
        run = client.get_run(run_id)
        stream = events(client, run_id)
        [cs] = client.list_changesets(change.id)
        patch = client.get_patch(cs.id)
    assert run.state == "succeeded" and run.outcome == "completed", agent.log()
    # The interrupted command was reported, not run again: runs.log holds one line.
    assert "+ran\n" in patch and patch.count("+ran") == 1
    resumed = model.requests[-1].body["messages"][-1]["content"][0]
    assert resumed["is_error"] and "interrupted" in resumed["content"]
    steps = [e["step"] for e in stream]
    assert len(steps) == len({(e["step"], e["kind"], e.get("tool")) for e in stream})
    assert [e["kind"] for e in stream].count("tool_use") == 3
    assert [e["tool"] for e in stream if e["kind"] == "tool_result"] == ["write_file", "run_command", "complete_task"]


def test_secrets_never_reach_the_database_objects_events_or_output(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    token = "ghp_neverleak_0123456789abcdef"
    (tmp_path / "git.token").write_text(token + "\n")
    model.extend(FIX_STEPS)
    fleet.plane.extra_env.update(ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=API_KEY)
    fleet.start_plane()
    fleet.plane.cli("project", "add", "calc", "--repo", str(calc_repo), "--git-token-file", str(tmp_path / "git.token"))
    agent = fleet.agent("keeper")
    show_env = [sys.executable, "-c", "import os, time; print(os.environ.get('DROVER_GIT_TOKEN')); time.sleep(2)"]
    with fleet.plane.client() as client:
        change = client.submit_change(
            "calc",
            "secrets",
            [
                implement("fix"),
                {"key": "env", "kind": "test", "objective": "print env", "command": show_env, "depends_on": ["fix"]},
            ],
        )
        run_id = wait_for(
            lambda: next(
                (t.latest_run_id for t in client.get_change(change.id).tasks if t.key == "env" and t.latest_run_id), ""
            ),
            60,
        )
        wait_for(lambda: client.get_run(run_id).state == "running", 30)
        # a run's filesystem image (RUN.disk, sparse, 32 GiB) holds the workspace's own files: not read here
        on_disk = [p for p, data in files_under(agent.root, skip_suffix=".disk").items() if token.encode() in data]
        list(client.watch(change.id))
        final = client.get_change(change.id)
        printed = "".join(ln.text for ln in client.run_logs(run_id))
        everything = [ln.text for t in final.tasks for ln in client.run_logs(t.latest_run_id)]
        recorded = [str(e.data) for e in client.list_events(change_id=change.id, limit=1000)]
    assert final.status == "succeeded"
    assert on_disk == []  # not in agentd's spool (assignment, outbox) or logs
    assert "\nNone\n" in printed and token not in printed  # agentd cloned with it; the command never got it
    for secret in (token, API_KEY):
        assert all(secret not in text for text in everything + recorded)
        assert secret.encode() not in (fleet.plane.data_dir / "drover.db").read_bytes()
        for path in (fleet.plane.data_dir / "objects").rglob("*"):
            assert not path.is_file() or secret.encode() not in path.read_bytes()


FIX_STEPS = [
    fake.tool_use("edit_file", {"path": "calc.py", "edits": [{"old_text": "a - b", "new_text": "a + b"}]}),
    fake.tool_use("complete_task", {"summary": "fixed"}),
]
