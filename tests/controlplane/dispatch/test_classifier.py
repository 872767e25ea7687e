"""The routing classifier call: the real AnthropicModel against the scripted fake Messages API."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from controlplane.dispatch.classifier import MAX_TOKENS, classify
from controlplane.dispatch.own_model import MeterRefused
from controlplane.domain.tiers import (
    CLASSIFIER_SYSTEM,
    ClassifierAnswer,
    TaskTraits,
    classifier_messages,
)
from controlplane.store.meters import CLASSIFIER_CALLS_DAY, PROVIDER_MONTH
from drover.core.model import AnthropicModel, ModelReply
from drover.core.retry import RetryPolicy
from drover.testing.fake_anthropic import FakeAnthropic, error, text

pytestmark = pytest.mark.timeout(30)
TRAITS = TaskTraits(kind="implement", resources=("api",))
OBJECTIVE = "Add pagination to the orders endpoint."


class Cap:
    """A stand-in for the metered model (own_model.OwnModel): grants `left` calls, then refuses with
    the daily cap's (or another meter's) MeterRefused; counts every ask."""

    def __init__(self, model: AnthropicModel, left: int, refusing: str = CLASSIFIER_CALLS_DAY) -> None:
        self.model, self.left, self.refusing = model, left, refusing
        self.asked = 0

    async def complete(self, **call: Any) -> ModelReply:
        self.asked += 1
        if self.left <= 0:
            raise MeterRefused(self.refusing)
        self.left -= 1
        return await self.model.complete(**call)


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    # Every reply here is scripted, failures included: no default classifier answer from the fake.
    with FakeAnthropic(api_key="sk-route", classifier=None) as server:
        yield server


@pytest.fixture
async def model(fake: FakeAnthropic) -> AsyncIterator[AnthropicModel]:
    async def no_sleep(seconds: float) -> None:
        raise AssertionError(f"the classifier never retries, yet slept {seconds} s")

    async with AnthropicModel(
        fake.base_url, "sk-route", "claude-haiku-test", RetryPolicy(max_attempts=1), sleep=no_sleep
    ) as client:
        yield client


async def test_an_answer(fake: FakeAnthropic, model: AnthropicModel) -> None:
    fake.add(text('{"tier":"haiku","confidence":0.9}'))
    cap = Cap(model, 1)
    assert await classify(cap, TRAITS, OBJECTIVE) == ClassifierAnswer("haiku", 0.9, False, "answered")
    assert cap.asked == 1 and cap.left == 0
    [request] = fake.requests
    body = request.body
    assert body["model"] == "claude-haiku-test" and body["max_tokens"] == MAX_TOKENS == 100
    assert body["system"] == [{"type": "text", "text": CLASSIFIER_SYSTEM}]
    assert body["tools"] == [] and "thinking" not in body
    assert body["messages"] == classifier_messages(TRAITS, OBJECTIVE)


async def test_a_fenced_answer_in_prose(fake: FakeAnthropic, model: AnthropicModel) -> None:
    fake.add(text('Sure.\n```json\n{"tier": "opus", "confidence": 0.75}\n```'))
    assert await classify(Cap(model, 1), TRAITS, OBJECTIVE) == ClassifierAnswer("opus", 0.75, False, "answered")


async def test_low_confidence_abstains(fake: FakeAnthropic, model: AnthropicModel) -> None:
    fake.add(text('{"tier": "haiku", "confidence": 0.3}'))
    answer = await classify(Cap(model, 1), TRAITS, OBJECTIVE)
    assert answer == ClassifierAnswer(None, 0.3, True, "low_confidence")
    assert len(fake.requests) == 1


async def test_the_cap_reached_makes_no_call(fake: FakeAnthropic, model: AnthropicModel) -> None:
    fake.add(text('{"tier": "haiku", "confidence": 0.9}'))
    cap = Cap(model, 0)
    assert await classify(cap, TRAITS, OBJECTIVE) == ClassifierAnswer(None, 0.0, True, "capped")
    assert cap.asked == 1
    assert fake.requests == [] and fake.pending == 1


async def test_a_full_provider_budget_makes_no_call(fake: FakeAnthropic, model: AnthropicModel) -> None:
    fake.add(text('{"tier": "haiku", "confidence": 0.9}'))
    cap = Cap(model, 0, refusing=PROVIDER_MONTH)
    assert await classify(cap, TRAITS, OBJECTIVE) == ClassifierAnswer(None, 0.0, True, "budget")
    assert fake.requests == [] and fake.pending == 1


@pytest.mark.parametrize(
    "failure",
    [
        error(500, "api_error", "internal"),
        error(529, "overloaded_error", "busy", in_stream=True),
        error(429, "rate_limit_error", "slow down", retry_after=5),
        error(400, "invalid_request_error", "bad request"),
        error(402, "billing_error", "no credit"),
    ],
)
async def test_a_failed_call_abstains(fake: FakeAnthropic, model: AnthropicModel, failure: object) -> None:
    fake.add(failure)  # type: ignore[arg-type]
    cap = Cap(model, 1)
    assert await classify(cap, TRAITS, OBJECTIVE) == ClassifierAnswer(None, 0.0, True, "failed")
    assert len(fake.requests) == 1 and cap.left == 0  # a failed call still used its reservation


async def test_unparseable_text_abstains(fake: FakeAnthropic, model: AnthropicModel) -> None:
    fake.add(text("I think this one needs sonnet."))
    assert await classify(Cap(model, 1), TRAITS, OBJECTIVE) == ClassifierAnswer(None, 0.0, True, "unparseable")


async def test_the_cap_is_shared_across_calls(fake: FakeAnthropic, model: AnthropicModel) -> None:
    fake.extend([text('{"tier": "sonnet", "confidence": 0.8}'), text('{"tier": "haiku", "confidence": 0.8}')])
    cap = Cap(model, 1)
    first = await classify(cap, TRAITS, OBJECTIVE)
    second = await classify(cap, TRAITS, OBJECTIVE)
    assert (first.tier, second.reason) == ("sonnet", "capped")
    assert len(fake.requests) == 1 and fake.pending == 1


async def test_the_fake_knows_the_real_classifier_request() -> None:
    """The scripted fake answers this very request by itself, so a script needs no classifier step."""
    with FakeAnthropic([text("for the harness")], api_key="sk-route") as fake:
        async with AnthropicModel(fake.base_url, "sk-route", "claude-haiku-test", RetryPolicy(max_attempts=1)) as own:
            answer = await classify(Cap(own, 1), TRAITS, OBJECTIVE)
        assert answer == ClassifierAnswer("sonnet", 0.9, False, "answered")
        assert fake.pending == 1 and len(fake.requests) == 1
