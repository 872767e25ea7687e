"""The connection to the control plane: dial out, hello, replay the outbox, follow control
messages; on any failure reconnect with backoff (0.5 s doubling to `reconnect_max_seconds`, 30 s by
default, jitter included), so after a control-plane restart every agent is back within that long. A
refusal that waiting does not heal (a bad token) raises `Rejected` instead, unless `retry_auth`."""

from __future__ import annotations

import asyncio
import base64
import collections
import dataclasses
import logging
import pathlib
from collections.abc import Callable
from typing import Any

import grpc
import tenacity

from agentd.daemon.config import AgentConfig
from agentd.daemon.outbox import Outbox
from agentd.errors import ControlPlaneLost, ControlPlaneRejected
from drover.v1 import agent_pb2, agent_pb2_grpc

log = logging.getLogger("agentd.connection")
WELCOME_TIMEOUT_SECONDS = 60.0
"""A control plane that takes the stream but does not answer hello this long is tried again."""


UNHEALING = frozenset({grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED})
"""A bad, revoked or expired token; a token not allowed what the agent asks (a name bound to another
agent token, another pool's label). ALREADY_EXISTS (a session of the same name still open) does heal:
the control plane drops a dead agent's stream within agent_silence_seconds."""


def heals_by_waiting(code: grpc.StatusCode, retry_auth: bool) -> bool:
    """Whether to dial again after the control plane refused the hello with `code`."""
    return retry_auth or code not in UNHEALING


@dataclasses.dataclass(frozen=True)
class ChannelSettings:
    """How to dial the control plane. agentd hands these to each harness supervisor (with its other
    secrets, on stdin) so the model-call gate dials exactly as agentd does; keys stay in their files."""

    control_plane: str
    tls: bool = False
    ca_file: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    keepalive_seconds: int = 10

    @classmethod
    def of(cls, config: AgentConfig) -> ChannelSettings:
        def absolute(path: str) -> str:  # a supervisor need not share agentd's working directory
            return str(pathlib.Path(path).absolute()) if path else ""

        return cls(
            config.control_plane,
            config.tls,
            absolute(config.ca_file),
            absolute(config.tls_cert),
            absolute(config.tls_key),
            config.keepalive_seconds,
        )


