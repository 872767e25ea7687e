"""When a running run has made no progress for too many checks: tables over the pure rule."""

from __future__ import annotations

import datetime as dt

import pytest

from controlplane.domain import run_ceiling

T0 = dt.datetime(2026, 12, 3, 8, 0, 0, tzinfo=dt.UTC)
MINUTE = dt.timedelta(seconds=60)


def at(seconds: float | None) -> dt.datetime | None:
    return None if seconds is None else T0 + dt.timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("last_activity", "started", "checking_since", "now", "ended"),
    [
        (None, 0, 0, 899, False),  # 14 checks without progress
        (None, 0, 0, 900, True),  # the 15th: ended
        (600, 0, 0, 900, False),  # output 5 min ago
        (600, 0, 0, 1499, False),
        (600, 0, 0, 1500, True),  # 15 min after the last output
        (None, 0, 3600, 4000, False),  # a new leader (or a restart): a full window from when it began checking
        (None, 0, 3600, 4500, True),
        (4000, 0, 3600, 4500, False),  # activity since then counts
        (None, 2000, 0, 2899, False),  # from its start, not from the check's
        (-100, 0, 0, 900, True),  # activity recorded before a start (a resumed run) never extends it
    ],
)
def test_a_run_ends_after_the_checks_without_progress(
    last_activity: float | None, started: float, checking_since: float, now: float, ended: bool
) -> None:
    checking = at(checking_since)
    assert checking is not None
    reason = run_ceiling.stall_reason(
        at(last_activity), at(started), checking, T0 + dt.timedelta(seconds=now), MINUTE, 15
    )
    assert bool(reason) is ended
    if ended:
        assert reason == "no_progress: no output, model or tool call for 15 min"


def test_a_run_waiting_for_an_answer_is_not_ended() -> None:
    silent_for_hours = (None, T0, T0, T0 + dt.timedelta(hours=5), MINUTE, 15)
    assert run_ceiling.stall_reason(*silent_for_hours, held=True) == ""
    assert run_ceiling.stall_reason(*silent_for_hours, held=False) != ""


@pytest.mark.parametrize(
    ("every", "checks", "said"),
    [(60, 15, "15 min"), (0.5, 4, "2 s"), (30, 3, "90 s"), (60, 1, "1 min"), (0.25, 3, "0.75 s")],
)
def test_the_reason_says_how_long_the_run_was_silent(every: float, checks: int, said: str) -> None:
    reason = run_ceiling.stall_reason(None, T0, T0, T0 + dt.timedelta(hours=9), dt.timedelta(seconds=every), checks)
    assert reason == f"no_progress: no output, model or tool call for {said}"
