"""Read-only queries answered to the SDK, the CLI and operators.

Every query takes the caller's scope: the projects its token may use (None: all). What lies outside
the scope does not exist for the caller: a Change, run or ChangeSet of another project is NOT_FOUND
with the same message as one that was never there, and lists leave it out.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import and_, func, literal, or_, select
from sqlalchemy.orm import Session

from controlplane.api import convert
from controlplane.domain import run_states
from controlplane.domain.errors import FailedPrecondition, NotFound
from controlplane.services import paging
from controlplane.services.paging import page_size
from controlplane.services.tenancy import (
    Scope,
    visible_change,
    visible_changeset,
    visible_run,
)
from controlplane.store.changes import tasks_of
from controlplane.store.models import (
    Agent,
    Change,
    ChangeSet,
    Claim,
    Conflict,
    DecisionReceipt,
    Event,
    Meter,
    ModelCall,
    Project,
    Run,
    RunLog,
    Task,
)
from controlplane.store.objects import packet_key
from drover.v1 import change_pb2, types_pb2


def _in_scope(column: Any, scope: Scope) -> Any:
    """A condition on a Change id column: the Change belongs to a project in scope."""
    return column.in_(select(Change.id).where(Change.project.in_(sorted(scope or ()))))


def get_change(s: Session, change_id: str, scope: Scope = None) -> types_pb2.Change:
    row = visible_change(s, change_id, scope)
    latest = {task_id: run_id for task_id, run_id in s.execute(
        select(Run.task_id, Run.id).where(Run.change_id == change_id).order_by(Run.created_at, Run.id))}
    tasks = [convert.task(t, latest.get(t.id, ""))
             for t in tasks_of(s, change_id)]
    out = convert.change(row, tasks)
    out.conflicts.extend(conflicts(s, change_id))
    return out


def list_changes(s: Session, project: str, size: int, token: str = "",
                 scope: Scope = None) -> paging.Page[types_pb2.Change]:
    """Newest first."""
    size = page_size(size, 50, 500)
    q = select(Change.id, Change.created_at).order_by(Change.created_at.desc(), Change.id.desc()).limit(size + 1)
    if project:
        q = q.where(Change.project == project)
    if scope is not None:
        q = q.where(Change.project.in_(sorted(scope)))
    if token:
        at, last = paging.decode(token, (dt.datetime, str))
        q = q.where(or_(Change.created_at < at, and_(Change.created_at == at, Change.id < last)))
    return paging.take(s.execute(q).all(), size, lambda row: get_change(s, row.id), lambda c: c.ByteSize(),
                       lambda row: paging.encode(row.created_at, row.id))


def change_status(s: Session, change_id: str, scope: Scope = None) -> str:
    return visible_change(s, change_id, scope).status


def events(s: Session, *, change_id: str = "", run_id: str = "", kind: str = "", after_id: int = 0,
           limit: int = 200, token: str = "", scope: Scope = None) -> paging.Page[types_pb2.Event]:
    """Oldest first, from after `after_id` (or the page token)."""
    size = page_size(limit, 200, 1000)
    if token:
        after_id = max(after_id, paging.decode(token, (int,))[0])
    q = select(Event).where(Event.id > after_id).order_by(Event.id).limit(size + 1)
    if change_id:
        q = q.where(Event.change_id == change_id)
    if run_id:
        q = q.where(Event.run_id == run_id)
    if kind:
        # A literal, case-sensitive prefix on every database (LIKE would treat % and _ as wildcards,
        # and ignores case on SQLite).
        q = q.where(func.substr(Event.kind, 1, len(kind)) == kind)
    if scope is not None:  # events of no Change (agents, projects, tokens) are the fleet's, not a project's
        q = q.where(_in_scope(Event.change_id, scope))
    return paging.take(s.scalars(q), size, convert.event, lambda e: e.ByteSize(), lambda e: paging.encode(e.id))


def _run_rows(s: Session, q) -> list[types_pb2.Run]:  # type: ignore[no-untyped-def]
    rows = s.execute(q.join(Task, Task.id == Run.task_id).join(Change, Change.id == Run.change_id)
                     .add_columns(Task.key, Change.project)).all()
    ids = [run.id for run, _, _ in rows]
    usage = {run_id: (calls, cost) for run_id, calls, cost in s.execute(
        select(ModelCall.run_id, func.count(), func.coalesce(func.sum(ModelCall.cost_micros), 0))
        .where(ModelCall.run_id.in_(ids), ModelCall.purpose == "agent").group_by(ModelCall.run_id))}
    return [convert.run(run, key, project, *usage.get(run.id, (0, 0))) for run, key, project in rows]


def get_run(s: Session, run_id: str, scope: Scope = None) -> types_pb2.Run:
    visible_run(s, run_id, scope)
    return _run_rows(s, select(Run).where(Run.id == run_id))[0]


def list_runs(s: Session, *, change_id: str = "", state: str = "", agent: str = "", limit: int = 100,
              token: str = "", scope: Scope = None) -> paging.Page[types_pb2.Run]:
    """Newest first."""
    size = page_size(limit, 100, 1000)
    q = select(Run).order_by(Run.created_at.desc(), Run.id.desc()).limit(size + 1)
    if change_id:
        q = q.where(Run.change_id == change_id)
    if state:
        q = q.where(Run.state == state)
    if agent:
        q = q.where(Run.agent == agent)
    if scope is not None:
        q = q.where(_in_scope(Run.change_id, scope))
    if token:
        at, last = paging.decode(token, (dt.datetime, str))
        q = q.where(or_(Run.created_at < at, and_(Run.created_at == at, Run.id < last)))
    rows = _run_rows(s, q)
    return paging.take(rows, size, lambda r: r, lambda r: r.ByteSize(),
                       lambda r: paging.encode(r.created_at.ToDatetime(dt.timezone.utc), r.id))


def run_logs(s: Session, run_id: str, after_seq: int, limit: int = 1000,
             scope: Scope = None) -> tuple[list[types_pb2.LogLine], str]:
    """Output after `after_seq`, and the run's state (to know when a follower may stop)."""
    run = visible_run(s, run_id, scope)
    rows = s.scalars(select(RunLog).where(RunLog.run_id == run_id, RunLog.seq > after_seq)
                     .order_by(RunLog.seq, RunLog.id).limit(limit))
    lines = list(rows)
    if len(lines) == limit and lines[0].seq != lines[-1].seq:
        last = lines[-1].seq  # never cut a seq in two: the follower resumes after the last whole seq
        lines = [r for r in lines if r.seq != last]
    return [convert.log_line(r) for r in lines], run.state


