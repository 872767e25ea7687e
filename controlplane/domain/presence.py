"""When an agent counts as lost, and what a result that comes after that judgement does.

An agent's runs fail as `agent_lost` once it has been gone a full window while a control plane was up
to hear it: counted from when it was last heard, or from the start of the control plane's current up
period if that is later. A control plane that was down (stopped, restarting, cut off from its
database) could not have heard anyone, so an outage never counts against an agent: after every start
each agent has a whole window to reconnect and hand over what its runs did meanwhile.
"""

from __future__ import annotations

import dataclasses
import datetime as dt


def up_period_start(
    started: dt.datetime | None, last_sweep: dt.datetime | None, now: dt.datetime, gap: dt.timedelta
) -> dt.datetime:
    """The start of the current up period as of `now`: `started` (when this process began judging; None:
    it has not yet), unless its last completed sweep is over `gap` old (the database was out of reach,
    or the process stalled), when a new period begins now."""
    if started is None or last_sweep is None or now - last_sweep > gap:
        return now
    return started


def lost_clock_start(disconnected_at: dt.datetime, up_since: dt.datetime) -> dt.datetime:
    """Since when an agent has been gone while a control plane was up to hear it."""
    return max(disconnected_at, up_since)


def is_lost(disconnected_at: dt.datetime | None, up_since: dt.datetime, window: dt.timedelta, now: dt.datetime) -> bool:
    """Whether an agent gone since `disconnected_at` (None: not gone) is lost at `now`."""
    return disconnected_at is not None and now - lost_clock_start(disconnected_at, up_since) >= window


@dataclasses.dataclass(frozen=True)
class LateResult:
    """What to do with a result that reached a run already ended as `agent_lost`: `apply` it (the run
    takes the status its agent reported), or `keep` the ending it has, for `why`."""

    action: str  # apply | keep
    why: str


def judge_late_result(
    *,
    run_reason: str,
    reported: str,
    task_status: str,
    task_reason: str,
    rerun: str,
    change_status: str,
    cancel_requested: bool,
) -> LateResult:
    """A run ended as lost gets its agent's real result unless something has moved on since: the Task
    was run again (`rerun`: that run's id), or the Change was cancelled. Only a run that `agent_lost`
    ended qualifies; any other ending was the agent's own word and stands."""
    if run_reason != "agent_lost":
        return LateResult("keep", f"the run ended {run_reason or 'for another reason'}, not as agent_lost")
    if rerun:
        return LateResult("keep", f"the Task was re-run as {rerun} after this run was judged lost")
    if cancel_requested or change_status == "cancelled":
        return LateResult("keep", "the Change was cancelled after this run was judged lost")
    if reported != "succeeded":
        return LateResult("keep", f"the agent reported {reported}; the run stays failed as agent_lost")
    if not (task_status == "failed" and task_reason == "agent_lost"):
        return LateResult("keep", f"the Task is {task_status} since this run was judged lost")
    return LateResult("apply", "no other run of the Task since this run was judged lost")