def channel_options(settings: ChannelSettings) -> list[tuple[str, Any]]:
    return [
        ("grpc.keepalive_time_ms", settings.keepalive_seconds * 1000),
        ("grpc.keepalive_timeout_ms", 10_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.max_receive_message_length", 16 * 1024 * 1024),
        # Each attempt opens a new channel; with gRPC's process-wide subchannel pool it would inherit the
        # last one's connection backoff (growing to 120 s), and a restarted control plane was refused
        # for minutes after it listened again. A channel of its own dials at once.
        ("grpc.use_local_subchannel_pool", 1),
        ("grpc.initial_reconnect_backoff_ms", 500),
        ("grpc.max_reconnect_backoff_ms", 5_000),
    ]


def targets(control_plane: str) -> list[str]:
    """`host:port[,host:port...]`: the control-plane replicas (or one load-balanced name), in the order
    agentd tries them."""
    return [t.strip() for t in control_plane.split(",") if t.strip()] or [control_plane]


def open_channel(settings: ChannelSettings, index: int = 0) -> grpc.aio.Channel:
    """A channel to the control plane: the `index`th target (modulo their number)."""
    listed = targets(settings.control_plane)
    target = listed[index % len(listed)]
    if settings.tls:

        def read(path: str) -> bytes | None:
            return pathlib.Path(path).read_bytes() if path else None

        credentials = grpc.ssl_channel_credentials(
            read(settings.ca_file), read(settings.tls_key), read(settings.tls_cert)
        )
        return grpc.aio.secure_channel(target, credentials, options=channel_options(settings))
    return grpc.aio.insecure_channel(target, options=channel_options(settings))


def to_wire(run_id: str, message: dict[str, Any]) -> agent_pb2.AgentMessage:
    kind = message["kind"]
    run = agent_pb2.RunMessage(run_id=run_id, seq=message["seq"])
    if kind == "started":
        run.started.SetInParent()
    elif kind == "log":
        run.log.stream, run.log.text = message["stream"], message["text"]
    elif kind == "finished":
        run.finished.status = message["status"]
        run.finished.exit_code = message.get("exit_code", 0)
        run.finished.reason = message.get("reason", "")
        run.finished.error = message.get("error", "")
        run.finished.parked = message.get("parked", "")
        run.finished.session_state = base64.b64decode(message.get("state", ""))
        run.finished.setup_seconds = float(message.get("setup_seconds", 0.0))
        run.finished.setup_cached = bool(message.get("setup_cached", False))
        result = message.get("result")
        if isinstance(result, dict):
            run.finished.result.text = str(result.get("text", ""))
            run.finished.result.turns = int(result.get("turns", 0))
            run.finished.result.cost_micros = int(result.get("cost_micros", 0))
            run.finished.result.success = bool(result.get("success", False))
            run.finished.result.compactions = int(result.get("compactions", 0))
    elif kind == "refused":
        run.refused.reason = message["reason"]
    elif kind == "input_received":
        run.input_received.input_seq = message["input_seq"]
    return agent_pb2.AgentMessage(run=run)


def reconnect_wait(most: float) -> tenacity.wait.wait_base:
    """0.5 s doubling with up to 0.5 s of jitter, never more than `most` seconds in all."""
    return tenacity.wait_exponential_jitter(initial=0.5, exp_base=2, max=most, jitter=min(0.5, most / 4))


class Connection:
    """Keeps one session open to the control plane and hands control messages to `on_control`."""

    def __init__(
        self,
        config: AgentConfig,
        outbox: Outbox,
        hello: Callable[[], agent_pb2.Hello],
        on_control: Callable[[agent_pb2.ControlMessage], None],
        on_welcome: Callable[[agent_pb2.Welcome], None],
    ) -> None:
        self.config = config
        self.outbox = outbox
        self.hello = hello
        self.on_control = on_control
        self.on_welcome = on_welcome
        self.direct: collections.deque[agent_pb2.AgentMessage] = collections.deque()
        self.connected = asyncio.Event()
        self.target = 0
        """Which of the control-plane targets is dialled next; a failed or ended session moves on."""

    def send_direct(self, message: agent_pb2.AgentMessage) -> None:
        """A message that is not kept in the outbox (a refusal: the control plane requeues
        an assignment that a reconnecting agent does not list anyway)."""
        self.direct.append(message)
        self.outbox.changed.set()

    async def run_forever(self) -> None:
        while True:
            retrying = tenacity.AsyncRetrying(
                retry=tenacity.retry_if_exception_type(ControlPlaneLost),
                wait=reconnect_wait(self.config.reconnect_max_seconds),
                before_sleep=lambda state: log.warning(
                    "control plane %s unreachable (%s); retrying in %.1f s",
                    self._target_name(),
                    state.outcome.exception() if state.outcome else "",
                    state.upcoming_sleep,
                ),
                reraise=True,
            )
            async for attempt in retrying:
                with attempt:
                    try:
                        await self._session()
                    except ControlPlaneLost:
                        self.target += 1  # the next replica, if there are several
                        raise
            # A session that was up and then ended: dial again at once, backoff starting afresh.

    def _target_name(self) -> str:
        listed = targets(self.config.control_plane)
        return listed[self.target % len(listed)]

    async def _session(self) -> None:
        try:
            token = self.config.token_file.read_text().strip()
        except OSError as err:
            raise ControlPlaneLost(f"cannot read the token file {self.config.token_file}: {err.strerror}") from err
        channel = open_channel(ChannelSettings.of(self.config), self.target)
        established = False
        try:
            stub = agent_pb2_grpc.AgentServiceStub(channel)
            call = stub.Connect(metadata=(("authorization", f"Bearer {token}"),))
            try:
                first = await asyncio.wait_for(self._hello(call), WELCOME_TIMEOUT_SECONDS)
            except TimeoutError as err:
                raise ControlPlaneLost(f"no answer to hello within {WELCOME_TIMEOUT_SECONDS:g} s") from err
            if first is grpc.aio.EOF or first.WhichOneof("body") != "welcome":
                raise ControlPlaneLost("the control plane did not answer hello")
            established = True
            self.on_welcome(first.welcome)
            self.connected.set()
            log.info("connected to %s as %s", self._target_name(), first.welcome.agent)
            sender = asyncio.create_task(self._send(call), name="outbox-sender")
            try:
                while True:
                    message = await call.read()
                    if message is grpc.aio.EOF:
                        break
                    self.on_control(message)
                    if sender.done():
                        sender.result()
            finally:
                sender.cancel()
                await asyncio.gather(sender, return_exceptions=True)
        except grpc.aio.AioRpcError as err:
            if not established and not heals_by_waiting(err.code(), self.config.retry_auth):
                raise ControlPlaneRejected(
                    f"the control plane {self._target_name()} refused agent {self.config.name!r} "
                    f"(token file {self.config.token_file}): {err.code().name}: {err.details()}"
                ) from err
            if not established:
                raise ControlPlaneLost(f"{err.code().name}: {err.details()}") from err
            log.warning("stream to the control plane ended: %s %s", err.code().name, err.details())
            self.target += 1  # it may have died: try the next replica first
        finally:
            self.connected.clear()
            await channel.close()
        if not established:
            raise ControlPlaneLost("stream closed before welcome")

    async def _hello(self, call: Any) -> Any:
        await call.write(agent_pb2.AgentMessage(hello=self.hello()))
        return await call.read()

    async def _send(self, call: Any) -> None:
        """Send every stored message not yet acked, in seq order per run, then what comes next; when
        nothing has been sent for a keepalive interval, a heartbeat, so the control plane can tell a
        quiet agent from a hung one."""
        cursors: dict[str, int] = {}
        while True:
            self.outbox.changed.clear()
            while self.direct:
                await call.write(self.direct.popleft())
            for run_id, box in list(self.outbox.runs.items()):
                start = cursors.get(run_id, box.acked + 1)
                for message in list(box.pending):
                    if message["seq"] >= start:
                        await call.write(to_wire(run_id, message))
                        cursors[run_id] = message["seq"] + 1
            try:
                await asyncio.wait_for(self.outbox.changed.wait(), timeout=self.config.keepalive_seconds)
            except TimeoutError:
                await call.write(agent_pb2.AgentMessage(heartbeat=agent_pb2.Heartbeat()))
