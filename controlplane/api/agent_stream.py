"""Agent sessions: the Connect stream of each agentd. The first message is a hello; then the agent's
run messages are applied (one transaction each) and acked, and what the control plane has to say to
the agent (welcome, assignments, cancels, acks, drain) goes out through the session's queue, written
by one task per stream. A stream that carries nothing, not even a heartbeat, for the silence timeout is
closed, and the agent counts as gone since it was last heard."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import itertools
import logging
import time
from collections.abc import Callable
from typing import Any

import grpc
from sqlalchemy.orm import Session

from controlplane.api import auth, convert, status, validation
from controlplane.config import ServerConfig
from controlplane.dispatch.assignments import Assignment
from controlplane.dispatch.dispatcher import resume_assignments
from controlplane.dispatch.roster import Roster
from controlplane.dispatch.run_check import RunActivity
from controlplane.domain.scheduling import AgentHello
from controlplane.services import agent_presence, run_input, run_lifecycle, tokens
from controlplane.services.credentials import Sealer
from controlplane.services.notify import Notifier
from controlplane.store import locks
from controlplane.store.engine import Store
from controlplane.store.group_commit import GroupCommit
from controlplane.store.models import utcnow
from controlplane.store.objects import ObjectStore
from drover.errors import AlreadyExists, DroverError, InvalidArgument, PermissionDenied
from drover.v1 import agent_pb2

log = logging.getLogger("drover.agents")


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
    applying: bool = False
    """One of its messages is being applied: the stream is not read meanwhile, so it is not silent."""

    def send(self, message: agent_pb2.ControlMessage) -> None:
        self.outbound.put_nowait(message)

    def heard(self) -> None:
        self.last_heard, self.last_heard_at = time.monotonic(), utcnow()

    def close(self, code: grpc.StatusCode, reason: str) -> None:
        self.close_code, self.close_reason = code, reason
        self.closing.set()


class AgentSessions:
    """The agents connected to this control plane."""

    def __init__(
        self,
        store: Store,
        config: ServerConfig,
        notifier: Notifier,
        objects: ObjectStore,
        sealer: Sealer | None = None,
    ) -> None:
        self.store, self.config, self.notifier, self.objects = store, config, notifier, objects
        self.sealer = sealer
        """Opens the projects' git credentials for resumed runs' secret_env."""
        self.sessions: dict[str, AgentSession] = {}
        self.roster = Roster()  # the recorded hellos of the agents connected here: dispatch offers them runs
        self.activity = RunActivity()
        """When this replica last saw each run's output, tool or model calls; flushed by the run check."""
        self.messages = GroupCommit(store, run_lifecycle.apply_run_message, lock=run_lifecycle.lock_message_changes)
        """Every stream's run messages, applied in group commits and acked after them."""
        self.on_change: Callable[[], None] = lambda: None
        """Called when an agent connects or a run ends or is refused: dispatch may have work."""
        self.on_refused: Callable[[str, str], None] = lambda run_id, agent: None
        self.replica = ""
        """This replica's id, written on the agents whose streams it holds."""
        self.tell_others: Callable[[dict[str, Any]], None] = lambda note: None
        """Tells the other replicas (LISTEN/NOTIFY) what only the holder of an agent's stream can send."""
        self._stopping = False
        self._cleanups: set[asyncio.Task[None]] = set()

    # --- what dispatch and the services tell agents --------------------------------------------

    def connected(self) -> list[str]:
        return list(self.sessions)

    def hellos(self) -> list[AgentHello]:
        """The connected agents whose hellos are recorded (a stream still in its hello is not yet), by name."""
        return self.roster.of(self.sessions)

    def send(self, agent: str, assignment: Assignment) -> None:
        session = self.sessions.get(agent)
        if session is not None:
            session.send(agent_pb2.ControlMessage(assign=convert.assignment(assignment)))

    def tell_cancel(self, runs: list[tuple[str, str]], reason: str) -> None:
        """Send cancel to the agents of (run_id, agent) pairs that are connected here; the others
        hear it when they reconnect (their hello lists the run and the run is marked)."""
        elsewhere = []
        for run_id, agent in runs:
            session = self.sessions.get(agent)
            if session is not None:
                session.send(agent_pb2.ControlMessage(cancel=agent_pb2.CancelRun(run_id=run_id, reason=reason)))
            else:
                elsewhere.append([run_id, agent])
        if elsewhere:
            self.tell_others({"kind": "cancel", "runs": elsewhere, "reason": reason})

    def tell_inputs(self, pending: list[run_input.Pending]) -> None:
        """Send inputs to their agents if connected here; the others get them when they reconnect."""
        elsewhere = set()
        for p in pending:
            session = self.sessions.get(p.agent)
            if session is not None:
                session.send(agent_pb2.ControlMessage(input=_session_input(p)))
            else:
                elsewhere.add(p.agent)
        for agent in sorted(elsewhere):  # the holder reads the inputs themselves from the database
            self.tell_others({"kind": "inputs", "agent": agent})

    def tell_drain(self, agent: str, undrain: bool = False) -> None:
        session = self.sessions.get(agent)
        if session is not None:
            self.roster.draining(agent, not undrain)
            session.send(agent_pb2.ControlMessage(drain=agent_pb2.Drain(undrain=undrain)))
        else:
            self.tell_others({"kind": "drain", "agent": agent, "undrain": undrain})

    async def on_note(self, note: dict[str, Any]) -> None:
        """What another replica told this one: act on it if the agent's stream is here."""
        kind = note.get("kind")
        if kind == "cancel":
            for run_id, agent in note.get("runs", []):
                if agent in self.sessions:
                    self.tell_cancel([(str(run_id), str(agent))], str(note.get("reason", "cancelled")))
        elif kind == "inputs" and note.get("agent") in self.sessions:
            self.tell_inputs(await self.store.read(run_input.pending_for, str(note["agent"])))
        elif kind == "drain" and note.get("agent") in self.sessions:
            self.tell_drain(str(note["agent"]), bool(note.get("undrain")))

    async def close_revoked(self) -> None:
        """An agent whose token was revoked (or expired) loses its stream."""
        sessions = list(self.sessions.values())
        valid = await self.store.read(_valid_tokens, sorted({x.token_id for x in sessions}))
        for session in sessions:
            if session.token_id not in valid and not session.closing.is_set():
                log.warning("agent %s: its token was revoked or has expired; closing its stream", session.name)
                session.close(grpc.StatusCode.UNAUTHENTICATED, "this agent's token was revoked or has expired")

    async def stop(self) -> None:
        """End every stream now, so shutdown does not wait out the grace period. The agents keep their runs
        and outbox and dial again."""
        self._stopping = True
        for session in list(self.sessions.values()):
            session.closing.set()
        for _ in range(100):
            if not self.sessions:
                break
            await asyncio.sleep(0.01)
        await asyncio.gather(*self._cleanups, return_exceptions=True)

    # --- Connect ---------------------------------------------------------------------------------

    async def connect(self, context: grpc.aio.ServicerContext) -> None:
        who = auth.current()
        hello = await self._hello(context, who)
        session = AgentSession(hello.name, asyncio.Queue(), token_id=who.token_id)
        self.sessions[hello.name] = session
        writer = asyncio.create_task(self._write(session, context), name=f"write-{hello.name}")
        registered = False
        try:
            await self._welcome(session, hello, who, context)
            registered = True
            await self._serve(session, context)
        except BaseException as err:
            log.info("agent %s stream ended: %r", hello.name, err)
            raise
        finally:
            if self.sessions.get(hello.name) is session:
                del self.sessions[hello.name]
                self.roster.disconnected(hello.name)
            session.outbound.put_nowait(None)
            writer.cancel()
            if registered:
                # Not awaited here: the handler may be cancelled (the peer is gone) and must not lose this.
                cleanup = asyncio.create_task(self._disconnected(hello.name, session.last_heard_at))
                self._cleanups.add(cleanup)
                cleanup.add_done_callback(self._cleanups.discard)

    async def _hello(self, context: grpc.aio.ServicerContext, who: tokens.Principal) -> agent_pb2.Hello:
        first = await context.read()
        if first is grpc.aio.EOF or first.WhichOneof("body") != "hello":
            await status.abort(context, InvalidArgument("the first message must be a hello", field="hello"))
        try:
            validation.check(first)
        except DroverError as err:
            await status.abort(context, err)
        hello = first.hello
        claimed = hello.labels.get("pool")
        if claimed is not None and claimed != who.pool:
            await status.abort(
                context,
                PermissionDenied(
                    f"this agent's token serves the {_pool_name(who.pool)} pool, not {claimed!r}",
                    field='hello.labels["pool"]',
                ),
            )
        if self._stopping:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the control plane is shutting down")
        if hello.name in self.sessions:
            await status.abort(
                context, AlreadyExists(f"an agent named {hello.name!r} is already connected", field="name")
            )
        return hello

    async def _welcome(
        self, session: AgentSession, hello: agent_pb2.Hello, who: tokens.Principal, context: grpc.aio.ServicerContext
    ) -> None:
        """Record the agent (its name bound to its token), answer the hello, re-send what it must resume."""
        listed = set(hello.active_runs) | set(hello.undelivered_runs)
        labels = {**dict(hello.labels), **({"pool": who.pool} if who.pool else {})}
        try:
            result = await self.store.run(
                agent_presence.agent_connected,
                hello.name,
                labels,
                hello.capacity,
                list(hello.drivers),
                hello.version,
                listed,
                hello.draining,
                who.token_id,
                who.pool,
                self.config.lifecycle,
                self.replica,
                dt.timedelta(seconds=self.config.agent_silence_seconds),
                self.objects,
            )
        except DroverError as err:  # the name belongs to another agent token
            await status.abort(context, err)
        self.roster.connected(result.hello)
        session.send(agent_pb2.ControlMessage(welcome=agent_pb2.Welcome(agent=hello.name, applied=result.applied)))
        for run_id in result.to_cancel:
            session.send(agent_pb2.ControlMessage(cancel=agent_pb2.CancelRun(run_id=run_id, reason="cancelled")))
        for pending in await self.store.read(run_input.pending_for, hello.name):
            session.send(agent_pb2.ControlMessage(input=_session_input(pending)))
        if hello.resume_runs:
            for assignment in await self.store.run(
                resume_assignments,
                hello.name,
                list(hello.resume_runs),
                self.config.harness,
                self.objects,
                self.config.output_limit_bytes,
                self.sealer,
            ):
                session.send(agent_pb2.ControlMessage(assign=convert.assignment(assignment)))
        log.info(
            "agent %s connected (capacity %d, %s pool, %d runs listed)",
            hello.name,
            hello.capacity,
            _pool_name(who.pool),
            len(listed),
        )
        self.notifier.notify()
        self.on_change()

    async def _serve(self, session: AgentSession, context: grpc.aio.ServicerContext) -> None:
        """Read until the agent goes, falls silent, or the stream is closed from here."""
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
                session.close(
                    grpc.StatusCode.UNAVAILABLE,
                    f"no message or heartbeat from {session.name} for {self.config.agent_silence_seconds:g} s",
                )
                log.warning(
                    "agent %s: silent for %.0f s; closing its stream", session.name, self.config.agent_silence_seconds
                )
        elif not reader.cancelled():
            reader.result()  # the reader's own failure, if any
        if session.closing.is_set():
            await context.abort(session.close_code, session.close_reason)

    async def _silence(self, session: AgentSession) -> None:
        """Returns once the agent has sent nothing (not even a heartbeat) for the silence timeout: a hung
        agent (SIGSTOP, a frozen VM) keeps its TCP connection open but says nothing."""
        limit = self.config.agent_silence_seconds
        while True:
            if session.applying:
                session.heard()
            quiet = time.monotonic() - session.last_heard
            if quiet >= limit:
                return
            # Wake when the silence could first expire: once a second per stream was 5,000 wake-ups a
            # second, most of an idle fleet's CPU.
            await asyncio.sleep(max(0.05, limit - quiet))

    async def _disconnected(self, name: str, last_heard_at: dt.datetime) -> None:
        try:
            await self.store.run(agent_presence.agent_disconnected, name, last_heard_at, self.replica)
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
            self.activity.seen(decoded.run_id)  # progress, unlike the agent's heartbeats
            if decoded.kind == "refused":
                # Before the run is requeued: a dispatch pass between the commit and this note would
                # hand the run straight back to the agent that refused it.
                self.on_refused(decoded.run_id, session.name)
            session.applying = True  # the wait is the control plane's, not the agent's silence
            try:
                seq = await self._apply(session.name, decoded)
            finally:
                session.applying = False
                session.heard()
            session.send(agent_pb2.ControlMessage(ack=agent_pb2.Ack(run_id=decoded.run_id, seq=seq)))
            self.notifier.notify()
            if decoded.kind in ("refused", "finished"):
                self.on_change()

    async def _apply(self, agent: str, decoded: run_lifecycle.RunMessage) -> int:
        """Apply one message; answers the seq to ack. A deadlock or busy database the store's retries
        did not outlast is the control plane's trouble, not the agent's: the message is applied again
        (after a pause) until it goes in; the stream stays open and the agent keeps its runs."""
        for attempt in itertools.count():
            try:
                seq: int = await self.messages.apply(
                    agent, decoded, self.config.output_limit_bytes, self.objects, self.config.lifecycle
                )
                return seq
            except Exception as err:
                reason = locks.retry_reason(err)
                if reason is None:
                    raise
                log.warning(
                    "agent %s: run %s seq %d met %s; applying it again", agent, decoded.run_id, decoded.seq, reason
                )
                await asyncio.sleep(locks.pause(attempt))
        raise AssertionError("unreachable")

    async def _write(self, session: AgentSession, context: grpc.aio.ServicerContext) -> None:
        while True:
            message = await session.outbound.get()
            if message is None:
                return
            await context.write(message)


def _session_input(p: run_input.Pending) -> agent_pb2.SessionInput:
    return agent_pb2.SessionInput(
        run_id=p.run_id, input_seq=p.seq, kind=p.kind, text=p.text, input_id=p.id, question_id=p.question_id
    )


def _valid_tokens(s: Session, token_ids: list[int]) -> set[int]:
    return {t for t in token_ids if tokens.still_valid(s, t)}


def _pool_name(pool: str) -> str:
    return repr(pool) if pool else "default"
