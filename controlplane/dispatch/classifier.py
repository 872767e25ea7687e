"""The routing classifier call: one haiku completion, within the shared daily cap.

The caller's meter owns the cap (200 classifier calls per UTC day, shared) and
hands it in as `reserve`; this module never sees the store. Only the tier and
the confidence come back: the reply text itself is dropped here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from controlplane.domain.tiers import (
    CLASSIFIER_SYSTEM,
    ClassifierAnswer,
    TaskTraits,
    classifier_messages,
    parse_classifier,
)
from drover.core.model import ModelError, ModelReply

MAX_TOKENS = 100
"""Room for the JSON answer and a little prose around it."""


class CompletionModel(Protocol):
    """The part of `drover.core.model.AnthropicModel` the classifier uses."""

    async def complete(
        self,
        *,
        system: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        messages: list[dict[str, Any]],
        max_tokens: int,
    ) -> ModelReply: ...


async def classify(
    model: CompletionModel, t: TaskTraits, objective: str, reserve: Callable[[], Awaitable[bool]]
) -> ClassifierAnswer:
    """Ask the classifier for a tier; abstains ("capped", "failed", ...) rather than raising.

    `reserve` takes one call from the daily cap and says False when the cap is
    reached, in which case no call is made. Call this only when
    `routing.needs_classifier(t)`.
    """
    if not await reserve():
        return ClassifierAnswer.abstain("capped")
    try:
        reply = await model.complete(
            system=[{"type": "text", "text": CLASSIFIER_SYSTEM}],
            tools=[],
            messages=classifier_messages(t, objective),
            max_tokens=MAX_TOKENS,
        )
    except ModelError:
        return ClassifierAnswer.abstain("failed")
    return parse_classifier("".join(b.get("text", "") for b in reply.content if b.get("type") == "text"))
