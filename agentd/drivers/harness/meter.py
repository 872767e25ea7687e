"""The harness's model-call meter: every attempt of one kind of model call (the loop's, or folding's) is
reserved through the control plane before it is made and settled with its exact usage after, each
attempt separately (agentd/run/control_plane.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from agentd.errors import ModelCallRefused, RunEnded
from agentd.run.control_plane import ControlPlane, ModelCall
from drover.core.model import ModelError
from drover.core.usage import Usage

REFUSALS = {
    "run_call_cap": "run_call_cap",
    "run_cost_cap": "run_cost_cap",
    "spend_limited": "spend_limited",
    "run_not_running": "cancelled",
}
"""The run's outcome for each refusal of the control plane; any other refusal is a budget's: spend_limited."""


def ended_by(refused: ModelCallRefused) -> RunEnded:
    """How a refused model call ends the run; the code is the exact limit (change_budget, ...)."""
    return RunEnded(REFUSALS.get(refused.code, "spend_limited"), str(refused), code=refused.code)


@dataclasses.dataclass
class Meter:
    control_plane: ControlPlane
    model: str
    max_output_tokens: int
    incarnation: int  # supervisor starts: a resumed run's attempts get new keys
    call_number: Callable[[], int]  # the model call this attempt belongs to
    purpose: str = "agent"
    input_estimate: Callable[[], int] = lambda: 0  # tokens of the request about to be sent
    calls_used: int = 0
    calls_cap: int = 0

    def __post_init__(self) -> None:
        self._reservations: dict[int, str] = {}

    async def reserve(self, attempt: int) -> None:
        """Reserve the attempt before it is made; RunEnded when the control plane refuses it."""
        key = f"{self.purpose}:{self.incarnation}:{self.call_number()}:{attempt}"
        call = ModelCall(key, self.model, self.purpose, self.max_output_tokens, self.input_estimate())
        try:
            reservation = await self.control_plane.reserve(call)
        except ModelCallRefused as refused:
            raise ended_by(refused) from None
        if reservation.calls_cap:
            self.calls_used, self.calls_cap = reservation.calls_used, reservation.calls_cap
        self._reservations[attempt] = reservation.id

    async def settle(self, attempt: int, usage: Usage | None, error: ModelError | None) -> None:
        reservation = self._reservations.pop(attempt, "")
        if reservation:
            await self.control_plane.settle(
                reservation, usage, (error.error_type or type(error).__name__) if error else ""
            )
