"""When an agent is lost (a window while a control plane was up to hear it), and what a result that
comes after that judgement does: tables over the pure rules."""

from __future__ import annotations

import datetime as dt

import pytest

from controlplane.domain import presence

T0 = dt.datetime(2026, 12, 2, 8, 0, 0, tzinfo=dt.UTC)
WINDOW = dt.timedelta(seconds=120)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("disconnected", "up_since", "now", "lost"),
    [
        (None, 0, 1000, False),  # connected
        (0, 0, 119, False),
        (0, 0, 120, True),
        (-600, 0, 5, False),  # gone before an outage: the sweep 5 s after the restart does not count it
        (-600, 0, 119, False),
        (-600, 0, 120, True),  # a full window from the start, then lost
        (10, 0, 129, False),  # gone after the start: from when it was last heard
        (10, 0, 130, True),
    ],
)
def test_an_agent_is_lost_after_a_window_while_the_control_plane_was_up(
    disconnected: float | None, up_since: float, now: float, lost: bool
) -> None:
    gone = None if disconnected is None else at(disconnected)
    assert presence.is_lost(gone, at(up_since), WINDOW, at(now)) is lost


@pytest.mark.parametrize(
    ("started", "last_sweep", "now", "expected"),
    [
        (None, None, 50, 50),  # this process judges for the first time: its period starts now
        (0, 45, 50, 0),  # sweeping steadily
        (0, 10, 70, 0),  # a 60 s gap is half the window: still the same period
        (0, 10, 71, 71),  # the database was out of reach longer: a new period
        (0, None, 50, 50),
    ],
)
def test_an_up_period_starts_at_the_first_judgement_and_after_a_gap(
    started: float | None, last_sweep: float | None, now: float, expected: float
) -> None:
    start = None if started is None else at(started)
    last = None if last_sweep is None else at(last_sweep)
    assert presence.up_period_start(start, last, at(now), WINDOW / 2) == at(expected)


BASE = {
    "run_reason": "agent_lost",
    "reported": "succeeded",
    "task_status": "failed",
    "task_reason": "agent_lost",
    "rerun": "",
    "change_status": "failed",
    "cancel_requested": False,
}


@pytest.mark.parametrize(
    ("change", "action", "why"),
    [
        ({}, "apply", "no other run"),
        ({"change_status": "running"}, "apply", "no other run"),
        ({"rerun": "run_2"}, "keep", "re-run as run_2"),
        ({"cancel_requested": True}, "keep", "cancelled"),
        ({"change_status": "cancelled"}, "keep", "cancelled"),
        ({"reported": "failed"}, "keep", "the agent reported failed"),
        ({"reported": "parked"}, "keep", "the agent reported parked"),
        ({"run_reason": "timeout"}, "keep", "ended timeout"),
        ({"task_status": "blocked", "task_reason": "budget_stop: change"}, "keep", "the Task is blocked"),
    ],
)
def test_a_late_result_is_applied_unless_something_moved_on(change: dict[str, object], action: str, why: str) -> None:
    verdict = presence.judge_late_result(**(BASE | change))  # type: ignore[arg-type]
    assert verdict.action == action
    assert why in verdict.why
