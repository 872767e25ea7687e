"""When a running run has stopped making progress (seed 000/001 "Liveness").

The control plane checks each running run every `run_check_seconds`; a run that shows no progress (no
output, model call or tool call) for `run_stall_checks` checks in a row ends as `timeout`, whatever its
Task's own timeout. Progress is counted from the run's last activity, its start, or the moment this
control plane began checking, whichever is latest: a control plane that was down, or a replica that
just took the lead (and never saw what the last leader held in memory), gives every run a full window.
A run held by an open blocking question waits for people, not for itself: the project's answer window
(which parks it) governs it, and the window starts afresh when it is answered.
"""

from __future__ import annotations

import datetime as dt


def progress_since(
    last_activity: dt.datetime | None, started: dt.datetime | None, checking_since: dt.datetime
) -> dt.datetime:
    """Since when a run counts as making no progress."""
    return max(t for t in (last_activity, started, checking_since) if t is not None)


def checks_without_progress(since: dt.datetime, now: dt.datetime, every: dt.timedelta) -> int:
    """Whole checks that passed since `since` with nothing from the run."""
    return max(int((now - since) / every), 0)


def stall_reason(
    last_activity: dt.datetime | None,
    started: dt.datetime | None,
    checking_since: dt.datetime,
    now: dt.datetime,
    every: dt.timedelta,
    limit: int,
    held: bool = False,
) -> str:
    """Why the run is ended (`no_progress: ...`), or "" while it may go on (`held`: it waits for an
    answer to a blocking question)."""
    if held:
        return ""
    since = progress_since(last_activity, started, checking_since)
    if checks_without_progress(since, now, every) < limit:
        return ""
    return f"no_progress: no output, model or tool call for {span(every * limit)}"


def span(d: dt.timedelta) -> str:
    """15 min, 90 s, 2 s: how long a run may go without progress, as a person reads it."""
    seconds = d.total_seconds()
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"
