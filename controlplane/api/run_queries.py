"""Read-only queries about runs, agents, meters, claims and packets, answered to operators as protobuf.
Scoped like api/change_queries.py: what lies outside the caller's projects does not exist for it.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session

from controlplane.api import convert
from controlplane.api.change_queries import in_scope, offset_of
from controlplane.domain import run_states
from controlplane.services import paging, questions, run_input
from controlplane.services.paging import page_size
from controlplane.services.tenancy import (
    Scope,
    visible_agent,
    visible_meters,
    visible_pools,
    visible_run,
)
from controlplane.store import escrow
from controlplane.store.models import (
    Agent,
    Change,
    Claim,
    Meter,
    ModelCall,
    Run,
    RunLog,
    Task,
)
from controlplane.store.objects import packet_key
from drover.errors import FailedPrecondition
from drover.v1 import types_pb2


def _run_rows(s: Session, q) -> list[types_pb2.Run]:  # type: ignore[no-untyped-def]
    rows = s.execute(
        q.join(Task, Task.id == Run.task_id)
        .join(Change, Change.id == Run.change_id)
        .add_columns(Task.key, Change.project)
    ).all()
    ids = [run.id for run, _, _ in rows]
    usage = {
        run_id: (int(calls), int(cost))  # PostgreSQL sums bigints as numeric (Decimal)
        for run_id, calls, cost in s.execute(
            select(ModelCall.run_id, func.count(), func.coalesce(func.sum(ModelCall.cost_micros), 0))
            .where(ModelCall.run_id.in_(ids), ModelCall.purpose == "agent")
            .group_by(ModelCall.run_id)
        )
    }
    return [convert.run(run, key, project, *usage.get(run.id, (0, 0))) for run, key, project in rows]


def get_run(s: Session, run_id: str, scope: Scope = None) -> types_pb2.Run:
    visible_run(s, run_id, scope)
    return _run_rows(s, select(Run).where(Run.id == run_id))[0]


def list_runs(
    s: Session,
    *,
    change_id: str = "",
    state: str = "",
    agent: str = "",
    limit: int = 100,
    token: str = "",
    scope: Scope = None,
) -> paging.Page[types_pb2.Run]:
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
        q = q.where(in_scope(Run.change_id, scope))
    if token:
        at, last = paging.decode(token, (dt.datetime, str))
        q = q.where(or_(Run.created_at < at, and_(Run.created_at == at, Run.id < last)))
    rows = _run_rows(s, q)
    return paging.take(
        rows,
        size,
        lambda r: r,
        lambda r: r.ByteSize(),
        lambda r: paging.encode(r.created_at.ToDatetime(dt.UTC), r.id),
    )


def run_logs(
    s: Session, run_id: str, after_seq: int, limit: int = 1000, scope: Scope = None
) -> tuple[list[types_pb2.LogLine], str]:
    """Output after `after_seq`, and the run's state (to know when a follower may stop)."""
    run = visible_run(s, run_id, scope)
    rows = s.scalars(
        select(RunLog)
        .where(RunLog.run_id == run_id, RunLog.seq > after_seq)
        .order_by(RunLog.seq, RunLog.id)
        .limit(limit)
    )
    lines = list(rows)
    if len(lines) == limit and lines[0].seq != lines[-1].seq:
        last = lines[-1].seq  # never cut a seq in two: the follower resumes after the last whole seq
        lines = [r for r in lines if r.seq != last]
    return [convert.log_line(r) for r in lines], run.state


def list_agents(
    s: Session, connected_only: bool, size: int = 0, token: str = "", scope: Scope = None
) -> paging.Page[types_pb2.Agent]:
    """By name. A caller scoped to some projects sees the agents of those projects' pools."""
    size, start = page_size(size, 100, 1000), offset_of(token)
    q = select(Agent).order_by(Agent.name).offset(start).limit(size + 1)
    if connected_only:
        q = q.where(Agent.connected.is_(True))
    pools = visible_pools(s, scope)
    if pools is not None:
        q = q.where(Agent.pool.in_(sorted(pools)))
    rows = list(s.scalars(q))
    active = dict(
        s.execute(
            select(Run.agent, func.count())
            .where(Run.state.in_(run_states.ACTIVE), Run.agent.in_([a.name for a in rows]))
            .group_by(Run.agent)
        ).all()
    )
    positions = {a.name: start + i + 1 for i, a in enumerate(rows)}
    return paging.take(
        rows,
        size,
        lambda a: convert.agent(a, active.get(a.name, 0)),
        lambda a: a.ByteSize(),
        lambda a: paging.encode(positions[a.name]),
    )


def agent(s: Session, name: str, scope: Scope = None) -> types_pb2.Agent:
    row = visible_agent(s, name, scope)
    active = s.scalar(select(func.count()).where(Run.agent == name, Run.state.in_(run_states.ACTIVE))) or 0
    return convert.agent(row, active)


