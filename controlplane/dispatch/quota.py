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
import json
import logging
import os
import pathlib
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import NamedTuple

import tenacity

from controlplane.config import HarnessConfig
from controlplane.domain.members import (
    PAY_PER_API,
    UNKNOWN,
    Member,
    QuotaPolicy,
    QuotaSnapshot,
)

log = logging.getLogger("drover.quota")


class Reading(NamedTuple):
    """A quota endpoint's answer: the available percentage (0-100) and, if it said, when the window resets."""

    available_pct: float
    resets_at: dt.datetime | None = None


Fetch = Callable[[Member], Awaitable["float | Reading"]]
"""Asks a member's quota endpoint for its available percentage (a bare float) or a Reading; raises on failure."""


class ProbeFailed(Exception):
    """The quota endpoint answered, but not with a usable percentage."""

    def __init__(self, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


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


def parse_reading(body: bytes) -> Reading:
    """{"available_pct": N, "resets_at": "2030-01-01T00:20:00Z"}: N in 0-100; resets_at, optional, an ISO
    8601 instant with a zone (the seed's "live probe reset")."""
    try:
        answer = json.loads(body)
        value = answer["available_pct"]
    except (ValueError, KeyError, TypeError) as err:
        raise ProbeFailed("unrecognised quota response", transient=False) from err
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 100:
        raise ProbeFailed(f"available_pct {value!r} is not a number in 0-100", transient=False)
    resets = answer.get("resets_at")
    if resets is None:
        return Reading(float(value))
    try:
        at = dt.datetime.fromisoformat(resets) if isinstance(resets, str) else None
    except ValueError:
        at = None
    if at is None or at.tzinfo is None:
        raise ProbeFailed(f"resets_at {resets!r} is not an ISO 8601 instant with a zone", transient=False)
    return Reading(float(value), at)


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
        request = urllib.request.Request(
            member.probe_url, headers={"Authorization": f"Bearer {token}", "Accept": "application/json"}
        )
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
        pct, resets_at = (reading, None) if isinstance(reading, (int, float)) else reading
        state.last_good = QuotaSnapshot(pct, self._clock(), resets_at)
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
    """429 and quota failures seen on runs, by route key; kept for `retention`."""

    def __init__(self, retention: dt.timedelta = dt.timedelta(minutes=30)) -> None:
        self.retention = retention
        self._by_key: dict[str, list[dt.datetime]] = {}

    def record(self, route_key: str, at: dt.datetime) -> None:
        kept = [t for t in self._by_key.get(route_key, []) if t >= at - self.retention]
        self._by_key[route_key] = [*kept, at]

    def recent(self, route_key: str, window: dt.timedelta, now: dt.datetime) -> list[dt.datetime]:
        """The failures of `route_key` in [now - window, now]."""
        return [t for t in self._by_key.get(route_key, []) if now - window <= t <= now]