def _offset(token: str) -> int:
    return paging.decode(token, (int,))[0] if token else 0


def _pools(s: Session, scope: Scope) -> list[str] | None:
    return None if scope is None else sorted({p.pool for p in s.scalars(select(Project).where(
        Project.name.in_(sorted(scope))))})


def list_agents(s: Session, connected_only: bool, size: int = 0, token: str = "",
                scope: Scope = None) -> paging.Page[types_pb2.Agent]:
    """By name. A caller scoped to some projects sees the agents of those projects' pools."""
    size, start = page_size(size, 100, 1000), _offset(token)
    q = select(Agent).order_by(Agent.name).offset(start).limit(size + 1)
    if connected_only:
        q = q.where(Agent.connected.is_(True))
    pools = _pools(s, scope)
    if pools is not None:
        q = q.where(Agent.pool.in_(pools))
    rows = list(s.scalars(q))
    active = dict(s.execute(select(Run.agent, func.count()).where(
        Run.state.in_(run_states.ACTIVE), Run.agent.in_([a.name for a in rows])).group_by(Run.agent)).all())
    positions = {a.name: start + i + 1 for i, a in enumerate(rows)}
    return paging.take(rows, size, lambda a: convert.agent(a, active.get(a.name, 0)), lambda a: a.ByteSize(),
                       lambda a: paging.encode(positions[a.name]))


def agent(s: Session, name: str) -> types_pb2.Agent:
    row = s.get(Agent, name)
    if row is None:
        raise NotFound(f"no agent {name!r}", field="name")
    active = s.scalar(select(func.count()).where(Run.agent == name, Run.state.in_(run_states.ACTIVE))) or 0
    return convert.agent(row, active)


def receipts(s: Session, change_id: str = "", run_id: str = "", size: int = 0, token: str = "",
             scope: Scope = None) -> paging.Page[types_pb2.DecisionReceipt]:
    size, start = page_size(size, 100, 1000), _offset(token)
    q = select(DecisionReceipt, Task.key).join(Task, Task.id == DecisionReceipt.task_id).order_by(
        DecisionReceipt.created_at, DecisionReceipt.run_id).offset(start).limit(size + 1)
    if change_id:
        q = q.where(DecisionReceipt.change_id == change_id)
    if run_id:
        q = q.where(DecisionReceipt.run_id == run_id)
    if scope is not None:
        q = q.where(_in_scope(DecisionReceipt.change_id, scope))
    rows = [(i, r, key) for i, (r, key) in enumerate(s.execute(q).all(), start + 1)]
    return paging.take(rows, size, lambda row: convert.receipt(row[1], row[2]), lambda r: r.ByteSize(),
                       lambda row: paging.encode(row[0]))


def spend(s: Session, change_id: str, scope: Scope = None) -> change_pb2.Spend:
    """What a Change spent, by tier, member and model, with (the first page of) its receipts."""
    change = visible_change(s, change_id, scope)
    rows = s.execute(
        select(Run.tier, Run.member, ModelCall.model, func.count(), func.coalesce(func.sum(ModelCall.cost_micros), 0))
        .join(Run, Run.id == ModelCall.run_id).where(Run.change_id == change_id)
        .group_by(Run.tier, Run.member, ModelCall.model).order_by(Run.tier, Run.member, ModelCall.model)).all()
    lines = [change_pb2.SpendLine(tier=tier, member=member, model=model, calls=calls, cost_micros=cost)
             for tier, member, model, calls, cost in rows]
    return change_pb2.Spend(change_id=change_id, budget_micros=int(round(change.budget_usd * 1_000_000)),
                            spent_micros=sum(line.cost_micros for line in lines), lines=lines,
                            receipts=receipts(s, change_id=change_id, size=1000).items)


