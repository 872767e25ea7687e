"""Agents connecting, going away and draining; the runs of agents gone too long fail as agent_lost."""

from __future__ import annotations

import dataclasses
import datetime as dt

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from controlplane.domain import escalation, presence, run_states
from controlplane.domain.scheduling import AgentHello
from controlplane.services.run_lifecycle import finish_run, requeue
from controlplane.services.tenancy import Scope, visible_agent
from controlplane.store.engine import aware
from controlplane.store.events import add_event
from controlplane.store.models import Agent, Run, Token, utcnow
from controlplane.store.objects import ObjectStore
from drover.errors import PermissionDenied

FORGET = 1 << 62  # an applied seq that makes an agent drop every message of a run


@dataclasses.dataclass(frozen=True)
class HelloResult:
    applied: dict[str, int]  # highest applied seq of each run the agent listed
    to_cancel: list[str]  # listed runs whose cancel the agent may not have heard
    hello: AgentHello  # the agent's hello as recorded (the replica's roster takes it)


def agent_connected(
    s: Session,
    name: str,
    labels: dict[str, str],
    capacity: int,
    drivers: list[str],
    version: str,
    listed: set[str],
    draining: bool,
    token_id: int = 0,
    pool: str = "",
    policy: escalation.Policy | None = None,
    replica: str = "",
    lease: dt.timedelta = dt.timedelta(seconds=30),
    objects: ObjectStore | None = None,
) -> HelloResult:
    """Record a connected agent. A name is bound to the agent token that first registered it: another
    token may take it only once that one is revoked or expired, and only for the same pool."""
    agent = s.get(Agent, name, with_for_update=True)
    if agent is None:
        agent = Agent(name=name, draining=False)
        s.add(agent)
    elif agent.token_id is not None and token_id and agent.token_id != token_id:
        bound = s.get(Token, agent.token_id)
        if bound is not None and (bound.revoked_at is None and not _expired(bound)):
            raise PermissionDenied(f"the agent name {name!r} belongs to another agent token", field="hello.name")
        if (agent.pool or "") != pool:
            raise PermissionDenied(
                f"the agent name {name!r} was an agent of another pool; use a new name", field="hello.name"
            )
        add_event(s, "agent.rebound", agent=name, pool=pool)
    if token_id:
        agent.token_id, agent.pool = token_id, pool
    agent.labels, agent.capacity, agent.drivers, agent.version = labels, capacity, drivers, version
    agent.connected, agent.connected_at, agent.disconnected_at = True, utcnow(), None
    agent.replica, agent.lease_until = replica, utcnow() + lease
    agent.draining = draining  # a drain lasts as long as the agentd process that was told
    add_event(s, "agent.connected", agent=name, capacity=capacity, labels=labels)
    recorded = AgentHello(name, labels, capacity, frozenset(drivers), draining, agent.pool or "")
    return _reconcile(s, recorded, listed, policy, objects)


def _reconcile(
    s: Session, hello: AgentHello, listed: set[str], policy: escalation.Policy | None, objects: ObjectStore | None
) -> HelloResult:
    """The agent's active runs against those its hello listed: what it must resume, cancel or forget."""
    name = hello.name
    applied: dict[str, int] = {}
    to_cancel: list[str] = []
    active = select(Run).where(Run.agent == name, Run.state.in_(run_states.ACTIVE))
    for run in s.scalars(active.order_by(Run.change_id, Run.id)):  # Changes locked sorted (store.locks)
        if run.id in listed:
            applied[run.id] = run.last_seq
            if run.cancel_requested:
                to_cancel.append(run.id)
        elif run.state == "starting" and run.last_seq == 0:
            requeue(s, run, reason="assignment_not_received")  # never reached the agent
        else:
            finish_run(
                s,
                run,
                "failed",
                exit_code=-1,
                reason="agent_restarted",
                error=f"agent {name} came back without this run",
                policy=policy,
                objects=objects,
            )
    for run_id in listed - applied.keys():
        # Ended here already (agent_lost, or a result whose ack was lost): take the rest of its output,
        # which cannot change its state, and stop its session. Not this agent's run: forget it.
        ended = s.get(Run, run_id)
        applied[run_id] = ended.last_seq if ended is not None and ended.agent == name else FORGET
        to_cancel.append(run_id)
    return HelloResult(applied=applied, to_cancel=to_cancel, hello=hello)


