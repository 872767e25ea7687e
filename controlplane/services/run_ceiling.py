"""Run ceilings in the store: the activity a replica saw, flushed once per check, and the running runs
that made no progress for too many checks, ended as `timeout` (controlplane/domain/run_ceiling.py)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from controlplane.domain import escalation, run_ceiling
from controlplane.services.run_lifecycle import finish_run
from controlplane.store.engine import aware
from controlplane.store.events import run_event
from controlplane.store.models import Question, Run
from controlplane.store.objects import ObjectStore

BATCH = 500
"""Runs read per query when flushing activity (a query parameter each)."""


def record_activity(s: Session, seen: Mapping[str, dt.datetime]) -> int:
    """Move each active run's `last_activity_at` forward to when a replica last saw it; answers how many
    rows moved. One statement per run, once per check: never one per output line or model call."""
    ids, moved = sorted(seen), 0
    for start in range(0, len(ids), BATCH):
        chunk = ids[start : start + BATCH]
        rows = s.execute(select(Run.id, Run.last_activity_at, Run.state).where(Run.id.in_(chunk))).all()
        for run_id, last, state in rows:
            when = seen[run_id]
            if state in ("starting", "running") and (last is None or aware(last) < when):  # type: ignore[operator]
                s.get(Run, run_id).last_activity_at = when  # type: ignore[union-attr]
                moved += 1
    return moved


@dataclasses.dataclass(frozen=True)
class Stalled:
    """A run ended for want of progress: its agent is told to cancel it."""

    run_id: str
    agent: str
    reason: str


def end_stalled_runs(
    s: Session,
    now: dt.datetime,
    every: dt.timedelta,
    limit: int,
    checking_since: dt.datetime,
    policy: escalation.Policy | None = None,
    objects: ObjectStore | None = None,
) -> list[Stalled]:
    """End as `timeout` every running run with no progress for `limit` checks of `every`."""
    rows = s.execute(
        select(Run.id, Run.change_id, Run.started_at, Run.last_activity_at).where(Run.state == "running")
    ).all()
    held = set(s.scalars(select(Question.run_id).where(Question.state == "open", Question.blocking)))
    answered = {  # an answer starts the window afresh, before its receipt is flushed
        row[0]: row[1]
        for row in s.execute(
            select(Question.run_id, func.max(Question.answered_at))
            .join(Run, Run.id == Question.run_id)
            .where(Run.state == "running", Question.answered_at.is_not(None))
            .group_by(Question.run_id)
        )
    }
    due = []
    for run_id, change_id, started, last in rows:
        activity = [t for t in (aware(last), aware(answered.get(run_id))) if t is not None]
        since = max(activity, default=None), aware(started), checking_since
        reason = run_ceiling.stall_reason(*since, now, every, limit, held=run_id in held)
        if reason:
            due.append((change_id, run_id, reason))
    ended = []
    for _, run_id, reason in sorted(due):  # Changes locked in sorted order (store.locks)
        run = s.get(Run, run_id)
        if run is None or run.state != "running":
            continue
        last = aware(run.last_activity_at)
        run_event(
            s,
            "run.no_progress",
            run,
            reason=reason,
            checks=limit,
            check_seconds=every.total_seconds(),
            last_activity_at=last.isoformat() if last else "",
        )
        finish_run(s, run, "failed", exit_code=-1, reason="timeout", error=reason, policy=policy, objects=objects)
        ended.append(Stalled(run.id, run.agent, reason))
    return ended
