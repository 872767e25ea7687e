"""What a run's supervisor asks of the control plane: reserve and settle each model call attempt, ask
people a question, publish the Task's ChangeSet, and take the input people send. `ControlPlane` is the
Protocol every driver, the model gateway and the harness call; `GrpcControlPlane` is its one
implementation: unary calls over its own channel, dialled as agentd dials (TLS, CA, client
certificate, keepalive), and the input agentd relays into RUN_DIR (agentd/run/session_input.py)."""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import TYPE_CHECKING, Any, Protocol

from agentd.errors import ModelCallRefused
from agentd.run import session_input
from agentd.run.session_input import Input
from drover.core.usage import Usage

if TYPE_CHECKING:
    from drover.core.gitspace import ChangeSetResult


@dataclasses.dataclass(frozen=True)
class Reservation:
    id: str
    calls_used: int = 0
    calls_cap: int = 0
    """The run's model-call cap (0: none named) and how much of it is used, as the control plane counts."""


@dataclasses.dataclass(frozen=True)
class ModelCall:
    """One model call attempt to reserve: idempotent by `key`."""

    key: str
    model: str
    purpose: str
    max_output_tokens: int
    estimated_input_tokens: int = 0


class ControlPlane(Protocol):
    async def reserve(self, call: ModelCall) -> Reservation:
        """Reserve the attempt's worst-case cost; ModelCallRefused when a budget or cap says no."""
        ...

    async def settle(self, reservation_id: str, usage: Usage | None, error: str) -> None:
        """Settle a reservation to the exact cost of `usage` (None: the attempt failed before any)."""
        ...

    async def ask(self, key: str, text: str, blocking: bool) -> str:
        """Ask people a question (idempotent by key); answers its id."""
        ...

    async def publish(self, result: ChangeSetResult, summary: str, intent: dict[str, Any], left_out: list[str]) -> str:
        """Publish the Task's ChangeSet; answers its id."""
        ...

    def inputs(self, after: int) -> list[Input]:
        """People's input to the session after seq `after`, in order."""
        ...

    def applied(self, seq: int) -> None:
        """The session has taken input `seq` (a restarted supervisor never takes it again)."""
        ...

    async def close(self) -> None: ...


def _unavailable(err: BaseException) -> bool:
    import grpc

    return isinstance(err, grpc.aio.AioRpcError) and err.code() in (
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
    )


class GrpcControlPlane:
    """The control plane over gRPC (AgentService's unary calls), with the run's agent token."""

    def __init__(self, channel: Any, token: str, run_id: str, run_dir: pathlib.Path) -> None:
        """`channel`: agentd's ChannelSettings, or their fields as agentd hands them over (TLS as file paths)."""
        from agentd.daemon.connection import ChannelSettings

        self.settings = channel if isinstance(channel, ChannelSettings) else ChannelSettings(**channel)
        self.run_id, self.run_dir = run_id, run_dir
        self._metadata = (("authorization", f"Bearer {token}"),)
        self._target = 0
        self._channel: Any = None
        self._stub: Any = None

    def _open(self) -> None:
        from agentd.daemon.connection import open_channel
        from drover.v1 import agent_pb2_grpc

        self._channel = open_channel(self.settings, self._target)
        self._stub = agent_pb2_grpc.AgentServiceStub(self._channel)

    async def _next_target(self, _state: Any = None) -> None:
        """The control plane answered UNAVAILABLE (a replica died or restarts): ask the next one. Every
        call is idempotent (a reservation by its key), so asking again anywhere is safe."""
        if self._channel is not None:
            await self._channel.close()
        self._target += 1
        self._open()

    async def _call(self, method_name: str, request: Any) -> Any:
        """One unary call; while the control plane is unreachable (restarting), keep asking for ten minutes."""
        import tenacity

        if self._stub is None:
            self._open()
        async for attempt in tenacity.AsyncRetrying(
            retry=tenacity.retry_if_exception(_unavailable),
            reraise=True,
            wait=tenacity.wait_exponential_jitter(initial=0.2, max=30),
            stop=tenacity.stop_after_delay(600),
            before_sleep=self._next_target,
        ):
            with attempt:
                return await getattr(self._stub, method_name)(request, metadata=self._metadata)

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()

    async def reserve(self, call: ModelCall) -> Reservation:
        from drover.v1 import agent_pb2

        answer = await self._call(
            "ReserveModelCall",
            agent_pb2.ReserveModelCallRequest(
                run_id=self.run_id,
                key=call.key,
                model=call.model,
                purpose=call.purpose,
                max_output_tokens=call.max_output_tokens,
                estimated_input_tokens=call.estimated_input_tokens,
            ),
        )
        if not answer.granted:
            raise ModelCallRefused(answer.refusal, f"the control plane refused the model call: {answer.refusal}")
        return Reservation(str(answer.reservation_id), answer.calls_used, answer.calls_cap)

    async def settle(self, reservation_id: str, usage: Usage | None, error: str) -> None:
        from drover.v1 import agent_pb2

        u = usage or Usage()
        await self._call(
            "SettleModelCall",
            agent_pb2.SettleModelCallRequest(
                reservation_id=reservation_id,
                error=error,
                usage=agent_pb2.Usage(
                    input_tokens=u.input_tokens,
                    output_tokens=u.output_tokens,
                    cache_creation_input_tokens=u.cache_creation_input_tokens,
                    cache_read_input_tokens=u.cache_read_input_tokens,
                ),
            ),
        )

    async def ask(self, key: str, text: str, blocking: bool) -> str:
        from drover.v1 import agent_pb2

        asked = await self._call(
            "AskQuestion", agent_pb2.AskQuestionRequest(run_id=self.run_id, key=key, text=text, blocking=blocking)
        )
        return str(asked.id)

    async def publish(self, result: ChangeSetResult, summary: str, intent: dict[str, Any], left_out: list[str]) -> str:
        from drover.v1 import agent_pb2

        ref = await self._call(
            "PublishChangeSet",
            agent_pb2.PublishChangeSetRequest(
                run_id=self.run_id,
                branch=result.branch,
                commit=result.commit,
                base_commit=result.base_commit,
                start_commit=result.start_commit,
                stacked_on=result.stacked_on,
                files=result.files,
                own_files=result.own_files,
                patch=result.patch,
                summary=summary,
                intent_json=json.dumps(intent),
                left_out=left_out,
            ),
        )
        return str(ref.changeset_id)

    def inputs(self, after: int) -> list[Input]:
        return session_input.inputs(self.run_dir, after)

    def applied(self, seq: int) -> None:
        session_input.mark_applied(self.run_dir, seq)