def _expired(token: Token) -> bool:
    expires = aware(token.expires_at)
    return expires is not None and utcnow() >= expires


def agent_disconnected(
    s: Session, name: str, last_heard_at: dt.datetime | None = None, replica: str | None = None
) -> None:
    """The agent's stream ended; it counts as gone since it was last heard (a hung agent is silent long
    before its stream is closed), so its runs fail as agent_lost that long after it fell silent. With
    `replica`: only if that replica still holds it (the agent may have reconnected to another)."""
    agent = s.get(Agent, name, with_for_update=True)
    if agent is None or not agent.connected or (replica is not None and agent.replica != replica):
        return
    now = utcnow()
    agent.connected, agent.disconnected_at = False, min(last_heard_at or now, now)
    add_event(s, "agent.disconnected", agent=name, last_heard_at=agent.disconnected_at.isoformat())


def disconnect_all(s: Session) -> None:
    """At start-up of a single node no agent is connected to this process yet; their lost-window starts now."""
    s.execute(update(Agent).where(Agent.connected.is_(True)).values(connected=False, disconnected_at=utcnow()))


def renew_leases(s: Session, replica: str, until: dt.datetime) -> None:
    """The agents whose streams `replica` holds stay connected until `until` unless renewed again. An
    agent that reconnected to another replica carries that one's id and is not renewed here."""
    s.execute(update(Agent).where(Agent.replica == replica, Agent.connected.is_(True)).values(lease_until=until))


def expire_leases(s: Session, now: dt.datetime, lease: dt.timedelta) -> list[str]:
    """Agents still marked connected whose replica stopped renewing their lease (it died): gone since
    the lease was last renewed, so their lost window runs from about when they were last heard."""
    gone = []
    for agent in s.scalars(
        select(Agent).where(Agent.connected.is_(True), Agent.lease_until < now).with_for_update(skip_locked=True)
    ):
        since = min(now, (aware(agent.lease_until) or now) - lease)
        agent.connected, agent.disconnected_at = False, since
        add_event(s, "agent.disconnected", agent=agent.name, last_heard_at=since.isoformat(), replica=agent.replica)
        gone.append(agent.name)
    return gone


def fail_lost_runs(
    s: Session,
    window: dt.timedelta,
    now: dt.datetime | None = None,
    policy: escalation.Policy | None = None,
    up_since: dt.datetime | None = None,
    objects: ObjectStore | None = None,
) -> list[str]:
    """Fail the active runs of agents gone for longer than `window` while a control plane was up: since
    they were last heard, or since `up_since` (the judging process's start) if that is later."""
    now = now or utcnow()
    failed: list[str] = []
    for agent in s.scalars(select(Agent).where(Agent.connected.is_(False))):
        if not presence.is_lost(aware(agent.disconnected_at), up_since or now - window, window, now):
            continue
        active = select(Run).where(Run.agent == agent.name, Run.state.in_(run_states.ACTIVE))
        for run in s.scalars(active.order_by(Run.change_id, Run.id)):  # Changes locked sorted (store.locks)
            finish_run(
                s,
                run,
                "failed",
                exit_code=-1,
                reason="agent_lost",
                error=f"agent {agent.name} gone over {int(window.total_seconds())} s while a control plane was up",
                policy=policy,
                objects=objects,
            )
            failed.append(run.id)
    return failed


def drain_agent(s: Session, name: str, draining: bool = True, scope: Scope = None) -> Agent:
    """Stop (or, with draining False, resume) offering the agent new runs. An agent the caller's scope
    does not see is NOT_FOUND, and nothing changes."""
    agent = visible_agent(s, name, scope, lock=True)
    if agent.draining != draining:
        agent.draining = draining
        add_event(s, "agent.draining" if draining else "agent.undrained", agent=name)
    return agent
