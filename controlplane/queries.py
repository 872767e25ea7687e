"""Read-only queries answered to the SDK, the CLI and operators."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from controlplane import convert, runstate
from controlplane.errors import FailedPrecondition, NotFound
from controlplane.models import (Agent, Change, Conflict, DecisionReceipt, Event, Meter, ModelCall, Run, RunLog,
                                 Task)
from drover.v1 import change_pb2, types_pb2


def get_change(s: Session, change_id: str) -> types_pb2.Change:
    row = s.get(Change, change_id)
    if row is None:
        raise NotFound(f"no change {change_id!r}", field="change_id")
    latest = {task_id: run_id for task_id, run_id in s.execute(
        select(Run.task_id, Run.id).where(Run.change_id == change_id).order_by(Run.created_at, Run.id))}
    tasks = [convert.task(t, latest.get(t.id, ""))
             for t in s.scalars(select(Task).where(Task.change_id == change_id).order_by(Task.position))]
    out = convert.change(row, tasks)
    out.conflicts.extend(conflicts(s, change_id))
    return out


def list_changes(s: Session, project: str, limit: int) -> list[types_pb2.Change]:
    q = select(Change.id).order_by(Change.created_at.desc()).limit(limit or 50)
    if project:
        q = q.where(Change.project == project)
    return [get_change(s, change_id) for change_id in s.scalars(q)]


def change_status(s: Session, change_id: str) -> str:
    row = s.get(Change, change_id)
    if row is None:
        raise NotFound(f"no change {change_id!r}", field="change_id")
    return row.status


def events(s: Session, *, change_id: str = "", run_id: str = "", kind: str = "", after_id: int = 0,
           limit: int = 200) -> list[types_pb2.Event]:
    q = select(Event).where(Event.id > after_id).order_by(Event.id).limit(limit or 200)
    if change_id:
        q = q.where(Event.change_id == change_id)
    if run_id:
        q = q.where(Event.run_id == run_id)
    if kind:
        # A literal, case-sensitive prefix on every database (LIKE would treat % and _ as wildcards,
        # and ignores case on SQLite).
        q = q.where(func.substr(Event.kind, 1, len(kind)) == kind)
    return [convert.event(e) for e in s.scalars(q)]


def _run_rows(s: Session, q) -> list[types_pb2.Run]:  # type: ignore[no-untyped-def]
    rows = s.execute(q.join(Task, Task.id == Run.task_id).join(Change, Change.id == Run.change_id)
                     .add_columns(Task.key, Change.project)).all()
    ids = [run.id for run, _, _ in rows]
    usage = {run_id: (calls, cost) for run_id, calls, cost in s.execute(
        select(ModelCall.run_id, func.count(), func.coalesce(func.sum(ModelCall.cost_micros), 0))
        .where(ModelCall.run_id.in_(ids), ModelCall.purpose == "agent").group_by(ModelCall.run_id))}
    return [convert.run(run, key, project, *usage.get(run.id, (0, 0))) for run, key, project in rows]


def get_run(s: Session, run_id: str) -> types_pb2.Run:
    found = _run_rows(s, select(Run).where(Run.id == run_id))
    if not found:
        raise NotFound(f"no run {run_id!r}", field="run_id")
    return found[0]


def list_runs(s: Session, *, change_id: str = "", state: str = "", agent: str = "",
              limit: int = 100) -> list[types_pb2.Run]:
    q = select(Run).order_by(Run.created_at.desc(), Run.id).limit(limit or 100)
    if change_id:
        q = q.where(Run.change_id == change_id)
    if state:
        q = q.where(Run.state == state)
    if agent:
        q = q.where(Run.agent == agent)
    return _run_rows(s, q)


def run_logs(s: Session, run_id: str, after_seq: int, limit: int = 1000) -> tuple[list[types_pb2.LogLine], str]:
    """Output after `after_seq`, and the run's state (to know when a follower may stop)."""
    run = s.get(Run, run_id)
    if run is None:
        raise NotFound(f"no run {run_id!r}", field="run_id")
    rows = s.scalars(select(RunLog).where(RunLog.run_id == run_id, RunLog.seq > after_seq)
                     .order_by(RunLog.seq, RunLog.id).limit(limit))
    lines = list(rows)
    if len(lines) == limit and lines[0].seq != lines[-1].seq:
        last = lines[-1].seq  # never cut a seq in two: the follower resumes after the last whole seq
        lines = [r for r in lines if r.seq != last]
    return [convert.log_line(r) for r in lines], run.state


