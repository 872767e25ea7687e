"""Quota probes against a real HTTP server on loopback. Observed failures:
tests/controlplane/store/test_quota_failures.py; an answer's shapes: tests/controlplane/domain/test_quota_shapes.py."""

from __future__ import annotations

import datetime as dt
import http.server
import json
import socket
import threading
from collections.abc import Iterator

import pytest

from controlplane.dispatch.quota import (
    ProbeFailed,
    QuotaProbe,
    parse_available_pct,
)
from controlplane.domain.members import (
    Member,
    QuotaPolicy,
    QuotaSnapshot,
    TierClass,
    select,
)

ENV = {"TOKEN_A": "tok-a", "TOKEN_B": "tok-b"}


class QuotaServer(http.server.ThreadingHTTPServer):
    """Answers GET /<name> from a script per path: (status, body) pairs, the last one repeated."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), QuotaHandler)
        self.script: dict[str, list[tuple[int, bytes]]] = {}
        self.requests: list[tuple[str, str]] = []  # (path, Authorization)
        self.betas: list[str] = []  # each request's anthropic-beta header ("": none)

    def answer(self, path: str, *responses: tuple[int, object]) -> str:
        self.script[path] = [
            (status, body if isinstance(body, bytes) else json.dumps(body).encode()) for status, body in responses
        ]
        return f"http://127.0.0.1:{self.server_address[1]}{path}"

    def hits(self, path: str) -> int:
        return sum(1 for p, _ in self.requests if p == path)


class QuotaHandler(http.server.BaseHTTPRequestHandler):
    server: QuotaServer

    def do_GET(self) -> None:
        self.server.requests.append((self.path, self.headers.get("Authorization", "")))
        self.server.betas.append(self.headers.get("anthropic-beta", ""))
        script = self.server.script.get(self.path, [(404, b"{}")])
        status, body = script.pop(0) if len(script) > 1 else script[0]
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[QuotaServer]:
    srv = QuotaServer()
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join(5)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Sleeps(list):
    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


def sub(url: str, instance: str = "acct-a", token_env: str = "TOKEN_A", score: int = 100, order: int = 0) -> Member:
    return Member(
        agent="anthropic",
        instance_id=instance,
        billing="Subscription",
        quality_score=score,
        probe_url=url,
        credential_env=token_env,
        order=order,
    )


def probe(clock: Clock, sleeps: Sleeps, **policy: object) -> QuotaProbe:
    return QuotaProbe(clock=clock, sleep=sleeps, policy=QuotaPolicy(**policy), env=ENV)


async def test_answer_is_cached_per_route_key_within_the_ttl(server: QuotaServer) -> None:
    clock, sleeps = Clock(), Sleeps()
    url = server.answer("/a", (200, {"available_pct": 42}), (200, {"available_pct": 37}))
    quota = probe(clock, sleeps)
    assert (await quota.snapshot(sub(url))) == QuotaSnapshot(42.0, 1000.0)
    clock.now += 59
    assert (await quota.snapshot(sub(url))).available_pct == 42.0
    assert server.requests == [("/a", "Bearer tok-a")]
    clock.now += 1
    assert (await quota.snapshot(sub(url))) == QuotaSnapshot(37.0, 1060.0)
    assert server.hits("/a") == 2


async def test_snapshots_feed_select_most_quota_first(server: QuotaServer) -> None:
    clock, sleeps = Clock(), Sleeps()
    acct_a = sub(server.answer("/a", (200, {"available_pct": 30})), "acct-a", "TOKEN_A", order=0)
    acct_b = sub(server.answer("/b", (200, {"available_pct": 80})), "acct-b", "TOKEN_B", order=1)
    payg = Member(agent="anthropic", instance_id="payg", billing="PayPerApi", quality_score=100, order=2)
    snapshots = await probe(clock, sleeps).snapshots([acct_a, acct_b, payg])
    assert {k: s.available_pct for k, s in snapshots.items()} == {
        "anthropic/acct-a": 30.0,
        "anthropic/acct-b": 80.0,
        "anthropic/payg": 100.0,
    }
    assert sorted(server.requests) == [("/a", "Bearer tok-a"), ("/b", "Bearer tok-b")]
    now = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    selection = select(TierClass("sonnet", (acct_a, acct_b, payg)), [], [], snapshots, {}, {}, QuotaPolicy(), now)
    assert selection.chosen == acct_b


@pytest.mark.parametrize(
    "responses, pct, hits, delays",
    [
        ([(500, b"oops"), (503, b""), (200, {"available_pct": 55})], 55.0, 3, [0.25, 0.5]),
        ([(500, b"oops")], -1.0, 3, [0.25, 0.5]),  # two retries, then unknown
        ([(401, {"error": "unauthorized"})], -1.0, 1, []),  # 4xx: not worth a retry
        ([(200, b"<html>garbage</html>")], -1.0, 1, []),  # unrecognised shape
        ([(200, {"remaining": 12})], -1.0, 1, []),
        ([(200, {"available_pct": 140})], -1.0, 1, []),
    ],
)
async def test_transient_failures_retry_with_doubling_backoff(server, responses, pct, hits, delays) -> None:
    clock, sleeps = Clock(), Sleeps()
    url = server.answer("/a", *responses)
    assert (await probe(clock, sleeps).snapshot(sub(url))).available_pct == pct
    assert (server.hits("/a"), sleeps) == (hits, delays)


async def test_connection_refused_is_transient_and_ends_unknown() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again before the probe runs: nothing listens there
    clock, sleeps = Clock(), Sleeps()
    snapshot = await probe(clock, sleeps, probe_max_retries=1).snapshot(sub(f"http://127.0.0.1:{port}/q"))
    assert (snapshot.available_pct, sleeps) == (-1.0, [0.25])


async def test_last_good_is_kept_for_a_few_failures_then_dropped(server: QuotaServer) -> None:
    clock, sleeps = Clock(), Sleeps()
    url = server.answer("/a", (200, {"available_pct": 70}), (500, b"down"))
    quota = probe(clock, sleeps, probe_max_retries=0, cache_ttl_seconds=10, probe_max_consecutive_failures=3)
    good = await quota.snapshot(sub(url))
    assert good == QuotaSnapshot(70.0, 1000.0)
    answers = []
    for _ in range(4):
        clock.now += 10
        answers.append((await quota.snapshot(sub(url))).available_pct)
    assert answers == [70.0, 70.0, 70.0, -1.0]  # three failures tolerated, the fourth is unknown
    assert server.hits("/a") == 5


async def test_last_good_is_dropped_when_stale(server: QuotaServer) -> None:
    clock, sleeps = Clock(), Sleeps()
    url = server.answer("/a", (200, {"available_pct": 70}), (500, b"down"))
    quota = probe(clock, sleeps, probe_max_retries=0, probe_max_staleness_seconds=300)
    await quota.snapshot(sub(url))
    clock.now += 120
    assert (await quota.snapshot(sub(url))).available_pct == 70.0  # 120 s old: still used
    clock.now += 181
    assert (await quota.snapshot(sub(url))) == QuotaSnapshot(-1.0, 1301.0)  # 301 s old: unknown


async def test_a_success_resets_the_failure_count(server: QuotaServer) -> None:
    clock, sleeps = Clock(), Sleeps()
    url = server.answer(
        "/a",
        (200, {"available_pct": 70}),
        (500, b""),
        (500, b""),
        (200, {"available_pct": 60}),
        (500, b""),
        (500, b""),
        (500, b""),
    )
    quota = probe(clock, sleeps, probe_max_retries=0, cache_ttl_seconds=1, probe_max_consecutive_failures=2)
    answers = []
    for _ in range(7):
        answers.append((await quota.snapshot(sub(url))).available_pct)
        clock.now += 1
    assert answers == [70.0, 70.0, 70.0, 60.0, 60.0, 60.0, -1.0]


@pytest.mark.parametrize(
    "with_url, token_env",
    [
        (False, "TOKEN_A"),  # no probe_url
        (True, "UNSET_TOKEN"),  # no credential
        (True, ""),
    ],
)
async def test_unknown_without_a_probe_url_or_a_credential(server: QuotaServer, with_url, token_env) -> None:
    url = server.answer("/a", (200, {"available_pct": 90}))
    member = sub(url if with_url else "", token_env=token_env)
    assert (await probe(Clock(), Sleeps()).snapshot(member)).available_pct == -1.0
    assert server.requests == []


async def test_credential_from_a_file(server: QuotaServer, tmp_path) -> None:
    (tmp_path / "token").write_text("tok-file\n")
    url = server.answer("/a", (200, {"available_pct": 12.5}))
    member = Member(
        agent="anthropic",
        billing="Subscription",
        quality_score=100,
        probe_url=url,
        credential_file=str(tmp_path / "token"),
    )
    assert (await probe(Clock(), Sleeps()).snapshot(member)).available_pct == 12.5
    assert server.requests == [("/a", "Bearer tok-file")]


async def test_pay_per_api_is_never_probed(server: QuotaServer) -> None:
    url = server.answer("/a", (200, {"available_pct": 1}))
    payg = Member(agent="anthropic", billing="PayPerApi", quality_score=100, probe_url=url, credential_env="TOKEN_A")
    assert (await probe(Clock(), Sleeps()).snapshot(payg)).available_pct == 100.0
    assert server.requests == []


@pytest.mark.parametrize(
    "body, pct",
    [
        (b'{"available_pct": 0}', 0.0),
        (b'{"available_pct": 99.5, "reset_at": "2030-01-01T00:00:00Z"}', 99.5),
        (b'{"available_pct": true}', None),
        (b'{"available_pct": "50"}', None),
        (b"[50]", None),
        (b"", None),
    ],
)
def test_parse_available_pct(body: bytes, pct: float | None) -> None:
    if pct is None:
        with pytest.raises(ProbeFailed):
            parse_available_pct(body)
    else:
        assert parse_available_pct(body) == pct


async def test_the_probes_reset_reaches_the_snapshot(server: QuotaServer) -> None:
    url = server.answer("/r", (200, {"available_pct": 42, "resets_at": "2030-01-08T00:20:00+00:00"}))
    snapshot = await probe(Clock(), Sleeps()).snapshot(sub(url))
    assert snapshot.available_pct == 42.0
    assert snapshot.resets_at == dt.datetime(2030, 1, 8, 0, 20, tzinfo=dt.UTC)
    bad = server.answer("/bad", (200, {"available_pct": 42, "resets_at": "next week"}))
    assert not (await probe(Clock(), Sleeps()).snapshot(sub(bad, "acct-b"))).known  # refused whole, unknown


OAUTH_USAGE = {  # Anthropic's GET /api/oauth/usage: opus nearly spent for the week, the account not
    "five_hour": {"utilization": 10.0, "resets_at": "2030-01-01T15:00:00+00:00"},
    "seven_day": {"utilization": 4.0, "resets_at": "2030-01-07T00:00:00+00:00"},
    "seven_day_oauth_apps": None,
    "seven_day_opus": {"utilization": 95.0, "resets_at": "2030-01-07T00:00:00+00:00"},
    "seven_day_sonnet": None,
}


async def test_an_opus_member_is_gated_on_its_bucket_and_a_sonnet_one_on_the_overall(server: QuotaServer) -> None:
    url = server.answer("/api/oauth/usage", (200, OAUTH_USAGE))
    account = dict(
        agent="anthropic", instance_id="acct-a", billing="Subscription", probe_url=url, credential_env="TOKEN_A"
    )
    opus = Member(**account, model="claude-opus-4-7", quality_score=110, order=0)
    sonnet = Member(**account, model="claude-sonnet-5-5", quality_score=100, order=1)
    snapshots = await probe(Clock(), Sleeps()).snapshots([opus, sonnet])
    assert server.requests == [("/api/oauth/usage", "Bearer tok-a")]
    assert server.betas == ["oauth-2025-04-20"]  # Anthropic's endpoint refuses an OAuth token without it
    snapshot = snapshots["anthropic/acct-a"]
    assert (snapshot.available_pct, dict(snapshot.per_model)) == (90.0, {"opus": 5.0})
    now = dt.datetime(2030, 1, 1, 12, tzinfo=dt.UTC)
    policy = QuotaPolicy(min_quota_pct=10, start_floor_pct=10, end_floor_pct=10)
    selection = select(TierClass("opus", (opus, sonnet)), [], [], snapshots, {}, {}, policy, now)
    assert selection.chosen == sonnet
    verdicts = {c["model"]: c["verdict"] for c in selection.candidates}
    assert verdicts == {
        "claude-opus-4-7": "quota opus 5% below the floor 10% (ramping to 10% at the reset 2030-01-01T15:00:00+00:00)",
        "claude-sonnet-5-5": "chosen",  # no sonnet bucket: the overall 90 %
    }


@pytest.mark.parametrize(
    "agent, path, beta",
    [("anthropic", "/quota", "oauth-2025-04-20"), ("claude", "/quota", "oauth-2025-04-20"), ("codex", "/quota", "")],
)
async def test_the_oauth_beta_header_goes_to_anthropic_members_only(server: QuotaServer, agent, path, beta) -> None:
    url = server.answer(path, (200, {"available_pct": 50}))
    member = Member(agent=agent, billing="Subscription", quality_score=100, probe_url=url, credential_env="TOKEN_A")
    assert (await probe(Clock(), Sleeps()).snapshot(member)).available_pct == 50.0
    assert server.betas == [beta]
