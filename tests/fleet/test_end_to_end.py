"""A control plane, two agentd daemons and the SDK, all real processes on loopback."""

from __future__ import annotations

import pathlib

from agentd.daemon import run_disk
from tests.conftest import Fleet, python_command, task, wait_for

COUNT = python_command("import sys\nfor i in range(200):\n    print(f'line {i}')\nprint('done', file=sys.stderr)")


def test_dag_runs_in_order_and_a_failure_blocks_its_dependent(fleet: Fleet, git_repo) -> None:
    fleet.start_plane()
    fleet.plane.add_project("sample", str(git_repo))
    fleet.agent("agent-a", capacity=2)
    fleet.agent("agent-b", capacity=2)
    with fleet.plane.client() as client:
        change = client.submit_change(
            "sample",
            "build and check",
            [
                task("prepare", python_command("import os; print(sorted(os.listdir('.')))")),
                task("count", COUNT, depends_on=("prepare",)),
                task("check", python_command("raise SystemExit(4)"), depends_on=("prepare",)),
                task("publish", ["true"], depends_on=("count", "check")),
            ],
            criteria=["all lines printed"],
        )
        assert change.status == "open"
        assert [t.key for t in change.tasks] == ["prepare", "count", "check", "publish"]

        events = list(client.watch(change.id))
        final = client.get_change(change.id)

    statuses = {t.key: t.status for t in final.tasks}
    assert statuses == {"prepare": "succeeded", "count": "succeeded", "check": "failed", "publish": "blocked"}
    assert final.status == "failed"
    kinds = [e.kind for e in events]
    assert kinds[-1] == "change.finished"
    assert events[-1].data["status"] == "failed"

    # Every run went queued -> assigned -> started -> finished, each step once, in that order.
    by_run: dict[str, list[str]] = {}
    for e in events:
        if e.run_id:
            by_run.setdefault(e.run_id, []).append(e.kind)
    assert len(by_run) == 3
    for seq in by_run.values():
        assert seq == ["run.queued", "run.assigned", "run.started", "run.finished"]
    finished = {e.run_id: e for e in events if e.kind == "run.finished"}
    check_run = next(t.latest_run_id for t in final.tasks if t.key == "check")
    assert finished[check_run].data["status"] == "failed"
    assert finished[check_run].data["exit_code"] == 4
    blocked = [e for e in events if e.kind == "task.blocked"]
    assert [e.data["key"] for e in blocked] == ["publish"]
    # "check" and "count" ran only after "prepare" succeeded.
    assert kinds.index("task.succeeded") < min(
        i for i, e in enumerate(events) if e.kind == "task.ready" and e.data["key"] == "count"
    )

    with fleet.plane.client() as client:
        count_run = next(t.latest_run_id for t in final.tasks if t.key == "count")
        lines = list(client.run_logs(count_run))
        stdout = "".join(ln.text for ln in lines if ln.stream == "stdout")
        assert stdout == "".join(f"line {i}\n" for i in range(200))
        assert "".join(ln.text for ln in lines if ln.stream == "stderr") == "done\n"
        # The workspace is a clone of the project at main.
        prepare_run = next(t.latest_run_id for t in final.tasks if t.key == "prepare")
        listing = "".join(ln.text for ln in client.run_logs(prepare_run) if ln.stream == "stdout")
        assert "'README.md'" in listing and "'app.py'" in listing
        runs = client.list_runs(change_id=change.id)
        assert {r.agent for r in runs} <= {"agent-a", "agent-b"}
        assert all(r.state in ("succeeded", "failed") for r in runs)


