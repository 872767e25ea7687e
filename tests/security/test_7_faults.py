"""Finding 7 (the control plane's part): a hung (SIGSTOPped) agent was noticed 60-86 s late, so its runs
failed after about 3.5 min instead of the 2 min of seed 003; a second `controlplane serve` on the same
port started silently (both listened), marked the first one's agents disconnected, and the first then
failed live runs as agent_lost. (A full spool disk is test_7_spool_disk_full.py.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import Fleet, holds, python_command, task, wait_for

LOST, SILENCE = 6.0, 2.0


def test_a_hung_agent_fails_its_runs_one_lost_window_after_it_fell_silent(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DROVER_AGENTD_KEEPALIVE_SECONDS", "1")  # heartbeats every second
    plane = fleet.start_plane("--agent-lost-seconds", str(LOST), "--agent-silence-seconds", str(SILENCE))
    plane.add_project("hang")
    agent = fleet.agent("frozen")
    with plane.client() as client:
        change = client.submit_change("hang", "sleep", [task("sleep", python_command("import time; time.sleep(120)"))])
        run_id = wait_for(
            lambda: (runs := client.list_runs(change_id=change.id)) and runs[0].state == "running" and runs[0].id,
            30,
            what="the run to start",
        )
        time.sleep(1.5)  # a heartbeat or two goes by
        assert agent.proc is not None
        os.kill(agent.proc.pid, signal.SIGSTOP)  # hung: its TCP connection stays open, it says nothing
        hung = time.monotonic()
        try:
            run = wait_for(
                lambda: (r := client.get_run(run_id)).state == "failed" and r,
                60,
                what="the run of the hung agent to fail",
            )
            after = time.monotonic() - hung
            events = [e.kind for e in client.list_events(change_id=change.id)]
        finally:
            os.kill(agent.proc.pid, signal.SIGCONT)
    assert run.reason == "agent_lost"
    # Counted from when the agent was last heard (at most a heartbeat before it hung), plus one sweep.
    assert LOST - 1.5 <= after <= LOST + 3, f"failed {after:.1f} s after the agent hung (window {LOST} s)"
    assert "run.finished" in events


def _second_plane(fleet: Fleet, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controlplane.cli", "serve", *args],
        capture_output=True,
        text=True,
        env=fleet.plane.env(),
        timeout=60,
    )


def test_a_second_control_plane_on_the_same_port_refuses_to_start(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    plane.add_project("busy")
    fleet.agent("loyal")
    with plane.client() as client:
        change = client.submit_change("busy", "sleep", [task("sleep", python_command("import time; time.sleep(30)"))])
        wait_for(
            lambda: (runs := client.list_runs(change_id=change.id)) and runs[0].state == "running",
            30,
            what="the run to start",
        )
        done = _second_plane(fleet, "--listen", plane.target, "--data-dir", str(fleet.tmp / "other"))
        assert done.returncode != 0
        assert f"cannot listen on {plane.target}" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
        holds(
            lambda: [a.connected for a in client.list_agents()] == [True],
            2,
            interval=0.2,
            what="the agent's stream, while the second control plane failed",
        )
        assert client.list_runs(change_id=change.id)[0].state == "running"
        assert not list(client.list_events(kind="agent.disconnected"))
        client.cancel_change(change.id)


def test_a_second_control_plane_on_the_same_data_directory_refuses_to_start(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    done = _second_plane(fleet, "--listen", "127.0.0.1:0", "--data-dir", str(plane.data_dir))
    assert done.returncode != 0
    assert f"another control plane (pid {plane.proc.pid}) is serving from {plane.data_dir}" in done.stderr, done.stderr
    with plane.client() as client:
        assert client.list_changes() == []  # the first one serves on
