"""Quota probes and observed quota failures: the I/O edge that feeds `members.select` (seed 004, "Quota probes").

A probe answer is cached per route key for `cache_ttl_seconds`. A transient
failure (network, timeout, 5xx) is retried `probe_max_retries` times with a
doubling backoff; a probe that still fails answers with the last good snapshot
for up to `probe_max_consecutive_failures` failures in a row while that
snapshot is at most `probe_max_staleness_seconds` old, and unknown (-1) after.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
import os
import pathlib
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable, Iterable, Mapping

import tenacity

from controlplane.config import HarnessConfig
from controlplane.domain.members import (
    PAY_PER_API,
    UNKNOWN,
    Member,
    QuotaPolicy,
    QuotaSnapshot,
)
from controlplane.domain.quota_shapes import ProbeFailed as ProbeFailed
from controlplane.domain.quota_shapes import Reading as Reading
from controlplane.domain.quota_shapes import parse_reading as parse_reading
from controlplane.store import quota_failures
from controlplane.store.engine import Store

log = logging.getLogger("drover.quota")
OAUTH_BETA = "oauth-2025-04-20"
"""The `anthropic-beta` value https://api.anthropic.com/api/oauth/usage requires."""
ANTHROPIC_AGENTS = frozenset({"claude", "anthropic"})


Fetch = Callable[[Member], Awaitable["float | Reading"]]
"""Asks a member's quota endpoint for its available percentage (a bare float) or a Reading; raises on failure."""


def is_transient(err: BaseException) -> bool:
    """Is a probe failure worth another attempt: network errors, timeouts and 5xx are; 4xx and bad JSON are not."""
    if isinstance(err, ProbeFailed):
        return err.transient
    return isinstance(err, (TimeoutError, OSError))


def retry_delay(retry: int, policy: QuotaPolicy) -> float:
    """Seconds before retry number `retry` (1-based): the initial delay, doubling."""
    return policy.probe_retry_initial_delay_ms / 1000 * 2 ** (retry - 1)


def credential(member: Member, env: Mapping[str, str]) -> str:
    """The member's token from its environment variable or file; "" when neither is set or readable."""
    if member.credential_env:
        return env.get(member.credential_env, "").strip()
    if member.credential_file:
        try:
            return pathlib.Path(member.credential_file).read_text().strip()
        except OSError:
            return ""
    return ""


def has_model_key(harness: HarnessConfig, env: Mapping[str, str]) -> bool:
    """Whether harness runs can call the model: the harness's own key (ANTHROPIC_API_KEY or
    [anthropic] api_key_file) or a member's credential that is set."""
    members = (m for cls in harness.classes.values() for m in cls.members)
    return bool(harness.api_key) or any(credential(m, env) for m in members)


NO_MODEL_KEY = (
    "no model key: set ANTHROPIC_API_KEY (or [anthropic] api_key_file, or a member's credential_env / "
    "credential_file) where the control plane runs; a Task without a command is worked by the model harness"
)


def parse_available_pct(body: bytes) -> float:
    """The percentage in a JSON body {"available_pct": N} with N in 0-100."""
    return parse_reading(body).available_pct


def probe_headers(member: Member, token: str) -> dict[str, str]:
    """The Bearer token; and `anthropic-beta: oauth-2025-04-20`, which Anthropic's OAuth usage endpoint
    requires, on a probe of an anthropic.com host or of a claude or anthropic member (a proxy in front of
    that endpoint gets it too); other endpoints get no vendor header."""
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    host = (urllib.parse.urlsplit(member.probe_url).hostname or "").lower()
    if host == "anthropic.com" or host.endswith(".anthropic.com") or member.agent in ANTHROPIC_AGENTS:
        headers["anthropic-beta"] = OAUTH_BETA
    return headers


class HttpQuotaFetch:
    """GET member.probe_url with the member's credential as a Bearer token, in a thread."""

    def __init__(self, env: Mapping[str, str] = os.environ, timeout: float = 5.0) -> None:
        self.env = env
        self.timeout = timeout

    async def __call__(self, member: Member) -> Reading:
        return await asyncio.to_thread(self._get, member)

    def _get(self, member: Member) -> Reading:
        token = credential(member, self.env)
        if not token:
            raise ProbeFailed(f"{member.route_key}: no credential configured", transient=False)
        request = urllib.request.Request(member.probe_url, headers=probe_headers(member, token))
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                body = response.read(64 * 1024)
        except urllib.error.HTTPError as err:
            err.close()
            raise ProbeFailed(f"HTTP {err.code}", transient=err.code >= 500) from err
        return parse_reading(body)