def test_a_run_gets_the_minimal_environment_and_its_workspace_is_removed(fleet: Fleet, git_repo) -> None:
    fleet.start_plane()
    fleet.plane.add_project("sample", str(git_repo))
    agent = fleet.agent("env-agent")
    show_env = python_command("import os, json; print(json.dumps(dict(os.environ), sort_keys=True))")
    with fleet.plane.client() as client:
        change = client.submit_change("sample", "env", [task("env", show_env, env={"GREETING": "hi"})])
        list(client.watch(change.id))
        run_id = client.get_change(change.id).tasks[0].latest_run_id
        import json

        env = json.loads("".join(ln.text for ln in client.run_logs(run_id) if ln.stream == "stdout"))
    assert env["GREETING"] == "hi"
    assert set(env) <= {
        "PATH",
        "LANG",
        "TZ",
        "HOME",
        "DROVER_WORKSPACE",
        "DROVER_RUN_ID",
        "DROVER_TASK_KEY",
        # the run's Change and Task branch (seed 003 "Workspace preparation")
        "DROVER_CHANGE_ID",
        "DROVER_BRANCH",
        "GREETING",
        "LC_CTYPE",
        # git's safe.directory for agentd's read-only git directory (drover.core.workspace)
        "GIT_CONFIG_COUNT",
        "GIT_CONFIG_KEY_0",
        "GIT_CONFIG_VALUE_0",
        # the project's git identity for commits made in the sandbox
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
    }
    assert env["DROVER_RUN_ID"] == run_id
    # the run's workspace and its disk image go; agentd's spare formatted images for the next runs stay
    assert wait_for(lambda: not runs_left(agent.work_dir), 10, what="the workspace to be removed")


def runs_left(work_dir: pathlib.Path) -> list[str]:
    return [p.name for p in work_dir.iterdir() if p.name != run_disk.SPARES]


def test_a_project_without_a_repository_runs_in_an_empty_directory(fleet: Fleet) -> None:
    fleet.start_plane()
    fleet.plane.add_project("bare")
    fleet.agent("bare-agent")
    with fleet.plane.client() as client:
        change = client.submit_change("bare", "list", [task("ls", python_command("import os; print(os.listdir('.'))"))])
        list(client.watch(change.id))
        final = client.get_change(change.id)
        out = "".join(ln.text for ln in client.run_logs(final.tasks[0].latest_run_id) if ln.stream == "stdout")
    assert final.status == "succeeded"
    assert out == "[]\n"


def test_pool_projects_run_only_on_their_pool(fleet: Fleet) -> None:
    fleet.start_plane()
    fleet.plane.add_project("web", pool="web")
    fleet.agent("general", capacity=4)
    fleet.agent("web-1", capacity=1, labels=("pool=web",))
    with fleet.plane.client() as client:
        change = client.submit_change("web", "pool", [task(f"t{i}", ["true"]) for i in range(3)])
        list(client.watch(change.id))
        runs = client.list_runs(change_id=change.id)
    assert {r.agent for r in runs} == {"web-1"}
    assert all(r.state == "succeeded" for r in runs)


def test_the_control_plane_on_postgresql_runs_a_change_and_survives_a_restart(pg_fleet: Fleet, git_repo) -> None:
    plane = pg_fleet.start_plane()
    plane.add_project("sample", str(git_repo))
    pg_fleet.agent("pg-agent", capacity=2)
    slow = python_command("import time\nfor i in range(30):\n    print(i, flush=True); time.sleep(0.05)")
    with plane.client() as client:
        change = client.submit_change(
            "sample", "on postgres", [task("first", slow), task("second", COUNT, depends_on=("first",))]
        )
        wait_for(lambda: client.get_change(change.id).status == "running", 30, what="the change to run")
    plane.kill9()
    plane.start()
    with plane.client() as client:
        events = list(client.watch(change.id))
        final = client.get_change(change.id)
        first = client.get_run(final.tasks[0].latest_run_id)
        out = "".join(ln.text for ln in client.run_logs(first.id) if ln.stream == "stdout")
    assert final.status == "succeeded"
    assert out == "".join(f"{i}\n" for i in range(30))
    assert [e.kind for e in events].count("change.finished") == 1


def test_a_drained_agent_gets_no_new_runs(fleet: Fleet) -> None:
    fleet.start_plane()
    fleet.plane.add_project("drain")
    fleet.agent("leaving", capacity=4)
    fleet.agent("staying", capacity=1)
    with fleet.plane.client() as client:
        drained = client.drain_agent("leaving")
        assert drained.draining
        change = client.submit_change("drain", "drain", [task(f"t{i}", ["true"]) for i in range(3)])
        list(client.watch(change.id))
        runs = client.list_runs(change_id=change.id)
        agents = {a.name: a for a in client.list_agents()}
    assert {r.agent for r in runs} == {"staying"}
    assert agents["leaving"].draining and agents["leaving"].connected
