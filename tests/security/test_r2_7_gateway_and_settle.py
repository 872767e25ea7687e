"""Issue 24, finding 7 (the gateway part): the model gateway dropped the connection on a negative
`max_tokens` and forwarded query strings to the provider; a settle above its reservation was applied
uncapped (a usage report counting cache writes on top of input settled 105,750 of a 100,000
micro-dollar limit).

The real agentd gateway, wired as a runtime's supervisor wires it (its control-plane client dials the real
control plane with the agent token of the run's agent), in front of the scripted fake Messages API.
The run is assigned to a hand-driven agent, so the test holds the run as agentd would."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from agentd.daemon.connection import ChannelSettings
from agentd.run.control_plane import GrpcControlPlane
from agentd.run.gateway import MAX_BODY, Gateway, Upstream
from drover.testing import fake_anthropic as fake
from drover.v1 import agent_pb2
from tests.conftest import API_KEY, Fleet, wait_for
from tests.security.rawagent import RawAgent

pytestmark = pytest.mark.timeout(180)
LIMIT = 100_000  # the Change's budget, in micro-dollars
RUN_TOKEN = "run-token-for-the-gateway-0123456789"


def _start(fleet: Fleet, model: fake.FakeAnthropic, repo: pathlib.Path) -> tuple[RawAgent, Any, str]:
    """A budgeted claude-code Change whose run is assigned to a hand-driven agent: (agent, assignment, change id)."""
    fleet.plane.extra_env.update(ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=API_KEY)
    plane = fleet.start_plane()
    plane.add_project("calc", str(repo))
    agent = RawAgent(plane, "worker", plane.agent_token_file.read_text().strip(), drivers=("claude-code",))
    task = {"key": "t", "kind": "implement", "objective": "o", "complexity": "medium", "runtime": "claude-code"}
    with plane.client() as client:
        change = client.submit_change("calc", "spend", [task], budget_usd=LIMIT / 1e6)
    assign = wait_for(
        lambda: next((m.assign for m in agent.messages(1) if m.WhichOneof("body") == "assign"), None),
        60,
        what="the run's assignment",
    )
    agent.run_message(assign.run_id, 1, started=agent_pb2.RunStarted(pid=1))
    return agent, assign, change.id


async def _gateway(fleet: Fleet, assign: Any) -> AsyncIterator[tuple[Gateway, str]]:
    """The run's gateway as `agentd.drivers.runtime` builds it, served on loopback."""
    control_plane = GrpcControlPlane(
        ChannelSettings(fleet.plane.target),
        fleet.plane.agent_token_file.read_text().strip(),
        assign.run_id,
        pathlib.Path(tempfile.mkdtemp(prefix="drover-r2-7-")),
    )
    gateway = Gateway(
        token=RUN_TOKEN,
        model=assign.model,
        max_output_tokens=assign.harness.max_output_tokens,
        upstream=Upstream(
            assign.base_url, assign.secret_env["ANTHROPIC_API_KEY"], assign.harness.billing or "PayPerApi"
        ),
        control_plane=control_plane,
        key_prefix="gw:1",
    )
    server = await asyncio.start_server(gateway.serve, "127.0.0.1", 0)
    try:
        yield gateway, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        await gateway.close()
        await control_plane.close()


