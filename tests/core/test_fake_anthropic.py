"""The scripted fake Messages API, driven by the real `anthropic` client over loopback HTTP."""

from __future__ import annotations

import asyncio
import json
import pathlib
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from controlplane.domain.tiers import CLASSIFIER_SYSTEM, TaskTraits, classifier_messages
from drover.testing.fake_anthropic import (
    FakeAnthropic,
    Reply,
    Stall,
    classification,
    context_limit,
    error,
    stall,
    step_from_json,
    text,
    tool_use,
    tool_uses,
)

pytestmark = pytest.mark.timeout(30)
MESSAGES = [{"role": "user", "content": "hello"}]


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as server:
        yield server


def client(fake: FakeAnthropic, api_key: str = "sk-test") -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=fake.base_url, api_key=api_key, max_retries=0)


def post(fake: FakeAnthropic, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, dict[str, str], Any]:
    """A raw POST /v1/messages, for what the SDK would hide (headers, other auth styles)."""
    request = urllib.request.Request(
        f"{fake.base_url}/v1/messages",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", **headers},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, dict(response.headers), json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), json.loads(err.read())


async def test_text_reply_without_streaming_carries_usage_with_cache_fields(fake: FakeAnthropic) -> None:
    fake.add(
        text("hi there", usage={"input_tokens": 7, "cache_read_input_tokens": 50, "cache_creation_input_tokens": 9})
    )
    async with client(fake) as c:
        message = await c.messages.create(model="claude-x", max_tokens=64, messages=MESSAGES)
    assert [(b.type, b.text) for b in message.content] == [("text", "hi there")]
    assert message.stop_reason == "end_turn"
    assert message.model == "claude-x"
    assert (
        message.usage.input_tokens,
        message.usage.output_tokens,
        message.usage.cache_creation_input_tokens,
        message.usage.cache_read_input_tokens,
    ) == (7, 20, 9, 50)


async def test_streamed_tool_uses_reassemble_their_input(fake: FakeAnthropic) -> None:
    big = {"path": "src/a.py", "lines": list(range(30)), "nested": {"x": 'é"quoted"'}}
    fake.add(tool_uses([("read_file", big), ("list_files", {})], text="Looking."))
    async with client(fake) as c:
        async with c.messages.stream(model="m", max_tokens=64, messages=MESSAGES) as stream:
            kinds = [event.type async for event in stream]
            message = await stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert kinds.count("input_json") >= 2  # the input arrived in pieces
    assert message.stop_reason == "tool_use"
    assert message.content[0].type == "text" and message.content[0].text == "Looking."
    uses = [(b.name, b.input) for b in message.content if b.type == "tool_use"]
    assert uses == [("read_file", big), ("list_files", {})]
    ids = [b.id for b in message.content if b.type == "tool_use"]
    assert len(set(ids)) == 2 and all(i.startswith("toolu_") for i in ids)
    assert message.usage.input_tokens == 100 and message.usage.output_tokens == 20


async def test_tool_use_takes_an_explicit_id(fake: FakeAnthropic) -> None:
    fake.add(tool_use("write_file", {"path": "b"}, id="toolu_mine"))
    async with client(fake) as c:
        message = await c.messages.create(model="m", max_tokens=64, messages=MESSAGES)
    assert [(b.id, b.name, b.input) for b in message.content] == [("toolu_mine", "write_file", {"path": "b"})]
    assert message.stop_reason == "tool_use"


@pytest.mark.parametrize(
    "status, type_, exc",
    [
        (429, "rate_limit_error", anthropic.RateLimitError),
        (529, "overloaded_error", anthropic.OverloadedError),
        (500, "api_error", anthropic.InternalServerError),
        (400, "invalid_request_error", anthropic.BadRequestError),
        (401, "authentication_error", anthropic.AuthenticationError),
        (402, "billing_error", anthropic.PaymentRequiredError),
        (413, "request_too_large", anthropic.ContentTooLargeError),
    ],
)
async def test_errors_reach_the_sdk_as_its_typed_exceptions(
    fake: FakeAnthropic, status: int, type_: str, exc: type[anthropic.APIStatusError]
) -> None:
    fake.add(error(status, type_, "scripted", retry_after=3 if status == 429 else None))
    async with client(fake) as c:
        with pytest.raises(exc) as caught:
            async with c.messages.stream(model="m", max_tokens=64, messages=MESSAGES) as stream:
                await stream.get_final_message()
    assert caught.value.status_code == status
    assert caught.value.body == {"type": "error", "error": {"type": type_, "message": "scripted"}}
    assert caught.value.response.headers.get("retry-after") == ("3" if status == 429 else None)


async def test_a_context_limit_reaches_the_sdk_as_the_providers_bad_request(fake: FakeAnthropic) -> None:
    fake.add(context_limit(tokens=201_000))
    async with client(fake) as c:
        with pytest.raises(anthropic.BadRequestError) as caught:
            async with c.messages.stream(model="m", max_tokens=64, messages=MESSAGES) as stream:
                await stream.get_final_message()
    assert caught.value.status_code == 400
    message = "prompt is too long: 201000 tokens > 200000 maximum"
    assert caught.value.body == {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    assert step_from_json({"step": "context_limit", "tokens": 201_000}) == context_limit(tokens=201_000)


async def test_an_error_inside_the_stream_follows_message_start(fake: FakeAnthropic) -> None:
    fake.add(error(529, "overloaded_error", "busy", in_stream=True))
    seen = []
    async with client(fake) as c:
        with pytest.raises(anthropic.APIStatusError) as caught:
            async with c.messages.stream(model="m", max_tokens=64, messages=MESSAGES) as stream:
                async for event in stream:
                    seen.append(event.type)
    assert seen == ["message_start"]
    assert caught.value.status_code == 200 and caught.value.type == "overloaded_error"


async def test_a_streaming_stall_sends_message_start_then_nothing(fake: FakeAnthropic) -> None:
    fake.add(stall(10))
    seen = []
    async with client(fake) as c:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.5):
                async with c.messages.stream(model="m", max_tokens=64, messages=MESSAGES) as stream:
                    async for event in stream:
                        seen.append(event.type)
    assert seen == ["message_start"]


def test_a_stall_without_streaming_holds_the_response_then_drops_it(fake: FakeAnthropic) -> None:
    fake.add(stall(0.3))
    with pytest.raises((urllib.error.URLError, ConnectionError, TimeoutError, OSError)):
        post(fake, {"model": "m", "max_tokens": 1, "messages": MESSAGES}, {"x-api-key": "k"})
    assert fake.pending == 0


def test_requests_are_recorded_and_any_key_is_accepted_by_default(fake: FakeAnthropic) -> None:
    fake.extend([text("one"), text("two")])
    body = {"model": "m", "max_tokens": 1, "messages": MESSAGES}
    status, headers, payload = post(fake, body, {"x-api-key": "key-a"})
    assert status == 200 and payload["content"] == [{"type": "text", "text": "one"}]
    assert headers["request-id"].startswith("req_")
    assert post(fake, body, {"authorization": "Bearer key-b"})[0] == 200
    assert post(fake, body, {})[2]["error"]["type"] == "authentication_error"  # no key at all
    first = fake.requests[0]
    assert (first.method, first.path, first.body) == ("POST", "/v1/messages", body)
    assert first.headers["x-api-key"] == "key-a"
    assert len(fake.requests) == 3


async def test_a_configured_key_rejects_others_without_consuming_a_step() -> None:
    with FakeAnthropic([text("for the right key")], api_key="sk-right") as fake:
        async with client(fake, "sk-wrong") as c:
            with pytest.raises(anthropic.AuthenticationError) as caught:
                await c.messages.create(model="m", max_tokens=8, messages=MESSAGES)
        assert caught.value.type == "authentication_error"
        assert fake.pending == 1
        async with client(fake, "sk-right") as c:  # sent as Authorization: Bearer
            message = await c.messages.create(model="m", max_tokens=8, messages=MESSAGES)
        assert message.content[0].text == "for the right key"
        assert fake.requests[-1].headers["authorization"] == "Bearer sk-right"


async def test_an_exhausted_script_answers_500(fake: FakeAnthropic) -> None:
    async with client(fake) as c:
        with pytest.raises(anthropic.InternalServerError, match="script exhausted"):
            await c.messages.create(model="m", max_tokens=8, messages=MESSAGES)


async def classify(c: anthropic.AsyncAnthropic) -> str:
    """The control plane's routing classifier request, as it sends it: its system prompt, no tools."""
    message = await c.messages.create(
        model="claude-haiku",
        max_tokens=100,
        system=[{"type": "text", "text": CLASSIFIER_SYSTEM}],
        tools=[],
        messages=classifier_messages(TaskTraits(kind="implement"), "fix add"),  # type: ignore[arg-type]
    )
    return "".join(b.text for b in message.content if b.type == "text")


async def test_the_classifier_is_answered_without_taking_a_step(fake: FakeAnthropic) -> None:
    """A newcomer's script has no classifier step: the fake answers it, and the harness gets every step."""
    fake.extend([tool_use("list_files", {}), text("done")])
    async with client(fake) as c:
        assert json.loads(await classify(c)) == {"tier": "sonnet", "confidence": 0.9}
        assert fake.pending == 2
        first = await c.messages.create(model="m", max_tokens=8, messages=MESSAGES)
        assert [b.type for b in first.content] == ["tool_use"] and first.content[0].name == "list_files"  # type: ignore[union-attr]
        assert json.loads(await classify(c))["tier"] == "sonnet"  # a second Task's classifier, mid-script
        second = await c.messages.create(model="m", max_tokens=8, messages=MESSAGES)
        assert second.content[0].text == "done"  # type: ignore[union-attr]
    assert fake.pending == 0 and len(fake.requests) == 4


async def test_a_scripted_classifier_reply_answers_the_classifier(fake: FakeAnthropic) -> None:
    fake.extend([classification("haiku", 0.8), text('Sure: {"tier": "opus", "confidence": 0.7}'), text("done")])
    async with client(fake) as c:
        assert json.loads(await classify(c)) == {"tier": "haiku", "confidence": 0.8}
        assert "opus" in await classify(c)  # any text reply naming a JSON tier is a classifier reply
        assert fake.pending == 1
        assert await classify(c) == '{"tier": "sonnet", "confidence": 0.9}'  # "done" is not one: kept
        assert fake.pending == 1


async def test_without_a_default_the_classifier_takes_the_next_step() -> None:
    with FakeAnthropic([error(500, "api_error", "down"), text("done")], classifier=None) as fake:
        async with client(fake) as c:
            with pytest.raises(anthropic.InternalServerError, match="down"):
                await classify(c)
            assert await classify(c) == "done"


def test_script_items_name_a_constructor_and_its_arguments() -> None:
    assert step_from_json({"step": "text", "text": "x"}) == text("x")
    assert step_from_json({"step": "classification", "tier": "opus", "confidence": 0.7}) == classification("opus", 0.7)
    assert step_from_json({"step": "stall", "seconds": 2}) == Stall(2)
    uses = step_from_json({"step": "tool_uses", "uses": [["a", {}, "toolu_1"], ["b", {"k": 1}, "toolu_2"]]})
    assert isinstance(uses, Reply) and [b["name"] for b in uses.content] == ["a", "b"]
    assert step_from_json(
        {"step": "error", "status": 429, "type": "rate_limit_error", "message": "m", "retry_after": 1}
    ) == error(429, "rate_limit_error", "m", retry_after=1)
    with pytest.raises(ValueError, match="unknown step"):
        step_from_json({"step": "teleport"})


async def test_the_command_line_fake_serves_a_script_file(tmp_path: pathlib.Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"step": "tool_use", "name": "complete_task", "input": {"intent": "done"}}]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "drover.testing.fake_anthropic", "--port", "0", "--script", str(script)]
        + ["--classifier", "haiku"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 10)
        match = re.fullmatch(r"fake anthropic listening on (http://127\.0\.0\.1:\d+)\n", line)
        assert match, line
        async with anthropic.AsyncAnthropic(base_url=match.group(1), api_key="k", max_retries=0) as c:
            assert json.loads(await classify(c))["tier"] == "haiku"  # answered by the fake, not the script
            async with c.messages.stream(model="m", max_tokens=8, messages=MESSAGES) as stream:
                message = await stream.get_final_message()
        assert [(b.name, b.input) for b in message.content] == [("complete_task", {"intent": "done"})]
    finally:
        proc.send_signal(signal.SIGTERM)
        returncode = proc.wait(timeout=10)
        proc.stdout.close()  # type: ignore[union-attr]
    assert returncode == 0
