"""When a kept forge delivery whose processing failed on a passing forge error is tried again (issue 28),
the pure part: a forge that answered 5xx or 429, or could not be reached, is tried again after a growing
wait; one that refused for good (401, 403, 404, 422) fails the delivery at once."""

from __future__ import annotations

import datetime as dt

BACKOFF_SECONDS = (5, 15, 45, 120, 300, 600)
"""The waits before the second, third, ... try: about 18 minutes in all, then the delivery fails."""


def passing(status: int | None) -> bool:
    """Whether a forge error may pass: no answer at all (None), the forge's own failure, or rate limiting."""
    return status is None or status >= 500 or status == 429


def next_attempt(attempts: int, now: dt.datetime) -> dt.datetime | None:
    """When to try a delivery again after `attempts` failed tries (1: the first); None: give up."""
    if attempts < 1 or attempts > len(BACKOFF_SECONDS):
        return None
    return now + dt.timedelta(seconds=BACKOFF_SECONDS[attempts - 1])
