"""A Messages API request as the model gateway takes it: checked strictly, then rewritten to the
routed model and the tier's output cap. Pure."""

from __future__ import annotations

from typing import Any

MESSAGES = "/v1/messages"
COUNT_TOKENS = "/v1/messages/count_tokens"
MAX_TOKENS = 1_000_000
"""The largest max_tokens accepted (the control plane's bound on a reservation's output); far
above any model's output limit, and the tier's cap applies below it."""


def body_problem(body: Any, path: str) -> str:
    """Why a request body cannot be forwarded ("" when it can), naming the field. Pure."""
    if not isinstance(body, dict):
        return "body: must be a JSON object"
    if not isinstance(body.get("messages"), list):
        return "messages: must be a list"
    if path == COUNT_TOKENS:
        return ""
    asked = body.get("max_tokens")
    if asked is None:
        return "max_tokens: required"
    if not isinstance(asked, int) or isinstance(asked, bool):
        return "max_tokens: must be an integer"
    if not 1 <= asked <= MAX_TOKENS:
        return f"max_tokens: must be between 1 and {MAX_TOKENS}"
    return ""


def rewrite(body: dict[str, Any], model: str, max_output_tokens: int) -> dict[str, Any]:
    """The request as Drover sends it on: the routed model, max_tokens within the tier's cap, and a
    thinking budget that still fits under it (the API refuses budget_tokens >= max_tokens)."""
    out = dict(body, model=model)
    asked = body.get("max_tokens")
    cap = max_output_tokens if max_output_tokens > 0 else asked
    if isinstance(asked, int) and not isinstance(asked, bool) and asked > 0:
        out["max_tokens"] = min(asked, cap) if isinstance(cap, int) else asked
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and isinstance(thinking.get("budget_tokens"), int):
        limit = int(out.get("max_tokens") or 0) - 1
        if limit < 1024:  # the API's smallest thinking budget
            out.pop("thinking")
        elif thinking["budget_tokens"] > limit:
            out["thinking"] = {**thinking, "budget_tokens": limit}
    return out
