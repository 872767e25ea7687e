"""Which forge errors pass and when a delivery is tried again (controlplane.domain.forge_retry)."""

from __future__ import annotations

import datetime as dt

import pytest

from controlplane.domain.forge_retry import BACKOFF_SECONDS, next_attempt, passing

NOW = dt.datetime(2026, 12, 3, 12, 0, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("status", "passes"),
    [(None, True), (500, True), (502, True), (503, True), (429, True)]
    + [(0, False), (400, False), (401, False), (403, False), (404, False), (410, False), (422, False)],
)
def test_unreachable_server_errors_and_rate_limits_pass_refusals_do_not(status: int | None, passes: bool) -> None:
    assert passing(status) is passes


def test_the_waits_grow_and_end() -> None:
    waits = [next_attempt(n, NOW) for n in range(1, len(BACKOFF_SECONDS) + 2)]
    assert [(w - NOW).total_seconds() for w in waits[:-1] if w] == [5, 15, 45, 120, 300, 600]
    assert waits[-1] is None and next_attempt(0, NOW) is None
