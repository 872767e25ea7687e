"""The model gateway on loopback, between the real `anthropic` client (as a runtime would call it, with
the run token) and the scripted fake Messages API (the provider, which must see only the real key)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import pytest

from agentd.errors import ModelCallRefused
from agentd.run.control_plane import ModelCall, Reservation
from agentd.run.gateway import Gateway, Upstream
from agentd.run.messages_request import body_problem, rewrite
from drover.core.usage import Usage
from drover.testing.fake_anthropic import FakeAnthropic, error, text

pytestmark = pytest.mark.timeout(30)
TOKEN = "run-token-0123456789abcdef"
PROVIDER_KEY = "sk-ant-provider-key-never-shown"
MODEL = "claude-sonnet-5-5"


class Meters:
    """The control plane's side of the gateway (reserve and settle of agentd/run/control_plane.py's
    ControlPlane), answering as the control plane would."""

    def __init__(self, refuse: str = "") -> None:
        self.refuse = refuse
        self.reserved: list[tuple[str, str, int, int]] = []
        self.settled: list[tuple[str, Usage | None, str]] = []

    async def reserve(self, call: ModelCall) -> Reservation:
        if self.refuse:
            raise ModelCallRefused(self.refuse, f"the control plane refused the model call: {self.refuse}")
        self.reserved.append((call.key, call.model, call.max_output_tokens, call.estimated_input_tokens))
        return Reservation(f"res_{len(self.reserved)}")

    async def settle(self, reservation: str, usage: Usage | None, error: str) -> None:
        self.settled.append((reservation, usage, error))


@pytest.fixture
def provider() -> Any:
    with FakeAnthropic(api_key=PROVIDER_KEY) as fake:
        yield fake


async def serve(provider: FakeAnthropic, meters: Meters) -> AsyncIterator[tuple[Gateway, str]]:
    gateway = Gateway(
        token=TOKEN,
        model=MODEL,
        max_output_tokens=4000,
        upstream=Upstream(provider.base_url, PROVIDER_KEY),
        control_plane=meters,  # reserve and settle are all the gateway calls
    )
    server = await asyncio.start_server(gateway.serve, "127.0.0.1", 0)
    try:
        yield gateway, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        await gateway.close()


@pytest.fixture
async def meters() -> Meters:
    return Meters()


@pytest.fixture
async def gateway(provider: FakeAnthropic, meters: Meters) -> AsyncIterator[tuple[Gateway, str]]:
    async for pair in serve(provider, meters):
        yield pair


def client(base_url: str, key: str = TOKEN) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=base_url, api_key=key, max_retries=0)


async def test_a_call_is_reserved_forwarded_with_the_real_key_and_settled_exactly(
    gateway: tuple[Gateway, str], provider: FakeAnthropic, meters: Meters
) -> None:
    provider.add(text("hello", usage={"input_tokens": 321, "output_tokens": 12}))
    async with client(gateway[1]) as c:
        reply = await c.messages.create(
            model="claude-opus-4-8", max_tokens=9000, messages=[{"role": "user", "content": "hi"}]
        )
    assert reply.content[0].text == "hello"  # type: ignore[union-attr]
    sent = provider.requests[0]
    assert sent.headers["x-api-key"] == PROVIDER_KEY and TOKEN not in str(sent.headers)
    assert (sent.body["model"], sent.body["max_tokens"]) == (MODEL, 4000)  # the routed model, the tier's cap
    assert meters.reserved == [("gw:1", MODEL, 4000, meters.reserved[0][3])]
    assert meters.settled == [("res_1", Usage(input_tokens=321, output_tokens=12), "")]


async def test_a_streamed_call_is_settled_from_the_usage_in_its_events(
    gateway: tuple[Gateway, str], provider: FakeAnthropic, meters: Meters
) -> None:
    provider.add(text("streamed", usage={"input_tokens": 50, "output_tokens": 7, "cache_read_input_tokens": 9}))
    async with client(gateway[1]) as c:
        async with c.messages.stream(model="m", max_tokens=100, messages=[{"role": "user", "content": "hi"}]) as stream:
            message = await stream.get_final_message()
    assert message.content[0].text == "streamed"  # type: ignore[union-attr]
    assert meters.settled == [
        ("res_1", Usage(input_tokens=50, output_tokens=7, cache_read_input_tokens=9), ""),
    ]


async def test_any_other_key_is_refused_and_nothing_reaches_the_provider(
    gateway: tuple[Gateway, str], provider: FakeAnthropic, meters: Meters
) -> None:
    async with client(gateway[1], key=PROVIDER_KEY) as c:  # even the real key: only the run token opens it
        with pytest.raises(anthropic.AuthenticationError):
            await c.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert provider.requests == [] and meters.reserved == [] and gateway[0].rejected_tokens == 1


async def test_a_budget_refusal_is_a_permission_error_and_every_later_call_is_refused(
    provider: FakeAnthropic,
) -> None:
    meters = Meters(refuse="change_budget")
    async for gw, url in serve(provider, meters):
        async with client(url) as c:
            for _ in range(2):
                with pytest.raises(anthropic.PermissionDeniedError) as refused:
                    await c.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
                assert "change_budget" in str(refused.value)
        assert gw.refused is not None and gw.refused.code == "change_budget"
    assert provider.requests == []


async def test_a_provider_error_passes_through_and_is_settled_as_that_error(
    gateway: tuple[Gateway, str], provider: FakeAnthropic, meters: Meters
) -> None:
    provider.add(error(529, "overloaded_error", "busy"))
    async with client(gateway[1]) as c:
        with pytest.raises(anthropic.APIStatusError) as failed:
            await c.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert failed.value.status_code == 529
    assert meters.settled == [("res_1", None, "overloaded_error")]


@pytest.mark.parametrize(
    "body, expected",
    [
        ({"max_tokens": 100}, {"max_tokens": 100}),
        ({"max_tokens": 9000}, {"max_tokens": 4000}),
        (
            {"max_tokens": 9000, "thinking": {"type": "enabled", "budget_tokens": 8000}},
            {"max_tokens": 4000, "thinking": {"type": "enabled", "budget_tokens": 3999}},
        ),
        ({"max_tokens": 1000, "thinking": {"type": "enabled", "budget_tokens": 2000}}, {"max_tokens": 1000}),
        (
            {"max_tokens": 9000, "thinking": {"type": "adaptive"}},
            {"max_tokens": 4000, "thinking": {"type": "adaptive"}},
        ),
    ],
)
def test_rewrite_applies_the_routed_model_and_the_tier_cap(body: dict[str, Any], expected: dict[str, Any]) -> None:
    assert rewrite({"model": "asked", **body}, MODEL, 4000) == {"model": MODEL, **expected}


async def test_a_subscription_member_is_called_with_its_oauth_token_which_the_runtime_never_sees(
    provider: FakeAnthropic, meters: Meters
) -> None:
    oauth = "sk-ant-oat01-subscription-token"
    provider.api_key = oauth
    provider.add(text("hello"))
    gateway = Gateway(
        token=TOKEN,
        model=MODEL,
        max_output_tokens=4000,
        upstream=Upstream(provider.base_url, oauth, billing="Subscription"),
        control_plane=meters,  # reserve and settle are all the gateway calls
    )
    server = await asyncio.start_server(gateway.serve, "127.0.0.1", 0)
    try:
        async with client(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}") as c:
            await c.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    finally:
        server.close()
        await gateway.close()
    sent = provider.requests[0].headers
    assert sent["authorization"] == f"Bearer {oauth}" and "x-api-key" not in sent
    assert "oauth-2025-04-20" in sent["anthropic-beta"].split(",")


async def test_the_configured_workspace_id_is_sent_and_the_runtimes_own_is_not(
    provider: FakeAnthropic, meters: Meters
) -> None:
    provider.extend([text("one"), text("two")])
    for workspace in ("wrkspc_01fleet", ""):
        gateway = Gateway(
            token=TOKEN,
            model=MODEL,
            max_output_tokens=4000,
            upstream=Upstream(provider.base_url, PROVIDER_KEY, workspace_id=workspace),
            control_plane=meters,
        )
        server = await asyncio.start_server(gateway.serve, "127.0.0.1", 0)
        try:
            url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
            async with anthropic.AsyncAnthropic(
                base_url=url, api_key=TOKEN, max_retries=0, default_headers={"anthropic-workspace-id": "wrkspc_own"}
            ) as c:
                await c.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
        finally:
            server.close()
            await gateway.close()
    assert [r.headers.get("anthropic-workspace-id") for r in provider.requests] == ["wrkspc_01fleet", None]


@pytest.mark.parametrize(
    "body, path, problem",
    [
        ({"max_tokens": 10, "messages": []}, "/v1/messages", ""),
        ({"messages": []}, "/v1/messages/count_tokens", ""),  # counting tokens needs no max_tokens
        ([], "/v1/messages", "body: must be a JSON object"),
        ({"max_tokens": 10}, "/v1/messages", "messages: must be a list"),
        ({"max_tokens": 10, "messages": "hi"}, "/v1/messages", "messages: must be a list"),
        ({"messages": []}, "/v1/messages", "max_tokens: required"),
        ({"max_tokens": -1, "messages": []}, "/v1/messages", "max_tokens: must be between 1 and 1000000"),
        ({"max_tokens": 10**7, "messages": []}, "/v1/messages", "max_tokens: must be between 1 and 1000000"),
        ({"max_tokens": True, "messages": []}, "/v1/messages", "max_tokens: must be an integer"),
        ({"max_tokens": 1.0, "messages": []}, "/v1/messages", "max_tokens: must be an integer"),
    ],
)
def test_a_request_body_is_checked_strictly_naming_the_field(body: Any, path: str, problem: str) -> None:
    assert body_problem(body, path) == problem
