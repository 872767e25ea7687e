"""Runs lose nothing across an agentd kill -9, a control-plane kill -9, and agents that never return."""

from __future__ import annotations

import shutil
import time
import uuid

import pytest

from drover import Client
from tests.conftest import Fleet, host_processes, python_command, task, wait_for

LINES = 10_000
# Prints LINES numbered lines over a few seconds, so kills land mid-run.
NUMBERED = python_command(
    "import sys, time\n"
    f"for i in range({LINES}):\n"
    "    print(f'line {i:05d}', flush=True)\n"
    "    if i % 50 == 0: time.sleep(0.02)\n"
)
EXPECTED = "".join(f"line {i:05d}\n" for i in range(LINES))


def _stdout(client: Client, run_id: str) -> str:
    return "".join(ln.text for ln in client.run_logs(run_id) if ln.stream == "stdout")


def _running_run(client: Client, change_id: str) -> str:
    def started() -> str:
        run_id = client.get_change(change_id).tasks[0].latest_run_id
        return run_id if run_id and client.get_run(run_id).state == "running" else ""

    return wait_for(started, 30, what="the run to start")


@pytest.mark.parametrize("stop", ["kill9", "sigterm"])
def test_agentd_restart_delivers_every_line_once(fleet: Fleet, stop: str) -> None:
    """kill -9 (a crash) or SIGTERM (an upgrade): the run goes on and nothing is lost or repeated."""
    fleet.start_plane()
    fleet.plane.add_project("durable")
    agent = fleet.agent("steady")
    with fleet.plane.client() as client:
        change = client.submit_change("durable", "survive", [task("count", NUMBERED)])
        run_id = _running_run(client, change.id)
        wait_for(lambda: client.get_run(run_id).output_bytes > 20_000, 30, what="some output to arrive")
        agent.kill9() if stop == "kill9" else agent.stop()
        at_kill = client.get_run(run_id).output_bytes
        assert at_kill < len(EXPECTED), "the run finished before the kill; the test proves nothing"
        # The supervisor keeps printing while agentd is gone: its output file grows on the spool.
        output = agent.spool / "runs" / run_id / "output.jsonl"
        spooled = output.stat().st_size
        wait_for(lambda: output.stat().st_size > spooled + 1000, 30, what="output spooled while agentd is gone")
        agent.start()
        events = list(client.watch(change.id))
        run = client.get_run(run_id)
        assert run.state == "succeeded", agent.log()
        assert _stdout(client, run_id) == EXPECTED
    assert [e.kind for e in events if e.run_id == run_id].count("run.finished") == 1
    assert "re-attached to run " + run_id in agent.log()