def _call(max_tokens: Any = 1000, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": max_tokens, "messages": [{"role": "user", "content": "hi"}], **extra}


HEADERS = {"x-api-key": RUN_TOKEN, "anthropic-version": "2023-06-01"}


def _is_error(answer: httpx.Response, status: int, kind: str, field: str = "") -> None:
    assert answer.status_code == status, (answer.status_code, answer.text)
    body = answer.json()
    assert body["type"] == "error" and body["error"]["type"] == kind, body
    assert field in body["error"]["message"], body


async def test_bad_requests_are_answered_never_dropped(
    fleet: Fleet, model: fake.FakeAnthropic, git_repo: pathlib.Path
) -> None:
    agent, assign, _ = _start(fleet, model, git_repo)
    model.extend([fake.text("hello")])
    try:
        async for _gw, url in _gateway(fleet, assign):
            async with httpx.AsyncClient(base_url=url, headers=HEADERS, timeout=30) as client:
                # A negative max_tokens: a 400 naming the field (on main the connection was dropped).
                _is_error(await client.post("/v1/messages", json=_call(-1)), 400, "invalid_request_error", "max_tokens")
                for bad in (0, "100", 1.5, True, None, 10**30):
                    answer = await client.post("/v1/messages", json=_call(bad))
                    _is_error(answer, 400, "invalid_request_error", "max_tokens")
                missing = {"model": "m", "messages": []}
                _is_error(await client.post("/v1/messages", json=missing), 400, "invalid_request_error", "max_tokens")
                wrong = _call(messages="hi")
                _is_error(await client.post("/v1/messages", json=wrong), 400, "invalid_request_error", "messages")
                for body in (b"{not json", b"[1, 2]", b"\xff\xfe"):
                    _is_error(await client.post("/v1/messages", content=body), 400, "invalid_request_error", "body")
                _is_error(await client.post("/v1/other", json=_call()), 404, "not_found_error")
                _is_error(await client.get("/v1/messages"), 405, "invalid_request_error")
                big = b'{"messages": [], "max_tokens": 1, "pad": "' + b"x" * MAX_BODY + b'"}'
                _is_error(await client.post("/v1/messages", content=big), 413, "request_too_large")
                # A good call after all that, on the same kind of connection, is answered.
                assert (await client.post("/v1/messages", json=_call(100))).status_code == 200
            # Headers past the gateway's bound: 431, an answer all the same.
            answer_431 = await asyncio.to_thread(_raw, url, "/v1/messages", "x-big: " + "a" * (80 << 10))
            assert answer_431.startswith(b"HTTP/1.1 431 "), answer_431[:200]
            assert json.loads(answer_431.split(b"\r\n\r\n", 1)[1])["type"] == "error"
    finally:
        agent.close()
    assert [r.path for r in model.requests] == ["/v1/messages"]  # only the good call reached the provider
    assert model.requests[0].body["max_tokens"] == 100


async def test_no_query_string_reaches_the_provider(
    fleet: Fleet, model: fake.FakeAnthropic, git_repo: pathlib.Path
) -> None:
    agent, assign, _ = _start(fleet, model, git_repo)
    model.extend([fake.text("hello"), fake.text("again")])
    try:
        async for _gw, url in _gateway(fleet, assign):
            async with httpx.AsyncClient(base_url=url, headers=HEADERS, timeout=30) as client:
                answer = await client.post("/v1/messages?beta=true&leak=secret", json=_call(100))
                assert answer.status_code == 200, answer.text
                assert model.requests[-1].path == "/v1/messages"  # on main: /v1/messages?beta=true&leak=secret
                answer = await client.post("/v1/messages/?x=1#frag", json=_call(100))
                assert answer.status_code == 404, answer.text  # only the routes, exactly
            # An absolute target: its path alone.
            absolute = await asyncio.to_thread(
                _raw, url, "http://elsewhere.invalid/v1/messages?to=x", body=json.dumps(_call(100)).encode()
            )
            assert absolute.startswith(b"HTTP/1.1 200 "), absolute[:300]
    finally:
        agent.close()
    assert [r.path for r in model.requests] == ["/v1/messages", "/v1/messages"]


def _drover(fleet: Fleet, *args: str) -> str:
    """The `drover` CLI as a user runs it."""
    env = dict(os.environ, DROVER_TARGET=fleet.plane.target)
    env.pop("DROVER_TOKEN", None)
    token = ["--token-file", str(fleet.plane.data_dir / "tokens" / "admin.token")]
    return subprocess.run(
        [sys.executable, "-m", "drover.cli", *args, *token], capture_output=True, text=True, env=env, check=True
    ).stdout


def _raw(url: str, target: str, header: str = "x-api-key: " + RUN_TOKEN, body: bytes = b"{}") -> bytes:
    """One request as written here (any target, any header), its connection closed after the answer."""
    host, port = url.removeprefix("http://").split(":")
    head = f"POST {target} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n{header}\r\ncontent-length: {len(body)}\r\n"
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head.encode() + b"\r\n" + body)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        return answer


ABSURD = [
    # the report: cache writes counted on top of the whole input
    {"input_tokens": 3_000, "cache_creation_input_tokens": 3_000, "output_tokens": 1000},
    {"input_tokens": 10, "cache_creation_input_tokens": 50_000_000, "output_tokens": 1000},
    {"input_tokens": 900_000_000, "output_tokens": 900_000_000, "cache_read_input_tokens": 900_000_000},
]


async def test_a_settle_never_passes_the_meter_and_a_report_above_its_reservation_is_recorded(
    fleet: Fleet, model: fake.FakeAnthropic, git_repo: pathlib.Path
) -> None:
    agent, assign, change_id = _start(fleet, model, git_repo)
    model.responder = lambda body: fake.text("ok", usage=ABSURD[len(model.requests) % len(ABSURD)])
    statuses: list[int] = []
    try:
        async for gw, url in _gateway(fleet, assign):
            async with httpx.AsyncClient(base_url=url, headers=HEADERS, timeout=30) as client:
                for i in range(30):
                    answer = await client.post("/v1/messages", json=_call(1000, stream=i % 2 == 1))
                    statuses.append(answer.status_code)
                    if answer.status_code == 403:
                        break
            refused = gw.refused
    finally:
        agent.close()
    with fleet.plane.client() as client:
        [meter] = client.get_usage(f"change-usd:{change_id}")
        over = client.list_events(change_id=change_id, kind="run.over_reservation")
        limited = client.list_events(change_id=change_id, kind="run.spend_limited")
    usage_cli = json.loads(_drover(fleet, "usage", "--prefix", f"change-usd:{change_id}", "--json"))
    # The meter never passed its limit: what was used is what was reserved, at most.
    assert meter.limit == LIMIT and meter.used + meter.reserved <= LIMIT, meter
    assert usage_cli[0]["used"] == meter.used <= LIMIT, usage_cli
    assert meter.used > 0
    # Several calls went through with absurd usage, then the budget refused one (a 403 permission_error).
    assert statuses[-1] == 403 and statuses.count(200) >= 3, statuses
    assert refused is not None and refused.code in ("change_budget", "run_cost_cap"), refused
    # Each report above its reservation is an event with the excess, so operators see it.
    assert len(over) == statuses.count(200), over
    for event in over:
        data = event.data if isinstance(event.data, dict) else json.loads(event.data)
        assert data["excess"] == data["reported"] - data["reserved"] > 0, data
    assert limited or refused.code == "run_cost_cap"
