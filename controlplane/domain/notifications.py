"""Notifications out (issue 28), the pure part: which stored events become which notification, the payload
and Slack text a target receives, the signature headers, how long to wait before the next attempt, and
how far the outbox's cursor over the events may move. Nothing here reads a secret or sends anything.

A payload holds ids, names, a status and a short reason: never a secret, a prompt, a question's text
or a run's output."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Iterable, Mapping
from typing import Any

from controlplane.domain.forge import signature

EVENTS = ("change.finished", "question.asked", "budget.stopped", "run.failed", "round.started")
"""The notification events a `[[notify]]` target may ask for."""
FORMATS = ("json", "slack")
"""json: the payload itself; slack: `{"text": ...}`, what a Slack incoming webhook (and Mattermost,
Discord's /slack endpoint) takes."""
SOURCE_KINDS = ("change.finished", "question.asked", "budget.stopped", "run.finished", "forge.round_started")
"""The stored event kinds some notification comes from (see `notification_event`)."""
MAX_ATTEMPTS = 10
"""Attempts of one delivery (the first included) before it is given up as failed."""
FIRST_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 300.0
MAX_REASON = 500
"""Characters of a reason or an error kept in a payload or a delivery row."""
GAP_SECONDS = 30.0
"""How long the cursor waits at a missing event id: a transaction that took the id and has not committed
yet (PostgreSQL hands out ids before commit). Past this the id is taken to be rolled back."""
SIGNATURE_HEADER = "X-Drover-Signature-256"
DELIVERY_HEADER = "X-Drover-Delivery"
EVENT_HEADER = "X-Drover-Event"


@dataclasses.dataclass(frozen=True)
class Target:
    """One `[[notify]]` table: where notifications go, which, in what shape, and the HMAC key."""

    name: str
    url: str
    events: tuple[str, ...]
    format: str = "json"
    secret: bytes = dataclasses.field(default=b"", repr=False)
    """From secret_env or secret_file; never in the TOML, a log, an event or the database."""
    console_url: str = ""
    """The console's public address; "": payloads carry no link."""


@dataclasses.dataclass(frozen=True)
class StoredEvent:
    """What the outbox reads of one row of `events`, and the project of its Change."""

    id: int
    kind: str
    change_id: str
    task_id: str
    run_id: str
    project: str
    data: Mapping[str, Any]
    created_at: dt.datetime


def notification_event(kind: str, data: Mapping[str, Any]) -> str | None:
    """The notification a stored event of `kind` is, or None (most events are none)."""
    if kind == "run.finished":
        return "run.failed" if data.get("status") == "failed" else None
    if kind == "forge.round_started":
        return "round.started"
    return kind if kind in ("change.finished", "question.asked", "budget.stopped") else None


def _bounded(value: Any) -> str:
    text = str(value or "")
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 1] + "…"


def _reason(event: str, data: Mapping[str, Any]) -> str:
    if event == "change.finished":
        return str(data.get("limit") or data.get("reason") or "")
    if event == "budget.stopped":
        return ": ".join(str(v) for v in (data.get("limit"), data.get("reason")) if v)
    if event == "question.asked":
        return "a blocking question" if data.get("blocking") else "a question"
    return str(data.get("reason") or "")


def payload(event: str, stored: StoredEvent, console_url: str = "") -> dict[str, Any]:
    """What a target receives of `stored` as `event` (format json; slack renders it as text)."""
    data = stored.data
    out: dict[str, Any] = {
        "event": event,
        "change": stored.change_id,
        "project": stored.project,
        "task": stored.task_id,
        "run": stored.run_id,
        "status": str(data.get("status", "")),
        "reason": _bounded(_reason(event, data)),
        "time": stored.created_at.astimezone(dt.UTC).isoformat().replace("+00:00", "Z"),
    }
    if event == "question.asked":
        out["question"] = str(data.get("question_id", ""))
    if event == "round.started":
        out["round"] = int(data.get("round", 0) or 0)
        out["pull_request"] = int(data.get("pr_number", 0) or 0)
    if console_url and stored.change_id:
        out["console"] = f"{console_url.rstrip('/')}/changes/{stored.change_id}"
    return out


HEADLINES = {
    "change.finished": "Change {change} in {project} finished: {status}",
    "question.asked": "Change {change} in {project} asks {reason} (task {task})",
    "budget.stopped": "Change {change} in {project} stopped on a budget",
    "run.failed": "Run {run} of Change {change} in {project} failed",
    "round.started": "Change {change} in {project} started fix round {round}",
}


def slack_text(p: Mapping[str, Any]) -> str:
    """One line a person reads in a channel: what happened, why, and the console link."""
    text = "Drover: " + HEADLINES[p["event"]].format_map(
        {key: p.get(key, "") for key in ("change", "project", "status", "reason", "task", "run", "round")}
    )
    if p.get("reason") and p["event"] != "question.asked":
        text += f" ({p['reason']})"
    if p.get("console"):
        text += f" <{p['console']}|open in the console>"
    return text


def body(target_format: str, p: Mapping[str, Any]) -> bytes:
    """The bytes POSTed (and signed): canonical JSON, so every attempt of a delivery sends the same."""
    value: Mapping[str, Any] = {"text": slack_text(p)} if target_format == "slack" else p
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def headers(secret: bytes, delivery_id: str, event: str, sent: bytes) -> dict[str, str]:
    """The headers of an attempt: the body's HMAC-SHA256 with the target's secret, the delivery id (the
    same on every attempt: a receiver dedupes on it) and the event."""
    return {
        "Content-Type": "application/json",
        SIGNATURE_HEADER: signature(secret, sent),
        DELIVERY_HEADER: delivery_id,
        EVENT_HEADER: event,
    }


def backoff(attempts: int) -> float:
    """Seconds before the next attempt after `attempts` failed ones: 1, 2, 4 ... at most 300."""
    return float(min(FIRST_BACKOFF_SECONDS * 2 ** max(attempts - 1, 0), MAX_BACKOFF_SECONDS))


@dataclasses.dataclass(frozen=True)
class AttemptOutcome:
    state: str
    """delivered | pending (tried again after `retry_in`) | failed (given up)."""
    retry_in: float = 0.0
    error: str = ""


def after_attempt(attempts: int, status: int, error: str) -> AttemptOutcome:
    """What becomes of a delivery whose attempt number `attempts` got HTTP `status` (0: no answer, with
    `error`): any 2xx delivers it; anything else is tried again until MAX_ATTEMPTS."""
    if 200 <= status < 300:
        return AttemptOutcome("delivered")
    why = _bounded(error or f"HTTP {status}")
    if attempts >= MAX_ATTEMPTS:
        return AttemptOutcome("failed", error=why)
    return AttemptOutcome("pending", backoff(attempts), why)


def advance_cursor(cursor: int, rows: Iterable[tuple[int, dt.datetime]], now: dt.datetime) -> int:
    """How far the outbox may move its cursor over events `rows` (id, created_at; ids after `cursor`, in
    order): through every id that follows without a gap, and past a gap only once the event after it is
    GAP_SECONDS old, so an event committed late behind a higher id is still seen."""
    for event_id, created_at in rows:
        if event_id != cursor + 1 and (now - created_at).total_seconds() < GAP_SECONDS:
            break
        cursor = event_id
    return cursor