FLEET_METERS = ("provider-usd:", "agent-calls:", "classifier-calls:")
"""Meters every caller may read: they say why a call of theirs was refused, and name no project."""


def usage(s: Session, prefix: str = "", size: int = 0, token: str = "", user: str = "",
          scope: Scope = None) -> paging.Page[types_pb2.MeterUsage]:
    size, start = page_size(size, 200, 1000), _offset(token)
    q = select(Meter).order_by(Meter.key).offset(start).limit(size + 1)
    if prefix:
        q = q.where(func.substr(Meter.key, 1, len(prefix)) == prefix)
    if scope is not None:
        own = [func.substr(Meter.key, 1, len(p)) == p for p in FLEET_METERS]
        own += [func.substr(Meter.key, 1, len(p)) == p for p in
                [f"project-usd:{name}:" for name in sorted(scope)] + [f"user-usd:{user}:"]]
        own.append(Meter.key.in_(select(literal("change-usd:").concat(Change.id)).where(
            Change.project.in_(sorted(scope)))))
        q = q.where(or_(*own))
    rows = [(i, m) for i, m in enumerate(s.scalars(q), start + 1)]
    return paging.take(rows, size, lambda row: _meter(row[1]), lambda m: m.ByteSize(),
                       lambda row: paging.encode(row[0]))


def _meter(m: Meter) -> types_pb2.MeterUsage:
    return types_pb2.MeterUsage(key=m.key, kind=m.kind, period=m.period, unit=m.unit, limit=m.limit_amount,
                                used=m.used, reserved=m.reserved)


def packet_of(s: Session, objects: Any, run_id: str, scope: Scope = None) -> tuple[str, str]:
    """A run's Context Packet: its hash and canonical JSON."""
    run = visible_run(s, run_id, scope)
    if not run.context_hash:
        raise FailedPrecondition(f"run {run_id} has no Context Packet (a command run, or not routed yet)",
                                 field="run_id")
    change = s.get(Change, run.change_id)
    assert change is not None
    key = packet_key(change.project, change.id, run.task_id, run.context_hash)
    return run.context_hash, objects.get(key).decode()


def list_claims(s: Session, change_id: str, include_released: bool, size: int = 0, token: str = "",
                scope: Scope = None) -> paging.Page[types_pb2.Claim]:
    size, start = page_size(size, 200, 1000), _offset(token)
    q = select(Claim).order_by(Claim.resource, Claim.acquired_at, Claim.id).offset(start).limit(size + 1)
    if not include_released:
        q = q.where(Claim.released_at.is_(None))
    if change_id:
        q = q.where(Claim.change_id == change_id)
    if scope is not None:
        q = q.where(_in_scope(Claim.change_id, scope))
    rows = [(i, c) for i, c in enumerate(s.scalars(q), start + 1)]
    return paging.take(rows, size, lambda row: _claim(row[1]), lambda c: c.ByteSize(),
                       lambda row: paging.encode(row[0]))


def _claim(c: Claim) -> types_pb2.Claim:
    return types_pb2.Claim(resource=c.resource, run_id=c.run_id, holder=c.holder, generation=c.generation,
                           acquired_at=convert.ts(c.acquired_at), expires_at=convert.ts(c.expires_at),
                           change_id=c.change_id, task_id=c.task_id)


def changesets(s: Session, change_id: str, size: int = 0, token: str = "",
               scope: Scope = None) -> paging.Page[types_pb2.ChangeSet]:
    visible_change(s, change_id, scope)
    size, start = page_size(size, 100, 500), _offset(token)
    rows = s.execute(select(ChangeSet, Task.key).join(Task, Task.id == ChangeSet.task_id)
                     .where(ChangeSet.change_id == change_id).order_by(ChangeSet.created_at, ChangeSet.id)
                     .offset(start).limit(size + 1)).all()
    numbered = [(i, cs, key) for i, (cs, key) in enumerate(rows, start + 1)]
    return paging.take(numbered, size, lambda row: convert.changeset(row[1], row[2]), lambda c: c.ByteSize(),
                       lambda row: paging.encode(row[0]))


def patch(s: Session, objects: Any, changeset_id: str, scope: Scope = None) -> str:
    return objects.get(visible_changeset(s, changeset_id, scope).patch_ref).decode()


def conflicts(s: Session, change_id: str) -> list[types_pb2.Conflict]:
    keys = {t.id: t.key for t in tasks_of(s, change_id)}
    return [types_pb2.Conflict(task_a=keys.get(c.task_a, c.task_a), task_b=keys.get(c.task_b, c.task_b),
                               files=c.files, resources=c.resources, created_at=convert.ts(c.created_at))
            for c in s.scalars(select(Conflict).where(Conflict.change_id == change_id).order_by(Conflict.id))]