def usage(
    s: Session, prefix: str = "", size: int = 0, token: str = "", user: str = "", scope: Scope = None
) -> paging.Page[types_pb2.MeterUsage]:
    """Meters by key; a prefix narrows what the caller's scope shows, never widens it."""
    size, start = page_size(size, 200, 1000), offset_of(token)
    q = select(Meter).order_by(Meter.key).offset(start).limit(size + 1)
    if prefix:
        q = q.where(func.substr(Meter.key, 1, len(prefix)) == prefix)
    if scope is not None:
        q = q.where(visible_meters(user, scope))
    rows = [(i, m) for i, m in enumerate(s.scalars(q), start + 1)]
    slices = escrow.adjustments(s, [m.key for _, m in rows])
    return paging.take(
        rows,
        size,
        lambda row: _meter(row[1], slices.get(row[1].key, (0, 0))),
        lambda m: m.ByteSize(),
        lambda row: paging.encode(row[0]),
    )


def _meter(m: Meter, slices: tuple[int, int]) -> types_pb2.MeterUsage:
    """A meter as its calls used and hold it (escrow slices' counts in, their unused grants out)."""
    return types_pb2.MeterUsage(
        key=m.key,
        kind=m.kind,
        period=m.period,
        unit=m.unit,
        limit=m.limit_amount,
        used=m.used + slices[0],
        reserved=m.reserved + slices[1],
    )


def packet_of(s: Session, objects: Any, run_id: str, scope: Scope = None) -> tuple[str, str]:
    """A run's Context Packet: its hash and canonical JSON."""
    run = visible_run(s, run_id, scope)
    if not run.context_hash:
        raise FailedPrecondition(
            f"run {run_id} has no Context Packet (a command run, or not routed yet)", field="run_id"
        )
    change = s.get(Change, run.change_id)
    assert change is not None
    key = packet_key(change.project, change.id, run.task_id, run.context_hash)
    return run.context_hash, objects.get(key).decode()


def list_claims(
    s: Session, change_id: str, include_released: bool, size: int = 0, token: str = "", scope: Scope = None
) -> paging.Page[types_pb2.Claim]:
    size, start = page_size(size, 200, 1000), offset_of(token)
    q = select(Claim).order_by(Claim.resource, Claim.acquired_at, Claim.id).offset(start).limit(size + 1)
    if not include_released:
        q = q.where(Claim.released_at.is_(None))
    if change_id:
        q = q.where(Claim.change_id == change_id)
    if scope is not None:
        q = q.where(in_scope(Claim.change_id, scope))
    rows = [(i, c) for i, c in enumerate(s.scalars(q), start + 1)]
    return paging.take(
        rows, size, lambda row: _claim(row[1]), lambda c: c.ByteSize(), lambda row: paging.encode(row[0])
    )


def _claim(c: Claim) -> types_pb2.Claim:
    return types_pb2.Claim(
        resource=c.resource,
        run_id=c.run_id,
        holder=c.holder,
        generation=c.generation,
        acquired_at=convert.ts(c.acquired_at),
        expires_at=convert.ts(c.expires_at),
        change_id=c.change_id,
        task_id=c.task_id,
    )


def send_input(
    s: Session, run_id: str, kind: str, text: str, sent_by: str, scope: Scope
) -> tuple[types_pb2.RunInput, str]:
    """Store an input (one transaction with its event); the input as sent, and the run's agent."""
    row = run_input.send_input(s, run_id, kind, text, sent_by, scope)
    run = s.get(Run, row.run_id)
    assert run is not None
    return convert.run_input(row), run.agent


def list_inputs(s: Session, run_id: str, size: int, token: str, scope: Scope) -> paging.Page[types_pb2.RunInput]:
    size, start = page_size(size, 100, 1000), offset_of(token)
    rows = list(enumerate(run_input.list_inputs(s, run_id, scope)[start : start + size + 1], start + 1))
    return paging.take(
        rows, size, lambda row: convert.run_input(row[1]), lambda i: i.ByteSize(), lambda row: paging.encode(row[0])
    )


def list_questions(
    s: Session, change_id: str, run_id: str, open_only: bool, size: int, token: str, scope: Scope
) -> paging.Page[types_pb2.Question]:
    size, start = page_size(size, 100, 1000), offset_of(token)
    found = questions.list_questions(s, change_id, run_id, open_only, scope)
    rows = list(enumerate(found[start : start + size + 1], start + 1))
    return paging.take(
        rows,
        size,
        lambda row: convert.question(*row[1]),
        lambda q: q.ByteSize(),
        lambda row: paging.encode(row[0]),
    )


def answer_question(
    s: Session, question_id: str, text: str, by: str, may_manage: bool, scope: Scope
) -> tuple[types_pb2.Question, str, str]:
    """Answer a question (one transaction with its input and events); the question, the run's agent and run."""
    question, _ = questions.answer(s, question_id, text, by, may_manage, scope)
    run = s.get(Run, question.run_id)
    assert run is not None
    return convert.question(question), run.agent, run.id
