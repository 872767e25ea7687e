"""The routing classifier call: one haiku completion, metered.

The caller hands in a model whose calls are metered (`own_model.OwnModel`, bound to the classifier
purpose): it refuses with `MeterRefused`, making no request, when the shared daily cap (200 classifier
calls per UTC day) or the monthly provider budget is full. This module never sees the store. Only the
tier and the confidence come back: the reply text itself is dropped here.
"""

from __future__ import annotations

from controlplane.dispatch.own_model import CompletionModel, MeterRefused
from controlplane.domain.tiers import (
    CLASSIFIER_SYSTEM,
    ClassifierAnswer,
    TaskTraits,
    classifier_messages,
    parse_classifier,
)
from controlplane.store.meters import CLASSIFIER_CALLS_DAY
from drover.core.model import ModelError

MAX_TOKENS = 100
"""Room for the JSON answer and a little prose around it."""


async def classify(model: CompletionModel, t: TaskTraits, objective: str) -> ClassifierAnswer:
    """Ask the classifier for a tier; abstains rather than raising: "capped" (the daily classifier cap),
    "budget" (another meter, the monthly provider budget), "failed", ... Call this only when
    `routing.needs_classifier(t)`."""
    try:
        reply = await model.complete(
            system=[{"type": "text", "text": CLASSIFIER_SYSTEM}],
            tools=[],
            messages=classifier_messages(t, objective),
            max_tokens=MAX_TOKENS,
        )
    except MeterRefused as refused:
        return ClassifierAnswer.abstain("capped" if refused.kind == CLASSIFIER_CALLS_DAY else "budget")
    except ModelError:
        return ClassifierAnswer.abstain("failed")
    return parse_classifier("".join(b.get("text", "") for b in reply.content if b.get("type") == "text"))
