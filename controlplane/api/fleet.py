"""Agent sessions: the Connect stream of each agentd, dispatch of queued runs, lost agents.

One asyncio task writes to each agent's stream from its queue; the handler reads
the agent's messages, applies each in one transaction and acks it."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
import time
import grpc
from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from controlplane.dispatch import assignments
from controlplane.api import auth, convert, validation
from controlplane.services import claims, lifecycle, model_calls
from controlplane.domain import run_states
from controlplane.config import HarnessConfig, ServerConfig
from controlplane.domain.errors import DroverError
from controlplane.store.models import Agent, Change, DecisionReceipt, Project, Run, Task, utcnow
from controlplane.services.notify import Notifier
from controlplane.store.objects import DirectoryStore
from controlplane.context.recall import Recall
from controlplane.dispatch.router import Router
from controlplane.domain.scheduling import AgentSlot, QueuedRun, plan_assignments
from controlplane.api.status import error_id, grpc_code
from controlplane.store.engine import Store
from drover.v1 import agent_pb2

log = logging.getLogger("drover.fleet")
RESERVATION_TTL = dt.timedelta(minutes=15)  # longer than any model call attempt (10 min ceiling)
REFUSAL_BACKOFF_SECONDS = 30.0  # an agent that refused a run is not offered it again this soon


@dataclasses.dataclass
class AgentSession:
    name: str
    outbound: asyncio.Queue[agent_pb2.ControlMessage | None]
    token_id: int = 0
    closing: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)  # shutdown, or its token revoked
    close_code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE
    close_reason: str = "the control plane is shutting down"
    last_heard: float = dataclasses.field(default_factory=time.monotonic)
    """When the agent last sent anything (a heartbeat included), monotonic."""
    last_heard_at: dt.datetime = dataclasses.field(default_factory=utcnow)
    """The same moment as a wall-clock time: a lost agent counts as gone since then."""

    def send(self, message: agent_pb2.ControlMessage) -> None:
        self.outbound.put_nowait(message)

    def heard(self) -> None:
        self.last_heard, self.last_heard_at = time.monotonic(), utcnow()

    def close(self, code: grpc.StatusCode, reason: str) -> None:
        self.close_code, self.close_reason = code, reason
        self.closing.set()


class Fleet:
    def __init__(self, store: Store, config: ServerConfig, notifier: Notifier) -> None:
        self.store = store
        self.config = config
        self.notifier = notifier
        self.objects = DirectoryStore(config.objects)
        self.recall = Recall(store, config.data_dir, config.memory)
        self.router = Router(store, config.harness, notifier, self.objects, config.data_dir / "mirrors", self.recall)
        self.sessions: dict[str, AgentSession] = {}
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self._cleanups: set[asyncio.Task[None]] = set()
        # run id -> {agent: monotonic time until which it is not offered the run again}
        self._refusals: dict[str, dict[str, float]] = {}

    # --- lifecycle of the fleet itself ----------------------------------------------------------

    async def start(self) -> None:
        await self.store.run(lifecycle.disconnect_all)
        self._tasks = [asyncio.create_task(self._dispatch_loop(), name="dispatch"),
                       asyncio.create_task(self._lost_agent_loop(), name="lost-agents")]

    async def stop(self) -> None:
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        # Agent streams never end by themselves: end them now so shutdown does not wait out the
        # grace period. The agents keep their runs and outbox and dial again.
        for session in list(self.sessions.values()):
            session.closing.set()
        for _ in range(100):
            if not self.sessions:
                break
            await asyncio.sleep(0.01)
        await asyncio.gather(*self._cleanups, return_exceptions=True)

    def wake(self) -> None:
        self._wake.set()

    # --- Connect ---------------------------------------------------------------------------------

    async def connect(self, context: grpc.aio.ServicerContext) -> None:
        who = auth.current()
        first = await context.read()
        if first is grpc.aio.EOF or first.WhichOneof("body") != "hello":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "hello: the first message must be a hello")
        try:
            validation.check(first)
        except DroverError as err:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
        hello = first.hello
        claimed = hello.labels.get("pool")
        if claimed is not None and claimed != who.pool:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                f'hello.labels["pool"]: this agent\'s token serves the {_pool_name(who.pool)} pool, '
                                f"not {claimed!r}")
        if self._stopping:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the control plane is shutting down")
        if hello.name in self.sessions:
            await context.abort(grpc.StatusCode.ALREADY_EXISTS, f"name: an agent named {hello.name!r} is already connected")
        session = AgentSession(hello.name, asyncio.Queue(), token_id=who.token_id)
        self.sessions[hello.name] = session
        writer = asyncio.create_task(self._write(session, context), name=f"write-{hello.name}")
        registered = False
        try:
            listed = set(hello.active_runs) | set(hello.undelivered_runs)
            labels = {**dict(hello.labels), **({"pool": who.pool} if who.pool else {})}
            try:
                result = await self.store.run(
                    lifecycle.agent_connected, hello.name, labels, hello.capacity, list(hello.drivers),
                    hello.version, listed, hello.draining, who.token_id, who.pool)
            except DroverError as err:  # the name belongs to another agent token
                await context.abort(grpc_code(err), str(err))
            registered = True
            session.send(agent_pb2.ControlMessage(welcome=agent_pb2.Welcome(agent=hello.name, applied=result.applied)))
            for run_id in result.to_cancel:
                session.send(agent_pb2.ControlMessage(cancel=agent_pb2.CancelRun(run_id=run_id, reason="cancelled")))
            if hello.resume_runs:
                for assignment in await self.store.run(_resume_assignments, hello.name, list(hello.resume_runs),
                                                       self.config.harness, self.objects,
                                                       self.config.output_limit_bytes):
                    session.send(agent_pb2.ControlMessage(assign=assignment))
            log.info("agent %s connected (capacity %d, %s pool, %d runs listed)", hello.name, hello.capacity,
                     _pool_name(who.pool), len(listed))
            self.notifier.notify()
            self.wake()
            reader = asyncio.create_task(self._read(session, context))
            closing = asyncio.create_task(session.closing.wait())
            silent = asyncio.create_task(self._silence(session))
            await asyncio.wait({reader, closing, silent}, return_when=asyncio.FIRST_COMPLETED)
            closing.cancel()
            silent.cancel()
            if not reader.done():
                reader.cancel()
                await asyncio.gather(reader, return_exceptions=True)
                if not session.closing.is_set():
                    session.close(grpc.StatusCode.UNAVAILABLE,
                                  f"no message or heartbeat from {hello.name} for {self.config.agent_silence_seconds:g} s")
                    log.warning("agent %s: silent for %.0f s; closing its stream", hello.name,
                                self.config.agent_silence_seconds)
            elif not reader.cancelled():
                reader.result()  # the reader's own failure, if any
            if session.closing.is_set():
                await context.abort(session.close_code, session.close_reason)
        except BaseException as err:
            log.info("agent %s stream ended: %r", hello.name, err)
            raise
        finally:
            if self.sessions.get(hello.name) is session:
                del self.sessions[hello.name]
            session.outbound.put_nowait(None)
            writer.cancel()
            if registered:
                # Not awaited here: the handler may be cancelled (the peer is gone) and must not lose this.
                cleanup = asyncio.create_task(self._disconnected(hello.name, session.last_heard_at))
                self._cleanups.add(cleanup)
                cleanup.add_done_callback(self._cleanups.discard)

    async def _silence(self, session: AgentSession) -> None:
        """Returns once the agent has sent nothing (not even a heartbeat) for the silence timeout: a hung
        agent (SIGSTOP, a frozen VM) keeps its TCP connection open but says nothing."""
        limit = self.config.agent_silence_seconds
        while True:
            quiet = time.monotonic() - session.last_heard
            if quiet >= limit:
                return
            await asyncio.sleep(max(0.05, min(1.0, limit - quiet)))

    async def _disconnected(self, name: str, last_heard_at: dt.datetime) -> None:
        try:
            await self.store.run(lifecycle.agent_disconnected, name, last_heard_at)
        except Exception:  # the store may be closing at shutdown
            log.exception("recording the disconnect of %s", name)
        log.info("agent %s disconnected", name)
        self.notifier.notify()

    async def _read(self, session: AgentSession, context: grpc.aio.ServicerContext) -> None:
        while True:
            message = await context.read()
            if message is grpc.aio.EOF:
                return
            session.heard()
            if message.WhichOneof("body") != "run":
                continue  # a heartbeat: hearing it was the point
            try:
                validation.check(message)
            except DroverError as err:  # nothing of it is applied; the agent learns why and dials again
                session.close(grpc.StatusCode.INVALID_ARGUMENT, str(err))
                return
            decoded = convert.run_message(message.run)
            seq = await self.store.run(lifecycle.apply_run_message, session.name, decoded,
                                       self.config.output_limit_bytes, self.objects)
            session.send(agent_pb2.ControlMessage(ack=agent_pb2.Ack(run_id=decoded.run_id, seq=seq)))
            self.notifier.notify()
            if decoded.kind == "refused":
                until = time.monotonic() + REFUSAL_BACKOFF_SECONDS
                self._refusals.setdefault(decoded.run_id, {})[session.name] = until
            if decoded.kind in ("refused", "finished"):
                self.wake()

    async def _write(self, session: AgentSession, context: grpc.aio.ServicerContext) -> None:
        while True:
            message = await session.outbound.get()
            if message is None:
                return
            await context.write(message)

    # --- telling agents --------------------------------------------------------------------------

    def tell_cancel(self, runs: list[tuple[str, str]], reason: str) -> None:
        """Send cancel to the agents of (run_id, agent) pairs that are connected here; the others
        hear it when they reconnect (their hello lists the run and the run is marked)."""
        for run_id, agent in runs:
            session = self.sessions.get(agent)
            if session is not None:
                session.send(agent_pb2.ControlMessage(cancel=agent_pb2.CancelRun(run_id=run_id, reason=reason)))

    def tell_drain(self, agent: str) -> None:
        session = self.sessions.get(agent)
        if session is not None:
            session.send(agent_pb2.ControlMessage(drain=agent_pb2.Drain()))

    # --- dispatch --------------------------------------------------------------------------------

    async def dispatch_once(self) -> int:
        connected = list(self.sessions)
        if not connected:
            return 0
        now = time.monotonic()
        self._refusals = {run: fresh for run, by in self._refusals.items()
                          if (fresh := {a: until for a, until in by.items() if until > now})}
        avoid = {run: frozenset(by) for run, by in self._refusals.items()}
        done = await self.store.run(_assign_queued, connected, avoid, self.config.harness, self.objects,
                                    self.config.output_limit_bytes)
        for agent, assignment in done.assigned:
            session = self.sessions.get(agent)
            if session is not None:
                session.send(agent_pb2.ControlMessage(assign=assignment))
        for run_id, reason in done.failed:
            log.warning("run %s cannot be assigned: %s", run_id, reason)
            await self.store.run(lifecycle.fail_unassignable, run_id, reason)
        if done.assigned or done.failed:
            self.notifier.notify()
        return len(done.assigned)

    async def _dispatch_loop(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=self.config.dispatch_interval)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()
            try:
                if await self.router.route_pending():
                    self._wake.set()  # routed runs can be dispatched at once
                await self.dispatch_once()
            except Exception:
                log.exception("dispatch failed; retrying")
                await asyncio.sleep(1)

    async def _close_revoked(self) -> None:
        """An agent whose token was revoked (or expired) loses its stream at the next sweep."""
        sessions = list(self.sessions.values())
        valid = await self.store.read(_valid_tokens, sorted({x.token_id for x in sessions}))
        for session in sessions:
            if session.token_id not in valid and not session.closing.is_set():
                log.warning("agent %s: its token was revoked or has expired; closing its stream", session.name)
                session.close(grpc.StatusCode.UNAUTHENTICATED, "this agent's token was revoked or has expired")

    async def _lost_agent_loop(self) -> None:
        window = dt.timedelta(seconds=self.config.agent_lost_seconds)
        every = max(0.2, min(5.0, self.config.agent_lost_seconds / 4))
        while True:
            await asyncio.sleep(every)
            try:
                await self._close_revoked()
                failed = await self.store.run(lifecycle.fail_lost_runs, window)
                # A reservation whose settle never came (its supervisor died mid-call) settles at its estimate.
                await self.store.run(model_calls.settle_expired, RESERVATION_TTL)
                await self.store.run(_renew_claims, list(self.sessions))
            except Exception:
                log.exception("lost-agent sweep failed")
                continue
            if failed:
                log.warning("failed %d runs of lost agents", len(failed))
                self.notifier.notify()
                self.wake()


def _valid_tokens(s: Session, token_ids: list[int]) -> set[int]:
    return {t for t in token_ids if auth.still_valid(s, t)}


def _pool_name(pool: str) -> str:
    return repr(pool) if pool else "default"


def _assign_queued(s: Session, connected: list[str], avoid: dict[str, frozenset[str]], harness: HarnessConfig,
                   objects: DirectoryStore, output_limit: int = 0) -> "Dispatched":
    """In one transaction: plan and record the assignment of queued runs to connected agents, each
    run in a savepoint of its own."""
    agents = list(s.scalars(select(Agent).where(Agent.name.in_(connected)).order_by(Agent.name)))
    if not agents:
        return Dispatched([], [])
    active = dict(s.execute(
        select(Run.agent, func.count()).where(Run.agent.in_(connected), Run.state.in_(run_states.ACTIVE))
        .group_by(Run.agent)).all())
    slots = [AgentSlot(a.name, a.labels, a.capacity - active.get(a.name, 0), frozenset(a.drivers), a.draining,
                       a.pool or "") for a in agents]
    if all(slot.free <= 0 or slot.draining for slot in slots):
        return Dispatched([], [])
    rows = s.execute(
        select(Run, Task, Project).join(Task, Run.task_id == Task.id).join(Change, Change.id == Run.change_id)
        .join(Project, Project.name == Change.project).where(Run.state == "queued")
        .where(or_(Run.not_before.is_(None), Run.not_before <= utcnow()))
        .where(or_(Run.driver == "command", (Run.member != "") & (Run.context_hash != "")))  # routed, packet ready
        .order_by(Run.created_at, Run.id).limit(500)).all()
    queued = {run.id: (run, task, project) for run, task, project in rows}
    plan = plan_assignments(
        [QueuedRun(run.id, project.pool, run.driver, avoid.get(run.id, frozenset()))
         for run, task, project in rows],
        slots)
    out: list[tuple[str, agent_pb2.RunAssignment]] = []
    failed: list[tuple[str, str]] = []
    for run_id, agent in plan:
        run, task, project = queued[run_id]
        try:
            with s.begin_nested():  # one run that cannot be assigned never takes the batch down with it
                assignment = _assign_one(s, run, task, project, agent, harness, objects, output_limit)
        except Exception as err:
            failed.append((run_id, _unassignable(run_id, err)))
            continue
        if assignment is not None:
            out.append((agent, assignment))
    return Dispatched(out, failed)


@dataclasses.dataclass(frozen=True)
class Dispatched:
    assigned: list[tuple[str, agent_pb2.RunAssignment]]
    failed: list[tuple[str, str]]  # (run id, why it cannot be assigned): each is failed in its own transaction


def _assign_one(s: Session, run: Run, task: Task, project: Project, agent: str, harness: HarnessConfig,
                objects: DirectoryStore, output_limit: int) -> agent_pb2.RunAssignment | None:
    if lifecycle.assign(s, run.id, agent) is None:
        return None
    receipt = s.get(DecisionReceipt, run.id)
    if receipt is not None:
        receipt.data = {**(receipt.data or {}), "agent": agent}
    resources = claims.task_resources(task.spec or {})
    if resources:  # advisory: a claim another run holds is recorded as contended, never blocks
        claims.acquire(s, run.id, resources, utcnow())
    return assignments.build(s, run, task, project, harness, objects, output_limit)


def _unassignable(run_id: str, err: Exception) -> str:
    """The reason a run could not be assigned, safe to show its users: a DroverError says what is wrong
    with the run; anything else is logged with an id and named by it."""
    if isinstance(err, DroverError):
        return f"assignment_failed: {err}"
    eid = error_id()
    log.error("run %s cannot be assigned (error id %s)", run_id, eid, exc_info=err)
    return f"assignment_failed: {type(err).__name__} (error id {eid} in the control plane's log)"


def _resume_assignments(s: Session, agent: str, run_ids: list[str], harness: HarnessConfig,
                        objects: DirectoryStore, output_limit: int = 0) -> list[agent_pb2.RunAssignment]:
    """Assignments sent again (secrets included) so harness runs whose supervisor died resume."""
    out = []
    for run_id in run_ids:
        run = s.get(Run, run_id)
        if run is None or run.agent != agent or run.state not in run_states.ACTIVE or run.driver != "harness":
            continue
        task = s.get(Task, run.task_id)
        change = s.get(Change, run.change_id)
        assert task is not None and change is not None
        project = s.get(Project, change.project)
        assert project is not None
        assignment = assignments.build(s, run, task, project, harness, objects, output_limit)
        assignment.resume = True
        lifecycle.add_event(s, "run.resumed", change_id=run.change_id, task_id=run.task_id, run_id=run.id,
                            agent=agent)
        out.append(assignment)
    return out


def _renew_claims(s: Session, connected: list[str]) -> None:
    """The liveness check renews the claims of live runs on connected agents at half-life."""
    now = utcnow()
    for run_id in s.scalars(select(Run.id).where(Run.agent.in_(connected), Run.state.in_(run_states.ACTIVE))):
        claims.renew_due(s, run_id, now)
