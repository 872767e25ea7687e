"""The Messages API's JSON and server-sent-event shapes the fake Anthropic server sends: a whole message,
an error body, and a content block as start, deltas (several per block, so clients must reassemble
them) and stop."""

from __future__ import annotations

import json
import uuid
from typing import Any

from drover.testing.script import Error, Reply


def seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def error_body(err: Error) -> dict[str, Any]:
    return {"type": "error", "error": {"type": err.type, "message": err.message}}


def message(reply: Reply, model: str) -> dict[str, Any]:
    return {
        "id": f"msg_fake_{uuid.uuid4().hex[:16]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [dict(b) for b in reply.content],
        "stop_reason": reply.stop_reason,
        "stop_sequence": None,
        "usage": dict(reply.usage),
    }


def pieces(s: str, n: int = 3) -> list[str]:
    # Several deltas per block so clients must reassemble them.
    size = max(1, -(-len(s) // n))
    return [s[i : i + size] for i in range(0, len(s), size)] or [""]


def block_events(index: int, block: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    start: dict[str, Any]
    if block["type"] == "text":
        start = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": p} for p in pieces(block["text"])]
    else:
        start = {**block, "input": {}}
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in pieces(json.dumps(block["input"]))]
    return [
        ("content_block_start", {"type": "content_block_start", "index": index, "content_block": start}),
        *(("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d}) for d in deltas),
        ("content_block_stop", {"type": "content_block_stop", "index": index}),
    ]
