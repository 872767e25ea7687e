"""A webhook delivery from a forge (issue 28), the pure part: which linked project's secret signed it
(every candidate checked, in constant time each), which events are kept for the forge loop, and the few
fields of a payload the loop reads. Nothing here parses a body whose signature has not been verified."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from controlplane.domain.forge import verify_signature

MAX_WEBHOOK_BYTES = 1024 * 1024
"""The largest delivery body read (GitHub caps payloads at 25 MB, but none the loop uses comes near 1 MiB)."""
MAX_DELIVERY_ID = 100
"""X-GitHub-Delivery is a UUID (36 characters); anything longer is not GitHub's."""
KEPT_EVENTS = frozenset(
    {
        "issues",
        "issue_comment",
        "check_suite",
        "check_run",
        "status",
        "pull_request",
        "pull_request_review",
        "pull_request_review_comment",
    }
)
"""The events the forge loop starts or feeds Changes from; every other event is answered 204 and dropped."""


def choose_project(secrets: Sequence[tuple[str, bytes]], body: bytes, header: str) -> str | None:
    """The project (name, webhook secret) whose secret signs `body` as `header` says; None when none does
    or the header is missing. Every candidate is checked (no early exit), each in constant time; a
    project without a secret (b"") verifies nothing."""
    chosen = None
    for name, secret in secrets:
        if verify_signature(secret, body, header) and chosen is None:
            chosen = name
    return chosen


@dataclasses.dataclass(frozen=True)
class DeliveryFields:
    """What the forge loop reads of a delivery, so that it needs neither the body nor the forge to decide."""

    action: str = ""
    number: int = 0
    """The issue's or pull request's number (0: none, e.g. a check suite not on a pull request)."""
    label: str = ""
    sender: str = ""
    head_sha: str = ""
    conclusion: str = ""
    """A check's conclusion, a commit status's or a review's state."""
    comment_id: int = 0


def _get(payload: Any, *path: str) -> Any:
    for key in path:
        payload = payload.get(key) if isinstance(payload, dict) else None
    return payload


def _text(value: Any, limit: int = 200) -> str:
    return value[:limit] if isinstance(value, str) else ""


def _number(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**62 else 0


def _first_pull(check: Any) -> int:
    pulls = _get(check, "pull_requests")
    return _number(_get(pulls[0], "number")) if isinstance(pulls, list) and pulls else 0


def delivery_fields(event: str, payload: dict[str, Any]) -> DeliveryFields:
    """The fields of a kept event's payload; a field the payload lacks or gives a wrong type is empty."""
    number = _number(_get(payload, "issue", "number") or _get(payload, "pull_request", "number"))
    head_sha = _text(_get(payload, "pull_request", "head", "sha"), 64)
    conclusion = ""
    comment_id = _number(_get(payload, "comment", "id"))
    if event in ("check_suite", "check_run"):
        check = _get(payload, event)
        head_sha, conclusion, number = (
            _text(_get(check, "head_sha"), 64),
            _text(_get(check, "conclusion"), 40),
            _first_pull(check),
        )
    elif event == "status":
        head_sha, conclusion = _text(_get(payload, "sha"), 64), _text(_get(payload, "state"), 40)
    elif event == "pull_request_review":
        conclusion, comment_id = _text(_get(payload, "review", "state"), 40), _number(_get(payload, "review", "id"))
    return DeliveryFields(
        action=_text(_get(payload, "action"), 40),
        number=number,
        label=_text(_get(payload, "label", "name"), 100),
        sender=_text(_get(payload, "sender", "login"), 200),
        head_sha=head_sha,
        conclusion=conclusion,
        comment_id=comment_id,
    )
