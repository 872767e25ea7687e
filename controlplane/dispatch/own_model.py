"""The haiku model the control plane calls itself (the routing classifier, failure-log compaction), each
call metered like a run's: reserved on the provider month and its daily count before it is made
(`controlplane.services.own_calls`), refused without a request when a meter is full, and settled after
at the exact cost of every attempt's usage, a failed one's too."""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any, Protocol

from controlplane.config import HarnessConfig
from controlplane.domain import packet, pricing
from controlplane.services import own_calls
from controlplane.store import events
from controlplane.store.engine import Store
from drover.core.model import AnthropicModel, ModelError, ModelReply
from drover.core.retry import RetryPolicy
from drover.core.usage import Usage

log = logging.getLogger("drover.router")
POLICY = RetryPolicy(max_attempts=2, stall_timeout=30)
"""One retry of a passing failure; the reservation covers both attempts."""


class CompletionModel(Protocol):
    """The part of `drover.core.model.AnthropicModel` the classifier and log compaction use (a `Bound` OwnModel)."""

    async def complete(
        self,
        *,
        system: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        messages: list[dict[str, Any]],
        max_tokens: int,
    ) -> ModelReply: ...


class MeterRefused(Exception):
    """A meter refused the call's reservation: no request was made."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"the {kind} meter refused the call")
        self.kind = kind
        """The refusing meter's kind (store.meters: provider_month, classifier_calls_day, agent_calls_day)."""


def _total(usages: list[Usage]) -> Usage:
    return Usage(
        sum(u.input_tokens for u in usages),
        sum(u.output_tokens for u in usages),
        sum(u.cache_creation_input_tokens for u in usages),
        sum(u.cache_read_input_tokens for u in usages),
    )


class OwnModel:
    """`complete` as `AnthropicModel.complete`, metered, for one purpose (own_calls.CLASSIFIER, COMPACTION) and run."""

    def __init__(self, store: Store, harness: HarnessConfig) -> None:
        self.store, self.harness = store, harness  # the router replaces harness on a reload

    @property
    def model(self) -> str:
        haiku = self.harness.tiers.get("haiku")
        return haiku.model if haiku else ""

    def bound(self, purpose: str, run_id: str) -> Bound:
        return Bound(self, purpose, run_id)

    async def complete(
        self,
        purpose: str,
        run_id: str,
        *,
        system: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        messages: list[dict[str, Any]],
        max_tokens: int,
    ) -> ModelReply:
        """The reply; raises MeterRefused (no request made) or the call's ModelError."""
        h, name = self.harness, self.model
        price = pricing.price_for(name, h.prices)
        prompt = packet.estimate_tokens(json.dumps([system, tools, messages]))
        estimate = pricing.worst_case_micros(prompt, max_tokens, price) * POLICY.max_attempts
        call = own_calls.OwnCall(events.new_id("own"), purpose, run_id, name, estimate)
        refused = await self.store.run(own_calls.reserve, call, h.budgets)
        if refused:
            raise MeterRefused(refused)
        used: list[Usage] = []

        async def on_attempt(attempt: int, usage: Usage | None, error: ModelError | None) -> None:
            if usage is not None:
                used.append(usage)

        error = ""
        try:
            async with AnthropicModel(
                h.base_url,
                h.api_key,
                name,
                dataclasses.replace(POLICY, attempt_ceiling=h.attempt_ceiling_seconds),
                on_attempt=on_attempt,
                workspace_id=h.workspace_id,
            ) as model:
                return await model.complete(system=system, tools=tools, messages=messages, max_tokens=max_tokens)
        except BaseException as err:  # a ModelError, or cancelled mid-call: what it used still settles
            error = (err.error_type if isinstance(err, ModelError) else "") or type(err).__name__
            raise
        finally:
            cost = await self.store.run(own_calls.settle, call, price, _total(used), error)
            log.debug("%s call %s for run %s cost %d micro-dollars", purpose, call.call_id, run_id, cost)


class Bound:
    """An OwnModel call site's purpose and run, so a caller sees `complete` as the classifier's
    `CompletionModel` protocol has it."""

    def __init__(self, own: OwnModel, purpose: str, run_id: str) -> None:
        self.own, self.purpose, self.run_id = own, purpose, run_id

    async def complete(
        self,
        *,
        system: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        messages: list[dict[str, Any]],
        max_tokens: int,
    ) -> ModelReply:
        return await self.own.complete(
            self.purpose, self.run_id, system=system, tools=tools, messages=messages, max_tokens=max_tokens
        )
