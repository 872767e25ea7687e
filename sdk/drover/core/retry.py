"""Whether and when to repeat a failed model call (seed 002), as pure functions over plain data.

Transport errors, 408, 409, 429 rate limits, 5xx and 529 overloads are worth
another attempt; quota and billing failures stop the run as spend_limited;
everything else the provider rejected (authentication, permission, invalid
request, context limit, too large) is never repeated as it was: a context-limit
rejection (`is_context_limit`) is the harness's cue to fold once and ask again.
"""

from __future__ import annotations

import dataclasses

RETRY = "retry"
SPEND_LIMITED = "spend_limited"
PERMANENT = "permanent"

# Error types that mean "try again later" even without an HTTP status, as in an
# SSE `error` event that arrives after the response started with 200.
_TRANSIENT_TYPES = frozenset({"rate_limit_error", "overloaded_error", "api_error", "timeout_error"})
_SPEND_TYPES = frozenset({"billing_error"})
# How Anthropic words a request over the context window: "prompt is too long: 208310 tokens > 200000 maximum",
# or "input length and `max_tokens` exceed context limit: ...".
_CONTEXT_LIMIT_WORDS = ("prompt is too long", "exceed context limit", "exceeds the context window")


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """How hard the harness tries one model call."""

    max_attempts: int = 4
    """Attempts per call, the first included."""
    stall_timeout: float = 120.0
    """Seconds without a stream event after which an attempt is cancelled and retried."""
    attempt_ceiling: float = 600.0
    """Seconds one attempt may take in all, however steadily it streams; over it, it is cancelled and
    retried like a stall (ten minutes)."""
    max_retry_after: float = 60.0
    """A provider's Retry-After is honoured up to this many seconds."""
    base_delay: float = 1.0
    """Backoff before the second attempt; it doubles for each attempt after."""
    max_delay: float = 30.0
    """Cap on the exponential backoff when the provider gives no Retry-After."""


DEFAULT_POLICY = RetryPolicy()


def classify(status: int | None, error_type: str, transport: bool) -> str:
    """ "retry", "spend_limited" or "permanent" for one failed attempt.

    `status` is the HTTP status (None when the failure came inside a 200
    stream or never reached a response), `error_type` is the API's
    `error.type` ("" when unknown), `transport` says the connection failed,
    stalled or ended early.
    """
    if error_type in _SPEND_TYPES or status == 402:
        return SPEND_LIMITED
    if status == 429:
        # A 429 without a type is still HTTP's "too many requests".
        return RETRY if error_type in ("rate_limit_error", "") else SPEND_LIMITED
    if transport or status in (408, 409) or (status is not None and status >= 500):
        return RETRY
    if status is None and error_type in _TRANSIENT_TYPES:
        return RETRY
    return PERMANENT


def is_context_limit(status: int | None, error_type: str, message: str) -> bool:
    """Whether a rejection says the request does not fit the model's context window (a 400
    invalid_request_error whose message says the prompt is too long)."""
    lowered = message.lower()
    return (
        status == 400
        and error_type == "invalid_request_error"
        and any(words in lowered for words in _CONTEXT_LIMIT_WORDS)
    )


def retry_delay(attempt: int, retry_after: float | None, policy: RetryPolicy = DEFAULT_POLICY) -> float:
    """Seconds to wait after failed attempt number `attempt` (1-based).

    The provider's Retry-After wins when given, capped at
    `policy.max_retry_after`; otherwise base_delay doubling per attempt, capped
    at `policy.max_delay`.
    """
    if retry_after is not None:
        return min(max(retry_after, 0.0), policy.max_retry_after)
    return min(policy.base_delay * 2 ** max(attempt - 1, 0), policy.max_delay)
