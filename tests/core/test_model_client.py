"""The harness model client: the real `anthropic` client against the scripted fake, retried per seed 002."""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anthropic
import pytest

from drover.core.model import (
    AnthropicModel,
    ModelError,
    ModelReply,
    PermanentModelError,
    SpendLimited,
    TransientModelError,
)
from drover.core.retry import RetryPolicy, classify, retry_delay
from drover.core.usage import Usage
from drover.testing.fake_anthropic import FakeAnthropic, error, stall, text, tool_uses

pytestmark = pytest.mark.timeout(30)
SYSTEM = [{"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}]
TOOLS = [
    {
        "name": "read_file",
        "description": "Read a file.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
]
MESSAGES = [{"role": "user", "content": "Fix the bug."}]


# --- retry.py: the decisions, as tables -------------------------------------------------------


@pytest.mark.parametrize(
    "status, error_type, transport, verdict",
    [
        (None, "", True, "retry"),  # connection refused, reset, stalled stream
        (408, "", False, "retry"),
        (409, "", False, "retry"),
        (429, "rate_limit_error", False, "retry"),
        (429, "", False, "retry"),  # a bare 429 is still "too many requests"
        (500, "api_error", False, "retry"),
        (502, "", False, "retry"),
        (503, "", False, "retry"),
        (529, "overloaded_error", False, "retry"),
        (None, "overloaded_error", False, "retry"),  # error event inside a 200 stream
        (None, "api_error", False, "retry"),
        (None, "rate_limit_error", False, "retry"),
        (402, "billing_error", False, "spend_limited"),
        (402, "", False, "spend_limited"),
        (400, "billing_error", False, "spend_limited"),
        (429, "quota_exceeded", False, "spend_limited"),  # a 429 that is not a rate limit
        (429, "billing_error", False, "spend_limited"),
        (400, "invalid_request_error", False, "permanent"),  # includes "prompt is too long" (context limit)
        (401, "authentication_error", False, "permanent"),
        (403, "permission_error", False, "permanent"),
        (404, "not_found_error", False, "permanent"),
        (413, "request_too_large", False, "permanent"),
        (422, "", False, "permanent"),
        (None, "invalid_request_error", False, "permanent"),
        (None, "", False, "permanent"),  # nothing known: never repeat blindly
    ],
)
def test_classify(status: int | None, error_type: str, transport: bool, verdict: str) -> None:
    assert classify(status, error_type, transport) == verdict


@pytest.mark.parametrize(
    "attempt, retry_after, delay",
    [
        (1, None, 1.0),
        (2, None, 2.0),
        (3, None, 4.0),
        (5, None, 16.0),
        (6, None, 30.0),
        (20, None, 30.0),
        (1, 7.0, 7.0),
        (3, 0.5, 0.5),
        (1, 60.0, 60.0),
        (1, 61.0, 60.0),
        (2, 3600.0, 60.0),
        (1, -5.0, 0.0),
    ],
)
def test_retry_delay(attempt: int, retry_after: float | None, delay: float) -> None:
    assert retry_delay(attempt, retry_after) == delay


def test_retry_delay_follows_the_policy() -> None:
    policy = RetryPolicy(base_delay=0.25, max_delay=1.0, max_retry_after=5.0)
    assert [retry_delay(n, None, policy) for n in (1, 2, 3, 4)] == [0.25, 0.5, 1.0, 1.0]
    assert retry_delay(1, 9.0, policy) == 5.0


def test_the_default_policy() -> None:
    assert RetryPolicy() == RetryPolicy(
        max_attempts=4, stall_timeout=120.0, max_retry_after=60.0, base_delay=1.0, max_delay=30.0
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        RetryPolicy().max_attempts = 9  # type: ignore[misc]


# --- model.py against the fake ----------------------------------------------------------------


@dataclasses.dataclass
class Harness:
    """What a test sees of one AnthropicModel: the fake behind it, its sleeps and its attempts."""

    fake: FakeAnthropic
    model: AnthropicModel
    sleeps: list[float]
    attempts: list[tuple[int, Usage | None, ModelError | None]]

    async def complete(self, **overrides: Any) -> ModelReply:
        kwargs: dict[str, Any] = {"system": SYSTEM, "tools": TOOLS, "messages": MESSAGES, "max_tokens": 1024}
        return await self.model.complete(**{**kwargs, **overrides})


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic(api_key="sk-run") as server:
        yield server


async def make_harness(
    fake: FakeAnthropic, base_url: str | None = None, api_key: str = "sk-run", **policy: Any
) -> Harness:
    sleeps: list[float] = []
    attempts: list[tuple[int, Usage | None, ModelError | None]] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    async def on_attempt(number: int, usage: Usage | None, err: ModelError | None) -> None:
        attempts.append((number, usage, err))

    model = AnthropicModel(
        base_url or fake.base_url, api_key, "claude-test", RetryPolicy(**policy), sleep=sleep, on_attempt=on_attempt
    )
    return Harness(fake, model, sleeps, attempts)


@pytest.fixture
async def h(fake: FakeAnthropic) -> AsyncIterator[Harness]:
    harness = await make_harness(fake)
    yield harness
    await harness.model.close()


async def test_a_text_reply_with_cache_usage(h: Harness) -> None:
    usage = {
        "input_tokens": 12,
        "output_tokens": 34,
        "cache_creation_input_tokens": 560,
        "cache_read_input_tokens": 7800,
    }
    h.fake.add(text("All done.", usage=usage))
    reply = await h.complete(thinking={"type": "enabled", "budget_tokens": 512})
    assert reply == ModelReply([{"type": "text", "text": "All done."}], "end_turn", Usage(12, 34, 560, 7800), 1)
    assert h.attempts == [(1, Usage(12, 34, 560, 7800), None)]
    body = h.fake.requests[0].body
    assert body["stream"] is True and body["model"] == "claude-test" and body["max_tokens"] == 1024
    assert (body["system"], body["tools"], body["messages"]) == (SYSTEM, TOOLS, MESSAGES)
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 512}
    assert h.fake.requests[0].headers["authorization"] == "Bearer sk-run"


async def test_tool_uses_come_back_as_api_shaped_dicts(h: Harness) -> None:
    big = {"path": "src/" + "deep/" * 40 + "x.py", "lines": [1, 2, 3]}
    h.fake.add(tool_uses([("read_file", big, "toolu_a"), ("list_files", {}, "toolu_b")], text="Reading."))
    reply = await h.complete()
    assert reply.stop_reason == "tool_use"
    assert reply.content == [
        {"type": "text", "text": "Reading."},
        {"type": "tool_use", "id": "toolu_a", "name": "read_file", "input": big},
        {"type": "tool_use", "id": "toolu_b", "name": "list_files", "input": {}},
    ]
    assert "thinking" not in h.fake.requests[0].body


async def test_a_429_waits_the_retry_after_then_succeeds(h: Harness) -> None:
    h.fake.extend([error(429, "rate_limit_error", "slow down", retry_after=7), text("ok")])
    reply = await h.complete()
    assert reply.attempts == 2 and len(h.fake.requests) == 2
    assert h.sleeps == [7.0]
    (n1, usage1, err1), (n2, usage2, err2) = h.attempts
    assert (n1, usage1, n2, usage2, err2) == (1, None, 2, Usage(100, 20, 0, 0), None)
    assert isinstance(err1, TransientModelError) and err1.status == 429 and err1.retry_after == 7.0
    assert err1.outcome == "rate_limited"


async def test_a_retry_after_beyond_a_minute_is_capped(h: Harness) -> None:
    h.fake.extend([error(429, "rate_limit_error", "later", retry_after=3600), text("ok")])
    await h.complete()
    assert h.sleeps == [60.0]


@pytest.mark.parametrize("status, type_", [(529, "overloaded_error"), (500, "api_error"), (503, "api_error")])
async def test_overloads_and_server_errors_are_retried_with_backoff(h: Harness, status: int, type_: str) -> None:
    h.fake.extend([error(status, type_, "try again"), error(status, type_, "try again"), text("ok")])
    reply = await h.complete()
    assert reply.attempts == 3 and h.sleeps == [1.0, 2.0]
    assert [type(err) for _, _, err in h.attempts] == [TransientModelError, TransientModelError, type(None)]


async def test_an_error_event_inside_the_stream_is_retried(h: Harness) -> None:
    h.fake.extend([error(529, "overloaded_error", "busy", in_stream=True), text("ok")])
    reply = await h.complete()
    assert reply.attempts == 2
    _, usage, err = h.attempts[0]
    assert usage == Usage(100, 1, 0, 0)  # message_start had arrived: its input tokens are billed
    assert isinstance(err, TransientModelError) and err.status is None and err.error_type == "overloaded_error"
    assert err.outcome == "transient"


@pytest.mark.parametrize(
    "status, type_, exc, outcome",
    [
        (400, "invalid_request_error", PermanentModelError, "failed"),
        (404, "not_found_error", PermanentModelError, "failed"),
        (401, "authentication_error", PermanentModelError, "failed"),
        (403, "permission_error", PermanentModelError, "failed"),
        (413, "request_too_large", PermanentModelError, "failed"),
        (402, "billing_error", SpendLimited, "spend_limited"),
        (429, "quota_exceeded_error", SpendLimited, "spend_limited"),
    ],
)
async def test_permanent_and_spend_errors_are_tried_exactly_once(
    h: Harness, status: int, type_: str, exc: type[ModelError], outcome: str
) -> None:
    h.fake.extend([error(status, type_, "no"), text("never reached")])
    with pytest.raises(exc) as caught:
        await h.complete()
    assert type(caught.value) is exc and caught.value.outcome == outcome
    assert (caught.value.status, caught.value.error_type, caught.value.attempts) == (status, type_, 1)
    assert len(h.fake.requests) == 1 and h.fake.pending == 1
    assert h.sleeps == [] and h.attempts == [(1, None, caught.value)]


async def test_a_wrong_key_is_a_permanent_failure(fake: FakeAnthropic) -> None:
    fake.add(text("never reached"))
    harness = await make_harness(fake, api_key="sk-stolen")
    try:
        with pytest.raises(PermanentModelError, match="authentication_error") as caught:
            await harness.complete()
    finally:
        await harness.model.close()
    assert caught.value.status == 401 and caught.value.outcome == "failed"
    assert len(fake.requests) == 1 and fake.pending == 1


async def test_a_stalled_stream_is_cancelled_and_retried(fake: FakeAnthropic) -> None:
    fake.extend([stall(20), text("after the stall")])
    harness = await make_harness(fake, stall_timeout=0.5)
    try:
        reply = await harness.complete()
    finally:
        await harness.model.close()
    assert reply.content == [{"type": "text", "text": "after the stall"}] and reply.attempts == 2
    _, usage, err = harness.attempts[0]
    assert usage == Usage(100, 1, 0, 0)
    assert isinstance(err, TransientModelError) and "no stream event for 0.5 s" in str(err)
    assert harness.sleeps == [1.0]


async def test_repeated_server_errors_exhaust_the_attempts(h: Harness) -> None:
    h.fake.extend([error(500, "api_error", "boom")] * 4 + [text("never reached")])
    with pytest.raises(TransientModelError) as caught:
        await h.complete()
    assert caught.value.outcome == "transient" and caught.value.attempts == 4
    assert len(h.fake.requests) == 4 and h.sleeps == [1.0, 2.0, 4.0]
    assert [n for n, _, _ in h.attempts] == [1, 2, 3, 4]
    assert h.attempts[-1][2] is caught.value
    assert all(isinstance(err.__cause__, anthropic.InternalServerError) for _, _, err in h.attempts)


async def test_repeated_rate_limits_end_rate_limited(h: Harness) -> None:
    h.fake.extend([error(429, "rate_limit_error", "slow", retry_after=2)] * 4)
    with pytest.raises(TransientModelError) as caught:
        await h.complete()
    assert caught.value.outcome == "rate_limited" and caught.value.status == 429
    assert len(h.fake.requests) == 4 and h.sleeps == [2.0, 2.0, 2.0]


async def test_transport_errors_are_retried(fake: FakeAnthropic) -> None:
    with socket.socket() as s:  # a port with nobody listening
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    harness = await make_harness(fake, base_url=dead, max_attempts=2)
    try:
        with pytest.raises(TransientModelError) as caught:
            await harness.complete()
    finally:
        await harness.model.close()
    assert caught.value.outcome == "transient" and caught.value.status is None and caught.value.attempts == 2
    assert harness.sleeps == [1.0] and [u for _, u, _ in harness.attempts] == [None, None]


async def test_a_stream_cut_mid_message_is_retried(fake: FakeAnthropic) -> None:
    # A short stall drops the connection after message_start: an incomplete chunked body.
    fake.extend([stall(0.1), text("whole")])
    harness = await make_harness(fake)
    try:
        reply = await harness.complete()
    finally:
        await harness.model.close()
    assert reply.attempts == 2 and isinstance(harness.attempts[0][2], TransientModelError)
