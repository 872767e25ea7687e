"""Observed quota failures live in the database (issue 29): a failure one router (or a settle) records is
seen by another router on the same database and after a restart, on SQLite and PostgreSQL; the retention
prunes; only quota errors count."""

from __future__ import annotations

import datetime as dt
import pathlib
from collections.abc import Iterator

import pytest
from sqlalchemy import func, select

from controlplane.config import HarnessConfig
from controlplane.dispatch.quota import ObservedFailures
from controlplane.dispatch.router import Router
from controlplane.domain.members import QuotaPolicy
from controlplane.services import model_calls
from controlplane.services.notify import Notifier
from controlplane.store.engine import Store
from controlplane.store.models import QuotaFailure, Run
from controlplane.store.objects import DirectoryStore
from tests.controlplane.services.test_metering import CONFIG, running_run

T0 = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.UTC)
KEY = "anthropic/acct-a"


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[str]:
    made = f"sqlite:///{tmp_path / 'drover.db'}" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    store = Store(made)
    store.migrate()
    store.close()
    yield made


def router(store: Store, tmp_path: pathlib.Path, retention: int = 30) -> Router:
    harness = HarnessConfig(quota=QuotaPolicy(observed_failure_retention_minutes=retention))
    return Router(store, harness, Notifier(), DirectoryStore(tmp_path / "objects"), tmp_path / "mirrors")


def rows(store: Store) -> int:
    return store.transaction(lambda s: s.scalar(select(func.count()).select_from(QuotaFailure)))


async def test_a_failure_one_router_records_is_seen_by_another_and_after_a_restart(url: str, tmp_path) -> None:
    first, second = Store(url), Store(url)
    try:
        assert await router(first, tmp_path).observed.record(KEY, T0 - dt.timedelta(minutes=3), "rate_limit_error")
        seen = await router(second, tmp_path).observed.recent([KEY, "anthropic/acct-b"], dt.timedelta(minutes=10), T0)
        assert seen == {KEY: [T0 - dt.timedelta(minutes=3)], "anthropic/acct-b": []}
    finally:
        first.close()
        second.close()
    restarted = Store(url)  # a new process on the same database
    try:
        again = await router(restarted, tmp_path).observed.recent([KEY], dt.timedelta(minutes=10), T0)
        assert again == {KEY: [T0 - dt.timedelta(minutes=3)]}
    finally:
        restarted.close()


@pytest.mark.parametrize(
    "ago_minutes, key, recent",
    [
        ([3], KEY, 1),
        ([11], KEY, 0),  # outside the 10-minute window
        ([3, 9, 12], KEY, 2),
        ([3], "anthropic/acct-b", 0),  # failures are per route key
    ],
)
async def test_recent_failures_are_those_in_the_window(url: str, ago_minutes, key, recent) -> None:
    store = Store(url)
    try:
        observed = ObservedFailures(store)
        for ago in sorted(ago_minutes, reverse=True):
            await observed.record(KEY, T0 - dt.timedelta(minutes=ago))
        assert len((await observed.recent([key], dt.timedelta(minutes=10), T0))[key]) == recent
    finally:
        store.close()


@pytest.mark.parametrize("retention, kept", [(30, 2), (15, 1)])
async def test_recording_prunes_past_the_retention_which_reloads(url: str, tmp_path, retention: int, kept: int) -> None:
    store = Store(url)
    try:
        routing = router(store, tmp_path)
        routing.reconfigure(HarnessConfig(quota=QuotaPolicy(observed_failure_retention_minutes=retention)))
        await routing.observed.record("anthropic/acct-b", T0 - dt.timedelta(minutes=40))  # any member's old rows go
        for minutes_ago in (20, 0):
            await routing.observed.record(KEY, T0 - dt.timedelta(minutes=minutes_ago))
        assert len((await routing.observed.recent([KEY], dt.timedelta(hours=1), T0))[KEY]) == kept
        assert rows(store) == kept
    finally:
        store.close()


async def test_only_quota_errors_are_recorded(url: str) -> None:
    store = Store(url)
    try:
        observed = ObservedFailures(store)
        assert not await observed.record(KEY, T0, "overloaded_error")
        assert not await observed.record("", T0, "429")
        assert rows(store) == 0
    finally:
        store.close()


@pytest.mark.parametrize("error, recorded", [("rate_limit_error", 1), ("", 0), ("api_error", 0)])
def test_a_settle_with_a_quota_error_records_it_in_its_transaction(url: str, error: str, recorded: int) -> None:
    store = Store(url)
    try:
        run_id = running_run(store)
        store.transaction(lambda s: setattr(s.get(Run, run_id), "member", KEY))
        r = store.transaction(model_calls.reserve, CONFIG, run_id, "agent:1:1:1", "claude-sonnet-5-5", "agent", 100, 0)
        store.transaction(model_calls.settle, CONFIG, r.reservation_id, model_calls.Usage(), error)
        store.transaction(model_calls.settle, CONFIG, r.reservation_id, model_calls.Usage(), error)  # settled: no more
        found = store.transaction(lambda s: [(f.route_key, f.reason) for f in s.scalars(select(QuotaFailure))])
        assert found == [(KEY, error)] * recorded
    finally:
        store.close()
