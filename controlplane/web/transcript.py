"""A run's output as transcript entries for the console: plain lines of stdout, stderr and system notes,
and the harness's events (stream "event", one JSON object per line: text, tool_use, tool_result, user,
result, question) each with its kind, a readable text, and whether it reports a failure (a tool's error,
a result other than completed). stderr is no failure: many tools (unittest, pytest) report there."""

from __future__ import annotations

import json
from typing import Any

from drover.models import LogLine

MAX_TEXT = 4000  # characters of one entry shown; the whole output stays in `drover logs`


def entries(line: LogLine) -> list[dict[str, Any]]:
    """The entries of one output message: one per line of text, or per harness event."""
    if line.stream != "event":
        text = line.text.rstrip("\n")
        entry = {"seq": line.seq, "stream": line.stream, "kind": line.stream, "text": _cut(text), "failed": False}
        return [entry] if text else []
    return [_event(line.seq, raw) for raw in line.text.splitlines() if raw.strip()]


def _event(seq: int, raw: str) -> dict[str, Any]:
    try:
        event = json.loads(raw)
    except ValueError:
        return {"seq": seq, "stream": "event", "kind": "event", "text": _cut(raw), "failed": False}
    if not isinstance(event, dict):
        return {"seq": seq, "stream": "event", "kind": "event", "text": _cut(raw), "failed": False}
    kind = str(event.get("kind", "event"))
    if kind == "tool_use":
        text = f"{event.get('tool', '')} {json.dumps(event.get('input', {}), ensure_ascii=False, indent=1)}"
    elif kind == "tool_result":
        text = f"{event.get('tool', '')}{' (error)' if event.get('error') else ''}: {event.get('text', '')}"
    elif kind == "result":
        text = f"{event.get('outcome', '')}: {event.get('text', '')}"
    elif kind == "question":
        text = f"asks: {event.get('text', '')}"
    else:
        text = str(event.get("text", "") or json.dumps(event, ensure_ascii=False))
    failed = (
        bool(event.get("error")) if kind == "tool_result" else kind == "result" and event.get("outcome") != "completed"
    )
    return {"seq": seq, "stream": "event", "kind": kind, "text": _cut(text.strip()), "failed": failed}


def _cut(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + f"\n... ({len(text) - MAX_TEXT} more characters)"