def list_agents(s: Session, connected_only: bool) -> list[types_pb2.Agent]:
    q = select(Agent).order_by(Agent.name)
    if connected_only:
        q = q.where(Agent.connected.is_(True))
    active = dict(s.execute(select(Run.agent, func.count()).where(Run.state.in_(runstate.ACTIVE))
                            .group_by(Run.agent)).all())
    return [convert.agent(a, active.get(a.name, 0)) for a in s.scalars(q)]


def agent(s: Session, name: str) -> types_pb2.Agent:
    row = s.get(Agent, name)
    if row is None:
        raise NotFound(f"no agent {name!r}", field="name")
    active = s.scalar(select(func.count()).where(Run.agent == name, Run.state.in_(runstate.ACTIVE))) or 0
    return convert.agent(row, active)


def receipts(s: Session, change_id: str = "", run_id: str = "") -> list[types_pb2.DecisionReceipt]:
    q = select(DecisionReceipt, Task.key).join(Task, Task.id == DecisionReceipt.task_id).order_by(
        DecisionReceipt.created_at, DecisionReceipt.run_id)
    if change_id:
        q = q.where(DecisionReceipt.change_id == change_id)
    if run_id:
        q = q.where(DecisionReceipt.run_id == run_id)
    return [convert.receipt(r, key) for r, key in s.execute(q).all()]


def spend(s: Session, change_id: str) -> change_pb2.Spend:
    """What a Change spent, by tier, member and model, with its receipts."""
    change = s.get(Change, change_id)
    if change is None:
        raise NotFound(f"no change {change_id!r}", field="change_id")
    rows = s.execute(
        select(Run.tier, Run.member, ModelCall.model, func.count(), func.coalesce(func.sum(ModelCall.cost_micros), 0))
        .join(Run, Run.id == ModelCall.run_id).where(Run.change_id == change_id)
        .group_by(Run.tier, Run.member, ModelCall.model).order_by(Run.tier, Run.member, ModelCall.model)).all()
    lines = [change_pb2.SpendLine(tier=tier, member=member, model=model, calls=calls, cost_micros=cost)
             for tier, member, model, calls, cost in rows]
    return change_pb2.Spend(change_id=change_id, budget_micros=int(round(change.budget_usd * 1_000_000)),
                            spent_micros=sum(line.cost_micros for line in lines), lines=lines,
                            receipts=receipts(s, change_id=change_id))


def usage(s: Session, prefix: str = "") -> list[types_pb2.MeterUsage]:
    q = select(Meter).order_by(Meter.key)
    if prefix:
        q = q.where(func.substr(Meter.key, 1, len(prefix)) == prefix)
    return [types_pb2.MeterUsage(key=m.key, kind=m.kind, period=m.period, unit=m.unit, limit=m.limit_amount,
                                 used=m.used, reserved=m.reserved) for m in s.scalars(q)]


def packet_of(s: Session, objects: Any, run_id: str) -> tuple[str, str]:
    """A run's Context Packet: its hash and canonical JSON."""
    run = s.get(Run, run_id)
    if run is None:
        raise NotFound(f"no run {run_id!r}", field="run_id")
    if not run.context_hash:
        raise FailedPrecondition(f"run {run_id} has no Context Packet (a command run, or not routed yet)",
                                 field="run_id")
    change = s.get(Change, run.change_id)
    assert change is not None
    key = f"context/{change.project}/{change.id}/{run.task_id}/{run.context_hash}.json"
    return run.context_hash, objects.get(key).decode()


def list_claims(s: Session, change_id: str, include_released: bool) -> list[types_pb2.Claim]:
    from controlplane import claims
    found = claims.list_claims(s, include_released, change_id=change_id)
    return [types_pb2.Claim(resource=c.resource, run_id=c.run_id, holder=c.holder, generation=c.generation,
                            acquired_at=convert.ts(c.acquired_at), expires_at=convert.ts(c.expires_at),
                            change_id=getattr(c, "change_id", ""), task_id=getattr(c, "task_id", ""))
            for c in found]


def conflicts(s: Session, change_id: str) -> list[types_pb2.Conflict]:
    keys = {t.id: t.key for t in s.scalars(select(Task).where(Task.change_id == change_id))}
    return [types_pb2.Conflict(task_a=keys.get(c.task_a, c.task_a), task_b=keys.get(c.task_b, c.task_b),
                               files=c.files, resources=c.resources, created_at=convert.ts(c.created_at))
            for c in s.scalars(select(Conflict).where(Conflict.change_id == change_id).order_by(Conflict.id))]
