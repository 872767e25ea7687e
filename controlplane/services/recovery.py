"""Recovery after a stop (seed 000 "Escalation"): a person raises the meter that stopped work
(`raise_meter`) or runs a failed or stopped Task again (`retry_task`). Each function runs inside one
transaction and appends the Events of what it changed.

A raised provider-month or daily-calls meter keeps its new limit for its window only (the month or the
UTC day its key names); the next window starts from the configured limit again. A Project's or user's
meter follows its budget column, so raising it raises the budget itself.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Collection, Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from controlplane.config import BudgetConfig
from controlplane.domain import graph
from controlplane.services.progress import advance, queue_run
from controlplane.services.tenancy import Scope, check_owner, visible_change
from controlplane.store import meters
from controlplane.store.changes import tasks_of
from controlplane.store.events import add_event
from controlplane.store.models import Change, Meter, Project, Run, Task, Token, utcnow
from drover.errors import FailedPrecondition, InvalidArgument, NotFound, PermissionDenied

FLEET_KINDS = (meters.PROVIDER_MONTH, meters.AGENT_CALLS_DAY, meters.CLASSIFIER_CALLS_DAY)
METER_KINDS = (*FLEET_KINDS, meters.PROJECT, meters.USER)
MAX_LIMIT = 1e9
"""The highest limit a meter may be raised to (USD or calls); more is a typing slip."""


def reopen(s: Session, change: Change, tasks: Sequence[Task], stopped: Sequence[Task], why: str) -> None:
    """The `stopped` Tasks of `change` get a fresh attempt window and a queued run; the dependents
    they blocked wait again, and an ended Change runs again."""
    for task in stopped:
        task.status, task.reason, task.attempts_reset_at = "ready", "", utcnow()
        last = s.scalar(select(func.max(Run.attempt)).where(Run.task_id == task.id)) or 0
        queue_run(s, task, attempt=last + 1)
        add_event(s, "task.ready", change_id=change.id, task_id=task.id, key=task.key, reason=why)
    if not stopped:
        return
    reopened = {t.key for t in stopped}
    deps = {t.key: t.depends_on for t in tasks}
    for t in tasks:  # dependents blocked by a reopened Task wait again
        if t.status == "blocked" and t.reason.startswith("dependency ") and graph.ancestors(t.key, deps) & reopened:
            t.status, t.reason = "pending", ""
    if change.status in ("budget_blocked", "failed"):
        change.status, change.finished_at, change.reason = "running", None, ""
        add_event(s, "change.reopened", change_id=change.id, reason=why)


def stopped_on(task: Task, limits: Collection[str]) -> bool:
    """Whether a Task is blocked by a budget stop on one of `limits` (meters.REFUSALS values)."""
    return task.status == "blocked" and task.reason.startswith("budget_stop: ") and task.reason[13:] in limits


def _meter_key(kind: str, name: str, now: dt.datetime) -> str:
    month, day = now.strftime("%Y-%m"), now.strftime("%Y-%m-%d")
    return {
        meters.PROVIDER_MONTH: f"provider-usd:{month}",
        meters.AGENT_CALLS_DAY: f"agent-calls:{day}",
        meters.CLASSIFIER_CALLS_DAY: f"classifier-calls:{day}",
        meters.PROJECT: f"project-usd:{name}:{month}",
        meters.USER: f"user-usd:{name}:{month}",
    }[kind]


def _configured(kind: str, budgets: BudgetConfig) -> int:
    return {
        meters.PROVIDER_MONTH: meters.usd_micros(budgets.provider_month_usd),
        meters.AGENT_CALLS_DAY: budgets.agent_calls_per_day,
        meters.CLASSIFIER_CALLS_DAY: budgets.classifier_calls_per_day,
    }[kind]


def _current_limit(s: Session, kind: str, name: str, key: str, budgets: BudgetConfig, scope: Scope) -> int:
    """The limit in force on the meter (0: none); NOT_FOUND for a Project or user that does not exist."""
    if kind == meters.PROJECT:
        project = s.get(Project, name) if name else None
        if project is None or (scope is not None and name not in scope):
            raise NotFound(f"no project {name!r}", field="name")
        return meters.usd_micros(project.monthly_budget_usd or 0.0)
    if kind == meters.USER:
        token = s.scalar(select(Token).where(Token.name == name).order_by(Token.id).limit(1)) if name else None
        if token is None:
            raise NotFound(f"no user {name!r}", field="name")
        return meters.usd_micros(token.monthly_budget_usd or 0.0)
    row = s.get(Meter, key, with_for_update=True)
    return row.limit_amount if row is not None else _configured(kind, budgets)


def raise_meter(
    s: Session, kind: str, name: str, limit: float, budgets: BudgetConfig, *, scope: Scope = None, by: str = ""
) -> tuple[str, int, int]:
    """Raise the meter of `kind` (for a Project or user: the one `name`d) in its current window to
    `limit` (USD, or calls for a calls meter), and reopen the Tasks it stopped; answers its key, the
    limit it had and the limit it has (micro-dollars or calls)."""
    if kind not in METER_KINDS:
        raise InvalidArgument(f"must be one of {', '.join(METER_KINDS)}", field="meter")
    if kind in FLEET_KINDS and name:
        raise InvalidArgument(f"a {kind} meter is the fleet's: name nothing", field="name")
    if kind not in FLEET_KINDS and not name:
        raise InvalidArgument(f"a {kind} meter needs the {kind}'s name", field="name")
    if scope is not None and kind != meters.PROJECT:
        raise PermissionDenied(f"raising the {kind} meter needs an admin token for every project")
    if not math.isfinite(limit) or limit <= 0 or limit > MAX_LIMIT:
        raise InvalidArgument(f"must be more than 0 and at most {MAX_LIMIT:g}", field="limit")
    calls = kind in (meters.AGENT_CALLS_DAY, meters.CLASSIFIER_CALLS_DAY)
    if calls and limit != int(limit):
        raise InvalidArgument("a calls meter counts whole calls", field="limit")
    key = _meter_key(kind, name, utcnow().replace(tzinfo=dt.UTC))
    previous = _current_limit(s, kind, name, key, budgets, scope)
    new = int(limit) if calls else meters.usd_micros(limit)
    if previous == 0:
        raise FailedPrecondition(f"meter {key} has no limit to raise", field="meter")
    if new <= previous:
        shown = previous if calls else f"{previous / 1_000_000:g}"
        raise InvalidArgument(f"must be more than the current limit {shown}", field="limit")
    meters.raise_limit(s, key, new)
    unit = "calls" if calls else "usd"
    add_event(s, "meter.raised", by=by, meter=key, meter_kind=kind, unit=unit, previous=previous, limit=new)
    _reopen_stopped(s, kind, name)
    return key, previous, new


def _reopen_stopped(s: Session, kind: str, name: str) -> None:
    """Reopen, in a fresh attempt window, the Tasks the meter of `kind` stopped (its Project's or user's only)."""
    q = select(Change).where(Change.status.in_(("running", "budget_blocked")))
    if kind == meters.PROJECT:
        q = q.where(Change.project == name)
    elif kind == meters.USER:
        q = q.where(Change.submitted_by == name)
    limit = {meters.REFUSALS[kind]}
    for change in s.scalars(q.order_by(Change.created_at).with_for_update()):
        tasks = tasks_of(s, change.id)
        stopped = [t for t in tasks if stopped_on(t, limit)]
        if stopped:
            reopen(s, change, tasks, stopped, f"{kind} meter raised")
            s.flush()
            advance(s, change)


def retry_task(
    s: Session,
    task_id: str,
    tier: str,
    tiers: Collection[str],
    *,
    scope: Scope = None,
    by: str = "",
    may_manage: bool = True,
) -> Task:
    """Run a failed or stopped Task again in a fresh attempt window, at `tier` when one is named; its
    Change runs again if it had ended failed or budget_blocked."""
    if tier and tier not in tiers:
        raise InvalidArgument(f"no tier {tier!r}; configured: {', '.join(sorted(tiers))}", field="tier")
    task = s.get(Task, task_id) if task_id else None
    if task is None:
        raise NotFound(f"no task {task_id!r}", field="task_id")
    try:
        change = visible_change(s, task.change_id, scope, lock=True)
    except NotFound:
        raise NotFound(f"no task {task_id!r}", field="task_id") from None
    check_owner(change, by, may_manage, "retrying a Task of")
    if tier and task.command:
        raise InvalidArgument("a command Task runs on no model tier", field="tier")
    if change.cancel_requested or change.status == "cancelled":
        raise FailedPrecondition(f"change {change.id} is cancelled", field="task_id")
    s.refresh(task)
    if task.status not in ("failed", "blocked") or task.reason.startswith("dependency "):
        state = f"{task.status} ({task.reason})" if task.reason else task.status
        raise FailedPrecondition(
            f"task {task_id} is {state}; only a failed or stopped Task runs again", field="task_id"
        )
    previous = f"{task.status}: {task.reason}" if task.reason else task.status
    tasks = tasks_of(s, change.id)
    add_event(
        s, "task.retried", change_id=change.id, task_id=task.id, key=task.key, by=by, tier=tier, previous=previous
    )
    reopen(s, change, tasks, [task], "retried")
    if tier:
        run = s.scalar(select(Run).where(Run.task_id == task.id).order_by(Run.attempt.desc()).limit(1))
        assert run is not None
        run.tier = tier
    s.flush()
    advance(s, change)
    return task