@dataclasses.dataclass
class _State:
    lock: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)
    answer: QuotaSnapshot | None = None
    answered_at: float = 0.0
    last_good: QuotaSnapshot | None = None
    failures: int = 0


class QuotaProbe:
    """Snapshots of Subscription members' quota, cached per route key.

    `policy` may be replaced at any time (the tuning keys are hot-reloadable).
    """

    def __init__(
        self,
        fetch: Fetch | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        *,
        policy: QuotaPolicy = QuotaPolicy(),
        env: Mapping[str, str] = os.environ,
    ) -> None:
        self.fetch = fetch or HttpQuotaFetch(env)
        self.policy = policy
        self._clock = clock
        self._sleep = sleep
        self._states: dict[str, _State] = {}

    async def snapshot(self, member: Member) -> QuotaSnapshot:
        """PayPerApi: 100 %, no call. No probe_url: unknown. Otherwise cached, probed, or last good."""
        if member.billing == PAY_PER_API:
            return QuotaSnapshot(100.0, self._clock())
        if not member.probe_url:
            return QuotaSnapshot(UNKNOWN, self._clock())
        state = self._states.setdefault(member.route_key, _State())
        async with state.lock:  # concurrent pickups of one route key share one probe
            if state.answer is not None and self._clock() - state.answered_at < self.policy.cache_ttl_seconds:
                return state.answer
            state.answer = await self._probe(member, state)
            state.answered_at = self._clock()
            return state.answer

    async def snapshots(self, members: Iterable[Member]) -> dict[str, QuotaSnapshot]:
        """Snapshots by route key for `members.select`, probed concurrently."""
        unique = {m.route_key: m for m in members}
        answers = await asyncio.gather(*(self.snapshot(m) for m in unique.values()))
        return dict(zip(unique, answers, strict=True))

    async def _probe(self, member: Member, state: _State) -> QuotaSnapshot:
        try:
            reading = await self._fetch(member)
        except Exception as err:  # any failure of the endpoint means "unknown", never a crash of routing
            state.failures += 1
            good, now = state.last_good, self._clock()
            log.warning("quota probe %s failed (%d in a row): %s", member.route_key, state.failures, err)
            if (
                good is not None
                and state.failures <= self.policy.probe_max_consecutive_failures
                and now - good.fetched_at <= self.policy.probe_max_staleness_seconds
            ):
                return good
            return QuotaSnapshot(UNKNOWN, now)
        state.failures = 0
        pct, resets_at, per_model = (reading, None, {}) if isinstance(reading, (int, float)) else reading
        state.last_good = QuotaSnapshot(pct, self._clock(), resets_at, per_model)
        return state.last_good

    async def _fetch(self, member: Member) -> float | Reading:
        """The probe's answer; a transient failure is tried again `probe_max_retries` times, backing off."""
        async for attempt in tenacity.AsyncRetrying(
            retry=tenacity.retry_if_exception(is_transient),
            stop=tenacity.stop_after_attempt(self.policy.probe_max_retries + 1),
            wait=lambda state: retry_delay(state.attempt_number, self.policy),
            sleep=self._sleep,
            reraise=True,
        ):
            with attempt:
                return await self.fetch(member)
        raise AssertionError("tenacity re-raises the last failure")


class ObservedFailures:
    """The 429 and quota failures members' calls met, by route key, in the database (`store.quota_failures`):
    every replica's router reads the same rows, and a restart keeps them. A settle records its call's own
    failure in its transaction (`model_calls.settle`); `record` is for any other caller."""

    def __init__(self, store: Store, retention: dt.timedelta = dt.timedelta(minutes=30)) -> None:
        self.store = store
        self.retention = retention

    async def record(self, route_key: str, at: dt.datetime, reason: str = "429") -> bool:
        """Keep one (False: `reason` is not a quota error); drops the failures older than the retention."""
        return await self.store.run(quota_failures.record, route_key, reason, at, self.retention)

    async def recent(
        self, route_keys: Iterable[str], window: dt.timedelta, now: dt.datetime
    ) -> dict[str, list[dt.datetime]]:
        """The failures of each route key in [now - window, now], one read."""
        return await self.store.read(quota_failures.recent, list(route_keys), window, now)
