"""Read-only queries about Changes, answered to the SDK and the CLI as protobuf: a Change and its Tasks,
its events, ChangeSets, patches, spend and receipts.

Every query takes the caller's scope: the projects its token may use (None: all). What lies outside
the scope does not exist for the caller: a Change, run or ChangeSet of another project is NOT_FOUND
with the same message as one that was never there, and lists leave it out.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import and_, case, func, or_, select
from sqlalchemy.orm import Session

from controlplane.api import convert
from controlplane.dispatch.assignments import opens_sandbox_clause
from controlplane.domain import run_states, scheduling
from controlplane.services import paging
from controlplane.services.paging import page_size
from controlplane.services.tenancy import (
    Scope,
    visible_change,
    visible_changeset,
)
from controlplane.store.changes import tasks_of
from controlplane.store.models import (
    Agent,
    Change,
    ChangeSet,
    Conflict,
    DecisionReceipt,
    Event,
    ModelCall,
    Project,
    Run,
    Task,
)
from drover.v1 import change_pb2, types_pb2


def in_scope(column: Any, scope: Scope) -> Any:
    """A condition on a Change id column: the Change belongs to a project in scope."""
    return column.in_(select(Change.id).where(Change.project.in_(sorted(scope or ()))))


def offset_of(token: str) -> int:
    return paging.decode(token, (int,))[0] if token else 0


def get_change(s: Session, change_id: str, scope: Scope = None) -> types_pb2.Change:
    row = visible_change(s, change_id, scope)
    runs = select(Run.task_id, Run.id).where(Run.change_id == change_id).order_by(Run.created_at, Run.id)
    latest = dict(s.execute(runs).tuples().all())  # the last run of each Task wins
    tasks = [convert.task(t, latest.get(t.id, "")) for t in tasks_of(s, change_id)]
    out = convert.change(row, tasks)
    out.conflicts.extend(conflicts(s, change_id))
    out.notices.extend(notices(s, row))
    return out


def notices(s: Session, change: Change) -> list[str]:
    """What holds the Change's queued runs up, when it is not the queue itself. A fleet has thousands of
    agents: the usual answer (an agent of the pool serves every queued driver) reads one row per driver."""
    queued = s.scalar(select(func.count()).select_from(Run).where(Run.change_id == change.id, Run.state == "queued"))
    if not queued:
        return []
    project = s.get(Project, change.project)
    pool = project.pool if project else ""
    capped, boxed = _cap_notices(s, change, queued, project)
    if capped:
        return [capped]  # its own cap holds its runs, whatever the agents
    held = [boxed] if boxed else []  # its sandbox cap holds its sandbox runs; the others may wait on agents
    of_pool = (Agent.connected.is_(True), func.coalesce(Agent.pool, "") == pool)
    drivers = sorted(s.scalars(select(Run.driver).where(Run.change_id == change.id, Run.state == "queued").distinct()))
    serving = s.execute(select(Agent.drivers).where(*of_pool, Agent.draining.is_(False)))
    missing = set(drivers)
    for (offered,) in serving:
        missing -= set(offered or ())
        if not missing:
            return held
    connected = [
        scheduling.AgentSlot(name, {}, capacity, frozenset(offered or ()), draining, pool)
        for name, capacity, offered, draining in s.execute(
            select(Agent.name, Agent.capacity, Agent.drivers, Agent.draining).where(*of_pool)
        )
    ]
    found = [scheduling.pool_notice(pool, connected)]
    found += [scheduling.driver_notice(pool, driver, connected) for driver in drivers]
    return held + [n for n in found if n]


def _cap_notices(s: Session, change: Change, queued: int, project: Project | None) -> tuple[str, str]:
    """blocked_limit: the Change's active runs fill its project's max_active_runs_per_change; its open
    sandboxes fill its max_open_sandboxes_per_change while runs that would open one wait (one query)."""
    cap, sandbox_cap = scheduling.DEFAULT_MAX_ACTIVE_RUNS_PER_CHANGE, scheduling.DEFAULT_OPEN_SANDBOXES_PER_CHANGE
    if project is not None:
        cap, sandbox_cap = project.max_active_runs_per_change, project.max_open_sandboxes_per_change
    is_active, sandbox = Run.state.in_(run_states.ACTIVE), opens_sandbox_clause()
    active, opened, waiting = s.execute(
        select(
            func.sum(case((is_active, 1), else_=0)),
            func.sum(case((is_active & sandbox, 1), else_=0)),
            func.sum(case(((Run.state == "queued") & sandbox, 1), else_=0)),
        )
        .select_from(Run)
        .join(Task, Task.id == Run.task_id)
        .outerjoin(Project, Project.name == change.project)
        .where(Run.change_id == change.id, Run.state.in_({"queued", *run_states.ACTIVE}))
    ).one()
    return (
        scheduling.cap_notice(queued, active or 0, cap),
        scheduling.sandbox_notice(waiting or 0, opened or 0, sandbox_cap),
    )


def list_changes(
    s: Session,
    project: str,
    size: int,
    token: str = "",
    scope: Scope = None,
    status: str = "",
    submitted_by: str = "",
) -> paging.Page[types_pb2.Change]:
    """Newest first."""
    size = page_size(size, 50, 500)
    q = select(Change.id, Change.created_at).order_by(Change.created_at.desc(), Change.id.desc()).limit(size + 1)
    if project:
        q = q.where(Change.project == project)
    if status:
        q = q.where(Change.status == status)
    if submitted_by:
        q = q.where(Change.submitted_by == submitted_by)
    if scope is not None:
        q = q.where(Change.project.in_(sorted(scope)))
    if token:
        at, last = paging.decode(token, (dt.datetime, str))
        q = q.where(or_(Change.created_at < at, and_(Change.created_at == at, Change.id < last)))
    return paging.take(
        s.execute(q).all(),
        size,
        lambda row: get_change(s, row.id),
        lambda c: c.ByteSize(),
        lambda row: paging.encode(row.created_at, row.id),
    )


def change_status(s: Session, change_id: str, scope: Scope = None) -> str:
    return visible_change(s, change_id, scope).status


def watch_page(
    s: Session, change_id: str, after_id: int, scope: Scope = None
) -> tuple[str, paging.Page[types_pb2.Event]]:
    """A Change's status and its events after `after_id`, read in one snapshot: no events and a final
    status means the stream is over."""
    return change_status(s, change_id, scope), events(s, change_id=change_id, after_id=after_id, scope=scope)


def events(
    s: Session,
    *,
    change_id: str = "",
    run_id: str = "",
    kind: str = "",
    after_id: int = 0,
    limit: int = 200,
    token: str = "",
    scope: Scope = None,
    newest: bool = False,
) -> paging.Page[types_pb2.Event]:
    """Oldest first, from after `after_id` (or the page token); with `newest`, the newest `limit`
    events after `after_id`, still oldest first, and no next page."""
    size = page_size(limit, 200, 1000)
    if token:
        after_id = max(after_id, paging.decode(token, (int,))[0])
    q = select(Event).where(Event.id > after_id)
    q = q.order_by(Event.id.desc()).limit(size) if newest else q.order_by(Event.id).limit(size + 1)
    if change_id:
        q = q.where(Event.change_id == change_id)
    if run_id:
        q = q.where(Event.run_id == run_id)
    if kind:
        # A literal, case-sensitive prefix on every database (LIKE would treat % and _ as wildcards,
        # and ignores case on SQLite).
        q = q.where(func.substr(Event.kind, 1, len(kind)) == kind)
    if scope is not None:  # events of no Change (agents, projects, tokens) are the fleet's, not a project's
        q = q.where(in_scope(Event.change_id, scope))
    rows = list(s.scalars(q))
    if newest:
        rows.reverse()
    return paging.take(rows, size, convert.event, lambda e: e.ByteSize(), lambda e: paging.encode(e.id))


def receipts(
    s: Session, change_id: str = "", run_id: str = "", size: int = 0, token: str = "", scope: Scope = None
) -> paging.Page[types_pb2.DecisionReceipt]:
    size, start = page_size(size, 100, 1000), offset_of(token)
    q = (
        select(DecisionReceipt, Task.key)
        .join(Task, Task.id == DecisionReceipt.task_id)
        .order_by(DecisionReceipt.created_at, DecisionReceipt.run_id)
        .offset(start)
        .limit(size + 1)
    )
    if change_id:
        q = q.where(DecisionReceipt.change_id == change_id)
    if run_id:
        q = q.where(DecisionReceipt.run_id == run_id)
    if scope is not None:
        q = q.where(in_scope(DecisionReceipt.change_id, scope))
    rows = [(i, r, key) for i, (r, key) in enumerate(s.execute(q).all(), start + 1)]
    return paging.take(
        rows,
        size,
        lambda row: convert.receipt(row[1], row[2]),
        lambda r: r.ByteSize(),
        lambda row: paging.encode(row[0]),
    )


def spend(s: Session, change_id: str, scope: Scope = None) -> change_pb2.Spend:
    """What a Change spent, by tier, member and model, with (the first page of) its receipts."""
    change = visible_change(s, change_id, scope)
    rows = s.execute(
        select(Run.tier, Run.member, ModelCall.model, func.count(), func.coalesce(func.sum(ModelCall.cost_micros), 0))
        .join(Run, Run.id == ModelCall.run_id)
        .where(Run.change_id == change_id)
        .group_by(Run.tier, Run.member, ModelCall.model)
        .order_by(Run.tier, Run.member, ModelCall.model)
    ).all()
    lines = [
        change_pb2.SpendLine(tier=tier, member=member, model=model, calls=calls, cost_micros=int(cost))
        for tier, member, model, calls, cost in rows
    ]
    return change_pb2.Spend(
        change_id=change_id,
        budget_micros=round(change.budget_usd * 1_000_000),
        spent_micros=sum(line.cost_micros for line in lines),
        lines=lines,
        receipts=receipts(s, change_id=change_id, size=1000).items,
    )


def changesets(
    s: Session, change_id: str, size: int = 0, token: str = "", scope: Scope = None
) -> paging.Page[types_pb2.ChangeSet]:
    visible_change(s, change_id, scope)
    size, start = page_size(size, 100, 500), offset_of(token)
    rows = s.execute(
        select(ChangeSet, Task.key)
        .join(Task, Task.id == ChangeSet.task_id)
        .where(ChangeSet.change_id == change_id)
        .order_by(ChangeSet.created_at, ChangeSet.id)
        .offset(start)
        .limit(size + 1)
    ).all()
    numbered = [(i, cs, key) for i, (cs, key) in enumerate(rows, start + 1)]
    return paging.take(
        numbered,
        size,
        lambda row: convert.changeset(row[1], row[2]),
        lambda c: c.ByteSize(),
        lambda row: paging.encode(row[0]),
    )


def patch(s: Session, objects: Any, changeset_id: str, scope: Scope = None) -> str:
    return objects.get(visible_changeset(s, changeset_id, scope).patch_ref).decode()


def conflicts(s: Session, change_id: str) -> list[types_pb2.Conflict]:
    keys = {t.id: t.key for t in tasks_of(s, change_id)}
    return [
        types_pb2.Conflict(
            task_a=keys.get(c.task_a, c.task_a),
            task_b=keys.get(c.task_b, c.task_b),
            files=c.files,
            resources=c.resources,
            created_at=convert.ts(c.created_at),
        )
        for c in s.scalars(select(Conflict).where(Conflict.change_id == change_id).order_by(Conflict.id))
    ]
