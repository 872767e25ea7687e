"""Issue 24, finding 8: a control-plane outage longer than the lost window failed runs that succeeded.
The control plane was down about two minutes while a run finished on its agent; the liveness sweep ran
5 s after the restart, before the agent's backoff let it reconnect, and the run ended `agent_lost` (its
Change failed, a dependent Task blocked) though its whole output and result arrived seconds later.

Now every agent has a full lost window from a control-plane start to reconnect, and a success that
reaches a run already judged lost (its agent really was gone that long) is applied if its Task was not
run again.

The outage is scaled down by default (lost window 6 s, agentd's backoff capped at 2 s, outage 15 s:
the same shape as 120 s, 30 s and 3 minutes). `DROVER_TEST_OUTAGE_SECONDS=180` runs the real thing
with the production defaults (lost window 120 s, backoff cap 30 s); about 4 minutes.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.conftest import Fleet, python_command, task, wait_for

OUTAGE = float(os.environ.get("DROVER_TEST_OUTAGE_SECONDS", "15"))
REAL = OUTAGE >= 150  # production settings: seed 003's 120 s window, agentd's 30 s backoff cap
LOST = 120.0 if REAL else 6.0
BACKOFF_CAP = 30.0 if REAL else 2.0


def _plane(fleet: Fleet) -> None:
    fleet.start_plane("--agent-lost-seconds", str(LOST), "--agent-silence-seconds", str(min(30.0, LOST / 3)))
    fleet.plane.add_project("outage")


def _states(fleet: Fleet, change_id: str) -> dict[str, tuple[str, str]]:
    with fleet.plane.client() as client:
        runs = client.list_runs(change_id=change_id)
        change = client.get_change(change_id)
    return {r.task_key or r.id: (r.state, r.reason) for r in runs} | {"change": (change.status, "")}


@pytest.mark.timeout(900)
@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_a_run_that_finishes_during_a_control_plane_outage_succeeds(
    tmp_path, database: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DROVER_AGENTD_RECONNECT_MAX_SECONDS", str(BACKOFF_CAP))
    fleet = Fleet(tmp_path, database_url=request.getfixturevalue("pg_url") if database == "postgresql" else "")
    request.addfinalizer(fleet.stop)
    _plane(fleet)
    fleet.agent("steady")
    # Runs into the outage and finishes inside it: its output and result wait in agentd's outbox.
    finish_after = 2 + OUTAGE / 2
    build = task("build", python_command(f"import time; print('building', flush=True); time.sleep({finish_after})"))
    ship = task("ship", python_command("print('shipped')"), depends_on=("build",))
    with fleet.plane.client() as client:
        change = client.submit_change("outage", "build then ship", [build, ship])
        run_id = wait_for(
            lambda: (runs := client.list_runs(change_id=change.id)) and runs[0].state == "running" and runs[0].id,
            60,
            what="the build run to start",
        )
    # Down the way an operator takes it down (SIGTERM, a clean stop) on SQLite; killed outright on PostgreSQL,
    # where the agents' leases in the database are what tells the next start they are gone.
    if database == "postgresql":
        fleet.plane.kill9()
    else:
        fleet.plane.stop()
    down = time.monotonic()
    time.sleep(OUTAGE)
    fleet.plane.start()  # same data directory, same database, same port
    restarted = time.monotonic()
    with fleet.plane.client() as client:
        done = wait_for(
            lambda: (c := client.get_change(change.id)).status in ("succeeded", "failed") and c,
            LOST + BACKOFF_CAP + 120,
            interval=0.5,
            what="the Change to end after the restart",
        )
        run = client.get_run(run_id)
        runs = {r.task_key: r for r in client.list_runs(change_id=change.id)}
        events = [e.kind for e in client.list_events(change_id=change.id)]
    print(
        f"outage {restarted - down:.1f} s (lost window {LOST:g} s, backoff cap {BACKOFF_CAP:g} s); "
        f"Change {done.status} {time.monotonic() - restarted:.1f} s after the restart"
    )
    assert run.state == "succeeded", f"the build run ended {run.state} ({run.reason}); events {events}"
    assert done.status == "succeeded", f"the Change ended {done.status}; runs {runs}"
    assert runs["ship"].state == "succeeded", "the dependent Task ran after the restart"
    assert "run.late_result_applied" not in events, "the run was never judged lost"


def test_a_success_that_reaches_a_run_judged_lost_is_applied(fleet: Fleet) -> None:
    """The agent really was gone longer than the window (hung: SIGSTOP) while its run finished; its run
    failed agent_lost, the dependent Task was blocked and the Change failed. When it comes back with the
    run's success, nothing has re-run the Task: the result is applied and the Change goes on."""
    _plane(fleet)
    agent = fleet.agent("sleepy")
    build = task("build", python_command("import time; print('building', flush=True); time.sleep(3); print('built')"))
    ship = task("ship", python_command("print('shipped')"), depends_on=("build",))
    with fleet.plane.client() as client:
        change = client.submit_change("outage", "build then ship", [build, ship])
        run_id = wait_for(
            lambda: (runs := client.list_runs(change_id=change.id)) and runs[0].state == "running" and runs[0].id,
            60,
            what="the build run to start",
        )
        assert agent.proc is not None
        os.kill(agent.proc.pid, signal.SIGSTOP)  # its run's supervisor goes on and finishes
        try:
            lost = wait_for(lambda: (r := client.get_run(run_id)).state == "failed" and r, LOST + 30, what="agent_lost")
            assert lost.reason == "agent_lost"
            failed = wait_for(lambda: (c := client.get_change(change.id)).status == "failed" and c, 30, what="failure")
            assert failed.status == "failed"
        finally:
            os.kill(agent.proc.pid, signal.SIGCONT)
        done = wait_for(
            lambda: (c := client.get_change(change.id)).status == "succeeded" and c,
            90,
            interval=0.5,
            what=f"the Change to go on with the late result ({_states(fleet, change.id)})",
        )
        run = client.get_run(run_id)
        events = list(client.list_events(change_id=change.id))
        ship_run = next(r for r in client.list_runs(change_id=change.id) if r.id != run_id)
    assert done.status == "succeeded"
    assert run.state == "succeeded" and run.exit_code == 0
    assert ship_run.state == "succeeded"
    kinds = [e.kind for e in events]
    assert "run.late_result_applied" in kinds and "change.reopened" in kinds, kinds
    assert kinds.index("run.late_result_applied") > kinds.index("run.finished")
