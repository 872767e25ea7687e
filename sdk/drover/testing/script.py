"""The steps of a fake Messages API script (drover.testing.fake_anthropic): a reply (text, tool uses,
usage), an error (status, type, Retry-After, at the start or in the middle of a stream), a stall, or the
routing classifier's answer."""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
from collections.abc import Callable, Iterable
from typing import Any

DEFAULT_USAGE = {
    "input_tokens": 100,
    "output_tokens": 20,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 0,
}


@dataclasses.dataclass(frozen=True)
class Reply:
    """One assistant message. `content` holds API content blocks (text and tool_use)."""

    content: tuple[dict[str, Any], ...]
    usage: dict[str, int]

    @property
    def stop_reason(self) -> str:
        return "tool_use" if any(b["type"] == "tool_use" for b in self.content) else "end_turn"


@dataclasses.dataclass(frozen=True)
class Error:
    """An API error. `in_stream` sends it as an SSE `error` event after message_start."""

    status: int
    type: str
    message: str
    retry_after: float | None = None
    in_stream: bool = False


@dataclasses.dataclass(frozen=True)
class Stall:
    """Accept the request, then say nothing for `seconds` and drop the connection.

    Streaming requests get the headers and message_start first, and `partial` (if any) as the start of a
    text block: an answer broken off mid-way.
    """

    seconds: float
    partial: str = ""


@dataclasses.dataclass(frozen=True)
class Trickle:
    """A streamed text reply that never stalls but takes long: one piece of `text` every `every` seconds
    (`pieces` of them), then the end of the message."""

    text: str
    every: float
    pieces: int = 10


Step = Reply | Error | Stall | Trickle

_tool_ids = itertools.count(1)


def _usage(usage: dict[str, int] | None) -> dict[str, int]:
    return {**DEFAULT_USAGE, **(usage or {})}


def text(text: str, usage: dict[str, int] | None = None) -> Reply:
    """A plain text reply (stop_reason end_turn)."""
    return Reply(({"type": "text", "text": text},), _usage(usage))


def tool_uses(
    uses: Iterable[tuple[str, dict[str, Any]] | list[Any]], text: str | None = None, usage: dict[str, int] | None = None
) -> Reply:
    """A reply with optional text, then one tool_use block per (name, input)."""
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    for use in uses:
        name, input_, *rest = use
        tool_id = rest[0] if rest and rest[0] else f"toolu_fake_{next(_tool_ids):04d}"
        blocks.append({"type": "tool_use", "id": tool_id, "name": name, "input": input_})
    return Reply(tuple(blocks), _usage(usage))


def tool_use(
    name: str,
    input: dict[str, Any],
    id: str | None = None,
    text: str | None = None,
    usage: dict[str, int] | None = None,
) -> Reply:
    """A reply with optional text and one tool_use block (stop_reason tool_use)."""
    return tool_uses([(name, input, id)], text=text, usage=usage)  # type: ignore[list-item]


def error(
    status: int,
    type: str,
    message: str = "",
    retry_after: float | None = None,
    in_stream: bool = False,
) -> Error:
    """An error response in Anthropic's shape, e.g. error(529, "overloaded_error", "Overloaded")."""
    return Error(status, type, message or type, retry_after, in_stream)


def context_limit(tokens: int = 208_310, maximum: int = 200_000) -> Error:
    """The provider's rejection of a request over the model's context window, worded as Anthropic does."""
    return error(400, "invalid_request_error", f"prompt is too long: {tokens} tokens > {maximum} maximum")


def stall(seconds: float, partial: str = "") -> Stall:
    """Hold the request silently for `seconds` (after `partial`, streamed as the start of a text block)."""
    return Stall(seconds, partial)


def trickle(text: str, every: float, pieces: int = 10) -> Trickle:
    """Stream `text` slowly: `pieces` pieces, one every `every` seconds."""
    return Trickle(text, every, pieces)


def classification(tier: str = "sonnet", confidence: float = 0.9, usage: dict[str, int] | None = None) -> Reply:
    """The routing classifier's answer, as the real model writes it: {"tier": ..., "confidence": ...}."""
    return text(json.dumps({"tier": tier, "confidence": confidence}), usage=usage)


_TIER_KEY = re.compile(r'"tier"\s*:')


def is_classification(step: Step) -> bool:
    """Whether `step` answers the routing classifier: a text-only reply naming a "tier" in JSON."""
    return (
        isinstance(step, Reply)
        and all(b["type"] == "text" for b in step.content)
        and any(_TIER_KEY.search(b["text"]) for b in step.content)
    )


CLASSIFIER_MARKER = '"tier": "haiku|sonnet|opus"'
"""How the fake knows the routing classifier's request: its system prompt asks for this JSON, and it
offers no tools (`controlplane.domain.tiers.CLASSIFIER_SYSTEM`; a test there keeps the two in step)."""
DEFAULT_CLASSIFICATION = classification("sonnet", 0.9)
"""The fake's own answer to a classifier request when the script has no classifier reply next."""


def is_classifier_request(body: Any) -> bool:
    """Whether a request body is the control plane's routing classifier call."""
    if not isinstance(body, dict) or body.get("tools"):
        return False
    system = body.get("system")
    blocks = [{"text": system}] if isinstance(system, str) else system if isinstance(system, list) else []
    return any(isinstance(b, dict) and CLASSIFIER_MARKER in str(b.get("text", "")) for b in blocks)


_CONSTRUCTORS: dict[str, Callable[..., Step]] = {
    "text": text,
    "tool_use": tool_use,
    "tool_uses": tool_uses,
    "error": error,
    "stall": stall,
    "context_limit": context_limit,
    "trickle": trickle,
    "classification": classification,
}


def step_from_json(item: dict[str, Any]) -> Step:
    """One step of a script file: {"step": constructor name, **its keyword arguments}."""
    kwargs = dict(item)
    name = kwargs.pop("step", None)
    if name not in _CONSTRUCTORS:
        raise ValueError(f"unknown step {name!r}; expected one of {sorted(_CONSTRUCTORS)}")
    return _CONSTRUCTORS[name](**kwargs)