def test_controlplane_kill9_and_restart_keeps_output_and_result_once(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    plane.add_project("durable")
    fleet.agent("patient")
    with plane.client() as client:
        change = client.submit_change("durable", "survive", [task("count", NUMBERED)])
        run_id = _running_run(client, change.id)
        wait_for(lambda: client.get_run(run_id).output_bytes > 20_000, 30, what="some output to arrive")
    plane.kill9()
    # agentd keeps the run going and its output in the outbox while the control plane is gone.
    output = fleet.agents[0].spool / "runs" / run_id / "output.jsonl"
    spooled = output.stat().st_size
    wait_for(lambda: output.stat().st_size > spooled + 1000, 30, what="output spooled while the control plane is gone")
    plane.start()
    with plane.client() as client:
        events = list(client.watch(change.id))
        run = client.get_run(run_id)
        assert run.state == "succeeded"
        assert _stdout(client, run_id) == EXPECTED
        assert client.get_change(change.id).status == "succeeded"
    assert [e.kind for e in events if e.run_id == run_id].count("run.finished") == 1


def test_an_agent_that_never_returns_fails_its_run_as_agent_lost(fleet: Fleet) -> None:
    fleet.start_plane("--agent-lost-seconds", "2")
    fleet.plane.add_project("lost")
    agent = fleet.agent("gone")
    with fleet.plane.client() as client:
        submitted_at = time.monotonic()  # the agent was last heard after this (its run's start)
        change = client.submit_change(
            "lost",
            "wait",
            [
                task("sleep", python_command("import time; time.sleep(120)")),
                task("after", ["true"], depends_on=("sleep",)),
            ],
        )
        run_id = _running_run(client, change.id)
        agent.kill9()
        fleet.stop_supervisors()  # the whole machine is gone, not just agentd
        lost_at = time.monotonic()
        events = list(client.watch(change.id))
        waited = time.monotonic() - lost_at
        since_last_heard = time.monotonic() - submitted_at
        run = client.get_run(run_id)
        final = client.get_change(change.id)
    assert run.state == "failed" and run.reason == "agent_lost"
    assert since_last_heard >= 2.0 and waited < 15  # the lost window counts from when it was last heard
    assert final.status == "failed"
    assert {t.key: t.status for t in final.tasks} == {"sleep": "failed", "after": "blocked"}
    kinds = [e.kind for e in events]
    assert kinds.index("run.finished") < kinds.index("change.finished")


def _spawns(marker: str) -> list[str]:
    return python_command(
        "import os, signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)  # make the SIGKILL after the grace period necessary\n"
        f"kids = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', {marker!r}])"
        " for _ in range(2)]\n"
        "print('pids', os.getpid(), *[k.pid for k in kids], flush=True)\n"
        "time.sleep(300)\n"
    )


def test_cancel_stops_the_whole_process_group_within_the_grace_period(fleet: Fleet) -> None:
    fleet.start_plane()
    fleet.plane.add_project("cancel")
    fleet.agent("stopper", extra=("--kill-grace-seconds", "2"))
    marker = f"drover-spawn-{uuid.uuid4().hex}"
    with fleet.plane.client() as client:
        change = client.submit_change("cancel", "cancel me", [task("spawn", _spawns(marker))])
        run_id = _running_run(client, change.id)
        line = wait_for(lambda: _stdout(client, run_id), 30, what="the pids line")
        assert line.split()[1] == "2"  # its own PID namespace: bwrap's init is 1, the command 2
        pids = wait_for(
            lambda: host_processes(marker) if len(host_processes(marker)) == 3 else [],
            10,
            what="the command and its two children",
        )
        asked = time.monotonic()
        client.cancel_run(run_id, "operator says stop")
        wait_for(lambda: not set(host_processes(marker)) & set(pids), 10, what="the process group to be gone")
        gone_after = time.monotonic() - asked
        wait_for(lambda: client.get_run(run_id).state == "cancelled", 10, what="the run to be cancelled")
        final = client.get_change(change.id)
        system = "".join(ln.text for ln in client.run_logs(run_id) if ln.stream == "system")
    assert gone_after < 2 + 3  # the grace period plus delivery
    assert final.tasks[0].status == "cancelled"
    assert "cancelled: stopping the process group" in system


def test_cancel_change_ends_running_and_queued_runs(fleet: Fleet) -> None:
    fleet.start_plane()
    fleet.plane.add_project("cancel")
    fleet.agent("one", capacity=1)
    sleep = python_command("import time; time.sleep(300)")
    with fleet.plane.client() as client:
        change = client.submit_change(
            "cancel", "cancel all", [task("a", sleep), task("b", sleep), task("c", ["true"], depends_on=("a",))]
        )
        _running_run(client, change.id)
        client.cancel_change(change.id)
        events = list(client.watch(change.id))
        final = client.get_change(change.id)
        runs = client.list_runs(change_id=change.id)
    assert final.status == "cancelled"
    assert {t.key: t.status for t in final.tasks} == {"a": "cancelled", "b": "cancelled", "c": "cancelled"}
    assert sorted(r.state for r in runs) == ["cancelled", "cancelled"]
    assert events[-1].kind == "change.finished" and events[-1].data["status"] == "cancelled"


def test_an_agentd_that_comes_back_without_its_runs_fails_them_at_once(fleet: Fleet) -> None:
    fleet.start_plane()
    fleet.plane.add_project("durable")
    agent = fleet.agent("amnesiac")
    with fleet.plane.client() as client:
        change = client.submit_change(
            "durable", "lose the disk", [task("sleep", python_command("import time; time.sleep(120)"))]
        )
        run_id = _running_run(client, change.id)
        agent.kill9()
        fleet.stop_supervisors()
        shutil.rmtree(agent.spool)  # a new VM with the same name
        agent.start()
        events = list(client.watch(change.id))
        run = client.get_run(run_id)
    assert run.state == "failed" and run.reason == "agent_restarted"
    assert [e.kind for e in events][-1] == "change.finished"


def test_controlplane_sigterm_stops_at_once_and_a_restart_finishes_the_run(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    plane.add_project("durable")
    fleet.agent("loyal")
    with plane.client() as client:
        change = client.submit_change("durable", "graceful", [task("count", NUMBERED)])
        run_id = _running_run(client, change.id)
    asked = time.monotonic()
    plane.stop()
    assert time.monotonic() - asked < 5, "an agent stream held the shutdown for the whole grace period"
    assert plane.proc is not None and plane.proc.returncode == 0
    plane.start()
    with plane.client() as client:
        list(client.watch(change.id))
        assert client.get_run(run_id).state == "succeeded"
        assert _stdout(client, run_id) == EXPECTED
