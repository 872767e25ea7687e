"""Timeouts, the output limit, kept workspaces and keepalive pings, on real processes."""

from __future__ import annotations

import pathlib
import time

from tests.conftest import Fleet, holds, python_command, task

SLEEP = python_command("import time; print('sleeping', flush=True); time.sleep(120)")


def _finish(fleet: Fleet, tasks: list[dict]) -> tuple:
    with fleet.plane.client() as client:
        change = client.submit_change("limits", "limits", tasks)
        list(client.watch(change.id))
        final = client.get_change(change.id)
        runs = {t.key: client.get_run(t.latest_run_id) for t in final.tasks}
        logs = {key: list(client.run_logs(run.id)) for key, run in runs.items()}
    return final, runs, logs


def test_a_task_timeout_and_the_agent_default_timeout_fail_the_run(fleet: Fleet) -> None:
    fleet.start_plane()
    fleet.plane.add_project("limits")
    fleet.agent("timer", capacity=2, extra=("--default-timeout-seconds", "2", "--kill-grace-seconds", "1"))
    started = time.monotonic()
    _final, runs, logs = _finish(fleet, [task("own", SLEEP, timeout_seconds=1), task("default", SLEEP)])
    assert time.monotonic() - started < 30
    for key in ("own", "default"):
        assert runs[key].state == "failed" and runs[key].reason == "timeout", key
    system = "".join(ln.text for ln in logs["own"] if ln.stream == "system")
    assert "timed out after 1 s" in system
    assert "timed out after 2 s" in "".join(ln.text for ln in logs["default"] if ln.stream == "system")


def test_output_over_the_limit_is_dropped_with_one_system_line(fleet: Fleet) -> None:
    fleet.start_plane("--output-limit-bytes", "50000")
    fleet.plane.add_project("limits")
    fleet.agent("chatty")
    loud = python_command("import sys\nfor i in range(20000):\n    print(f'line {i:06d}')\n")
    _final, runs, logs = _finish(fleet, [task("loud", loud)])
    run, lines = runs["loud"], logs["loud"]
    assert run.state == "succeeded" and run.output_truncated
    kept = [ln for ln in lines if "later output" not in ln.text]
    assert sum(len(ln.text.encode()) for ln in kept) == 50000  # exactly the limit, then nothing
    assert "".join(ln.text for ln in kept).startswith("line 000000\nline 000001\n")
    dropped = [ln for ln in lines if "later output of this run is dropped" in ln.text]
    assert len(dropped) == 1 and lines[-1] is dropped[0]


def test_keep_workspaces_leaves_the_clone(fleet: Fleet, git_repo: pathlib.Path) -> None:
    fleet.start_plane()
    fleet.plane.add_project("limits", str(git_repo))
    agent = fleet.agent("keeper", extra=("--keep-workspaces",))
    _final, runs, _ = _finish(fleet, [task("touch", python_command("open('made-here.txt', 'w').write('x')"))])
    kept = agent.work_dir / runs["touch"].id / "repo"
    assert (kept / "made-here.txt").exists() and (kept / "README.md").exists()


def test_keepalive_pings_every_second_do_not_break_an_idle_stream(fleet: Fleet, tmp_path: pathlib.Path) -> None:
    plane = fleet.start_plane()
    plane.add_project("limits")
    config = tmp_path / "pinger.toml"
    config.write_text("keepalive_seconds = 1\n")
    fleet.agent("pinger", extra=("--config", str(config)))
    with plane.client() as client:
        # Idle, pinging every second: no event says "n pings went by", so the stream is watched for 8 s
        # (a server that minded the pings would GOAWAY by the third) and the test fails when it drops.
        holds(
            lambda: not client.list_events(kind="agent.disconnected"),
            8,
            interval=0.5,
            what="the idle stream (agent.disconnected came)",
        )
        connects = client.list_events(kind="agent.connected")
        _final, runs, _ = _finish(fleet, [task("still-there", ["true"])])
    assert len(connects) == 1, "the stream was dropped and re-opened"
    assert runs["still-there"].state == "succeeded"
