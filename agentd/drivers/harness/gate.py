"""The budget gate: every model call attempt is reserved on the control plane before it is made
and settled with its exact usage after, each attempt separately."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import grpc
import tenacity

from agentd.daemon.connection import ChannelSettings, open_channel
from agentd.drivers.harness.loop import RunEnded
from drover.core.model import ModelError
from drover.core.usage import Usage
from drover.v1 import agent_pb2, agent_pb2_grpc

REFUSALS = {
    "run_call_cap": "run_call_cap",
    "run_cost_cap": "run_cost_cap",
    "spend_limited": "spend_limited",
    "run_not_running": "cancelled",
}


def _unavailable(err: BaseException) -> bool:
    return isinstance(err, grpc.aio.AioRpcError) and err.code() in (
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
    )


@dataclasses.dataclass
class Gate:
    channel: ChannelSettings  # dialled as agentd dials: TLS, CA, client certificate, keepalive
    token: str
    run_id: str
    model: str
    max_output_tokens: int
    incarnation: int  # supervisor starts: a resumed run's attempts get new keys
    call_number: Callable[[], int]  # the model call this attempt belongs to
    purpose: str = "agent"
    input_estimate: Callable[[], int] = lambda: 0  # tokens of the request about to be sent
    calls_used: int = 0
    calls_cap: int = 0

    def __post_init__(self) -> None:
        self._target = 0
        self._channel = open_channel(self.channel, self._target)
        self._stub = agent_pb2_grpc.AgentServiceStub(self._channel)
        self._metadata = (("authorization", f"Bearer {self.token}"),)
        self._reservations: dict[int, str] = {}

    async def _next_target(self, _state: Any = None) -> None:
        """The control plane answered UNAVAILABLE (a replica died or restarts): ask the next one. Every
        call is idempotent (a reservation by its key), so asking again anywhere is safe."""
        await self._channel.close()
        self._target += 1
        self._channel = open_channel(self.channel, self._target)
        self._stub = agent_pb2_grpc.AgentServiceStub(self._channel)

    async def _call(self, method_name: str, request: Any) -> Any:
        """One unary call; while the control plane is unreachable (restarting), keep asking for ten minutes."""
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
        await self._channel.close()

    async def reserve(self, attempt: int) -> None:
        key = f"{self.purpose}:{self.incarnation}:{self.call_number()}:{attempt}"
        self._reservations[attempt] = await self.reserve_call(
            key, self.model, self.max_output_tokens, self.input_estimate()
        )

    async def reserve_call(self, key: str, model: str, max_output_tokens: int, estimated_input_tokens: int) -> str:
        """Reserve one model call attempt (idempotent by `key`); its reservation id, or RunEnded."""
        request = agent_pb2.ReserveModelCallRequest(
            run_id=self.run_id,
            key=key,
            model=model,
            purpose=self.purpose,
            max_output_tokens=max_output_tokens,
            estimated_input_tokens=estimated_input_tokens,
        )
        answer = await self._call("ReserveModelCall", request)
        if answer.calls_cap:
            self.calls_used, self.calls_cap = answer.calls_used, answer.calls_cap
        if not answer.granted:
            # A budget refusal is spend_limited; its reason is the exact limit (change_budget, ...).
            raise RunEnded(
                REFUSALS.get(answer.refusal, "spend_limited"),
                f"the control plane refused the model call: {answer.refusal}",
                code=answer.refusal,
            )
        return str(answer.reservation_id)

    async def settle(self, attempt: int, usage: Usage | None, error: ModelError | None) -> None:
        reservation = self._reservations.pop(attempt, "")
        if reservation:
            await self.settle_call(reservation, usage, (error.error_type or type(error).__name__) if error else "")

    async def settle_call(self, reservation: str, usage: Usage | None, error: str) -> None:
        """Settle a reservation to the exact cost of `usage` (none: the attempt failed before any)."""
        u = usage or Usage()
        request = agent_pb2.SettleModelCallRequest(
            reservation_id=reservation,
            error=error,
            usage=agent_pb2.Usage(
                input_tokens=u.input_tokens,
                output_tokens=u.output_tokens,
                cache_creation_input_tokens=u.cache_creation_input_tokens,
                cache_read_input_tokens=u.cache_read_input_tokens,
            ),
        )
        await self._call("SettleModelCall", request)

    async def ask(self, key: str, text: str, blocking: bool) -> str:
        """Ask people a question (idempotent by key); answers its id."""
        request = agent_pb2.AskQuestionRequest(run_id=self.run_id, key=key, text=text, blocking=blocking)
        asked = await self._call("AskQuestion", request)
        return str(asked.id)

    async def publish(self, request: agent_pb2.PublishChangeSetRequest) -> agent_pb2.ChangeSetRef:
        return await self._call("PublishChangeSet", request)
