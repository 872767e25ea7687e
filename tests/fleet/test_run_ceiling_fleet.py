"""Run ceilings on a real fleet: the control plane checks each running run and ends one that makes no
progress (no output, model or tool call) for `run_stall_checks` checks as `timeout`, whatever its Task's
own timeout; its agent kills the command. A run that keeps printing is left alone."""

from __future__ import annotations

import uuid

from tests.conftest import Fleet, holds, host_processes, python_command, task, wait_for

CHECK, STALLS = 0.5, 4  # a run silent for 2 s is ended


def test_a_silent_run_ends_as_timeout_and_a_chatty_one_goes_on(fleet: Fleet) -> None:
    fleet.start_plane("--run-check-seconds", str(CHECK), "--run-stall-checks", str(STALLS))
    fleet.plane.add_project("ceiling")
    fleet.agent("worker", capacity=2)
    marker = f"drover-silent-{uuid.uuid4().hex}"
    silent = python_command(f"import time; time.sleep(120)  # {marker}")
    chatty = python_command("import time\nfor i in range(24):\n    print('tick', i, flush=True)\n    time.sleep(0.5)\n")
    with fleet.plane.client() as client:
        change = client.submit_change(
            "ceiling",
            "one silent, one chatty",
            [task("silent", silent, timeout_seconds=600), task("chatty", chatty, timeout_seconds=600)],
        )

        def runs() -> dict[str, str]:
            found = {t.key: t.latest_run_id for t in client.get_change(change.id).tasks}
            return found if all(found.values()) else {}

        ids = wait_for(runs, 30, what="both runs")
        wait_for(lambda: host_processes(marker), 30, what="the silent command to start")
        ended = wait_for(
            lambda: client.get_run(ids["silent"]) if client.get_run(ids["silent"]).state == "failed" else None,
            30,
            what="the silent run to be ended",
        )
        wait_for(lambda: not host_processes(marker), 15, what="the silent command to be killed")
        # The chatty run prints every 0.5 s for 12 s, six times the ceiling: it is never ended.
        holds(lambda: client.get_run(ids["chatty"]).state == "running", 6, what="the chatty run to go on")
        chatty_run = wait_for(
            lambda: client.get_run(ids["chatty"]) if client.get_run(ids["chatty"]).state != "running" else None,
            30,
            what="the chatty run to finish",
        )
        events = client.list_events(run_id=ids["silent"])
        silent_task = next(t for t in client.get_change(change.id).tasks if t.key == "silent")
    assert ended.reason == "timeout"
    stalled = [e for e in events if e.kind == "run.no_progress"]
    assert len(stalled) == 1
    run_started = next(e for e in events if e.kind == "run.started")
    assert run_started.created_at is not None and stalled[0].created_at is not None
    silence = (stalled[0].created_at - run_started.created_at).total_seconds()
    assert CHECK * STALLS <= silence < 20  # ended by the check after 2 s of silence, not the Task's 600 s timeout
    assert stalled[0].data["reason"] == "no_progress: no output, model or tool call for 2 s"
    finished = [e for e in events if e.kind == "run.finished"]
    assert finished[0].data["reason"] == "timeout"
    assert finished[0].data["error"] == "no_progress: no output, model or tool call for 2 s"
    assert silent_task.status == "failed"
    assert chatty_run.state == "succeeded" and chatty_run.reason == ""
    # GetRun shows when the run last made progress (as of the last check): well after its start.
    assert chatty_run.started_at is not None and chatty_run.last_activity_at is not None
    assert (chatty_run.last_activity_at - chatty_run.started_at).total_seconds() > 5
