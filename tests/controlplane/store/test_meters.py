"""Meters: which a call draws on and whether they admit it (tables), and holding and settling
shares all-or-none in the store, on SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest

from controlplane.domain import graph
from controlplane.services import change_lifecycle
from controlplane.services.projects import add_project
from controlplane.store import escrow, meters
from controlplane.store.engine import Store
from controlplane.store.escrow import Slice, Want, fits, grant_size
from controlplane.store.meters import MeterSpec
from controlplane.store.models import Change, Meter, MeterReservation, Project
from drover.errors import InvalidArgument, NotFound

NOW = dt.datetime(2026, 11, 30, 23, 59, 59, tzinfo=dt.UTC)


def test_the_meters_of_one_agent_call() -> None:
    specs = meters.meters_for(NOW, "chg_1", 5_000_000, "web", 0, "ana", 7_000_000, 10_000_000, 1000)
    assert specs == [
        MeterSpec("provider-usd:2026-11", "provider_month", "2026-11", "usd", 10_000_000),
        MeterSpec("agent-calls:2026-11-30", "agent_calls_day", "2026-11-30", "calls", 1000),
        MeterSpec("change-usd:chg_1", "change", "", "usd", 5_000_000),
        MeterSpec("project-usd:web:2026-11", "project", "2026-11", "usd", 0),
        MeterSpec("user-usd:ana:2026-11", "user", "2026-11", "usd", 7_000_000),
    ]
    assert [p.kind for p in meters.meters_for(NOW, "c", 0, "p", 0, "", 0, 0, 0)] == [
        "provider_month",
        "agent_calls_day",
        "change",
        "project",
    ]  # no submitter, no user meter


@pytest.mark.parametrize(
    "now, month, day",
    [
        (NOW, "2026-11", "2026-11-30"),
        (dt.datetime(2026, 12, 1, 0, 30, tzinfo=dt.timezone(dt.timedelta(hours=2))), "2026-11", "2026-11-30"),  # UTC
        (dt.datetime(2027, 1, 1, tzinfo=dt.UTC), "2027-01", "2027-01-01"),
    ],
)
def test_periods_are_utc(now: dt.datetime, month: str, day: str) -> None:
    specs = meters.meters_for(now, "c", 0, "p", 0, "u", 0, 0, 0)
    assert (specs[0].period, specs[1].period, specs[3].period, specs[4].period) == (month, day, month, month)
    assert meters.daily_calls_meter(meters.CLASSIFIER_CALLS_DAY, now, 200) == MeterSpec(
        f"classifier-calls:{day}", "classifier_calls_day", day, "calls", 200
    )
    assert meters.daily_calls_meter(meters.MEMORY_QUERIES_DAY, now, 9) == MeterSpec(
        f"memory-queries:{day}", "memory_queries_day", day, "calls", 9
    )


USD = MeterSpec("u", "change", "", "usd", 100)
CALLS = MeterSpec("c", "agent_calls_day", "d", "calls", 3)
FREE = MeterSpec("f", "project", "m", "usd", 0)


@pytest.mark.parametrize(
    "sl, want, admitted",
    [
        (Slice("u", granted=100, limit_seen=100), Want("u", 100, 100), True),  # exactly the grant is admitted
        (Slice("u", granted=100, limit_seen=100), Want("u", 101, 100), False),
        (Slice("u", granted=100, reserved=60, used=30, limit_seen=100), Want("u", 10, 100), True),
        (Slice("u", granted=100, reserved=60, used=30, limit_seen=100), Want("u", 11, 100), False),  # used counts
        (Slice("u", granted=100, limit_seen=100), Want("u", 10, 90), False),  # the budget moved: ask the meter
        (Slice("u", granted=100, limit_seen=100), Want("u", 10, None), True),  # a fleet meter keeps its own limit
        (Slice("u", granted=100), Want("u", 1, None), False),  # never granted (or folded): ask the meter
        (Slice("f", reserved=10**15, unbounded=True, limit_seen=0), Want("f", 10**15, 0), True),  # no limit
        (Slice("f", unbounded=True, limit_seen=0), Want("f", 1, 5), False),  # the meter gained a limit
    ],
)
def test_a_slice_admits_what_its_grant_holds(sl: Slice, want: Want, admitted: bool) -> None:
    assert fits(sl, want) is admitted


@pytest.mark.parametrize(
    "headroom, lacking, grant",
    [
        (800, 1, 100),  # an eighth of the headroom: fewer trips to the meter row
        (800, 300, 300),  # what the call lacks, when that is more
        (50, 80, 50),  # never more than the headroom (the caller refuses first)
        (7, 1, 1),
        (0, 0, 0),
    ],
)
def test_grant_size(headroom: int, lacking: int, grant: int) -> None:
    assert grant_size(headroom, lacking) == grant


@pytest.mark.parametrize(
    "key, spec",
    [
        ("provider-usd:2026-11", MeterSpec("provider-usd:2026-11", "provider_month", "2026-11", "usd", 5)),
        ("agent-calls:2026-11-30", MeterSpec("agent-calls:2026-11-30", "agent_calls_day", "2026-11-30", "calls", 5)),
        ("change-usd:chg_x", MeterSpec("change-usd:chg_x", "change", "", "usd", 5)),
        ("project-usd:a:b:2026-11", MeterSpec("project-usd:a:b:2026-11", "project", "2026-11", "usd", 5)),
        ("user-usd:ana:2026-11", MeterSpec("user-usd:ana:2026-11", "user", "2026-11", "usd", 5)),
    ],
)
def test_a_key_names_its_meter(key: str, spec: MeterSpec) -> None:
    assert meters.spec_of_key(key, 5) == spec


@pytest.mark.parametrize("key", ["", "nope:1", "change-usd:", "change-usd"])
def test_a_key_that_names_no_meter(key: str) -> None:
    with pytest.raises(InvalidArgument):
        meters.spec_of_key(key, 1)


def test_amounts_and_exact_costs() -> None:
    specs = meters.meters_for(NOW, "c", 0, "p", 0, "u", 0, 0, 0)
    assert set(meters.amounts_for(specs, 70).values()) == {70, 1}
    assert meters.amounts_for(specs, 70)["agent-calls:2026-11-30"] == 1
    assert meters.exact_for(5) == {"provider_month": 5, "change": 5, "project": 5, "user": 5}
    assert meters.usd_micros(0.1) == 100_000 and meters.usd_micros(12.5) == 12_500_000


# --- the store -----------------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path) -> Iterator[Store]:
    url = f"sqlite:///{tmp_path / 'm.db'}" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    s = Store(url)
    s.migrate()
    yield s
    s.close()


A = MeterSpec("change-usd:a", "change", "", "usd", 100)
B = MeterSpec("agent-calls:2026-11-30", "agent_calls_day", "2026-11-30", "calls", 2)


def used_reserved(store: Store) -> dict[str, tuple[int, int]]:
    return {m["key"]: (m["used"], m["reserved"]) for m in store.transaction(meters.usage)}


def test_all_meters_hold_or_none(store: Store) -> None:
    assert store.transaction(meters.reserve_on_meters, "r1", [A, B], {A.key: 60, B.key: 1}) is None
    assert used_reserved(store) == {A.key: (0, 60), B.key: (0, 1)}
    # B would admit, A would not: nothing changes anywhere.
    assert store.transaction(meters.reserve_on_meters, "r2", [B, A], {A.key: 41, B.key: 1}) == A.key
    assert used_reserved(store) == {A.key: (0, 60), B.key: (0, 1)}
    assert store.transaction(lambda s: s.query(MeterReservation).count()) == 2
    # The same reservation is held once.
    assert store.transaction(meters.reserve_on_meters, "r1", [A, B], {A.key: 60, B.key: 1}) is None
    assert used_reserved(store) == {A.key: (0, 60), B.key: (0, 1)}
    with pytest.raises(InvalidArgument):
        store.transaction(meters.reserve_on_meters, "r3", [A, B], {A.key: 1})


def test_settle_moves_reserved_to_used_once(store: Store) -> None:
    store.transaction(meters.reserve_on_meters, "r1", [A, B], {A.key: 60, B.key: 1})
    assert store.transaction(meters.settle_on_meters, "r1", meters.exact_for(25)) == 2
    assert used_reserved(store) == {A.key: (25, 0), B.key: (1, 0)}
    assert store.transaction(meters.settle_on_meters, "r1", meters.exact_for(99)) == 0  # idempotent
    assert used_reserved(store) == {A.key: (25, 0), B.key: (1, 0)}
    # An expired share settles at what it reserved.
    store.transaction(meters.reserve_on_meters, "r2", [A, B], {A.key: 70, B.key: 1})
    store.transaction(meters.settle_on_meters, "r2", {})
    assert used_reserved(store) == {A.key: (95, 0), B.key: (2, 0)}
    assert store.transaction(meters.reserve_on_meters, "r3", [B], {B.key: 1}) == B.key  # 2 calls a day


def test_usage_by_prefix(store: Store) -> None:
    store.transaction(meters.reserve_on_meters, "r1", [A, B], {A.key: 60, B.key: 1})
    assert store.transaction(meters.usage, "change-usd:") == [
        {"key": "change-usd:a", "kind": "change", "period": "", "unit": "usd", "used": 0, "reserved": 60, "limit": 100}
    ]
    assert store.transaction(meters.usage, "change_usd") == []


def submitted(store: Store, budget_usd: float) -> str:
    def make(s) -> str:
        add_project(s, "web", "")
        return change_lifecycle.submit_change(
            s, graph.ChangeSpec("web", "g", (graph.TaskSpec("t", "implement", "o"),), budget_usd=budget_usd), "ana"
        )

    return store.transaction(make)


def test_raise_limit(store: Store) -> None:
    change_id = submitted(store, 1.0)
    key = f"change-usd:{change_id}"
    spec = MeterSpec(key, "change", "", "usd", 1_000_000)
    assert store.transaction(meters.reserve_on_meters, "r1", [spec], {key: 1_000_001}) == key
    store.transaction(meters.raise_limit, key, 3_000_000)
    assert store.transaction(lambda s: s.get(Change, change_id).budget_usd) == 3.0  # the column follows
    raised = meters.spec_of_key(key, 3_000_000)
    assert store.transaction(meters.reserve_on_meters, "r1", [raised], {key: 1_000_001}) is None
    # A provider month keeps the raised limit even when the configuration still says less.
    store.transaction(meters.raise_limit, "provider-usd:2026-11", 50)
    low = MeterSpec("provider-usd:2026-11", "provider_month", "2026-11", "usd", 10)
    assert store.transaction(meters.reserve_on_meters, "r2", [low], {low.key: 40}) is None
    assert store.transaction(meters.usage, "provider-usd:")[0]["limit"] == 50
    store.transaction(meters.raise_limit, "project-usd:web:2026-11", 2_500_000)
    assert store.transaction(lambda s: s.get(Project, "web").monthly_budget_usd) == 2.5
    with pytest.raises(NotFound):
        store.transaction(meters.raise_limit, "change-usd:chg_missing", 1)
    with pytest.raises(InvalidArgument):
        store.transaction(meters.raise_limit, key, -1)


def test_classifier_calls_share_a_daily_cap(store: Store) -> None:
    spec = meters.daily_calls_meter(meters.CLASSIFIER_CALLS_DAY, NOW, 3)
    taken = [store.transaction(meters.take_call, spec, f"cls_{i}") for i in range(5)]
    assert taken == [True, True, True, False, False]
    [row] = store.transaction(meters.usage, "classifier-calls:2026-11-30")
    assert (row["used"], row["reserved"], row["limit"]) == (3, 0, 3)
    # The meter row itself holds the writer's slice: all three calls, counted in its slice.
    meter = store.transaction(lambda s: s.get(Meter, "classifier-calls:2026-11-30"))
    assert (meter.used, meter.reserved) == (0, 3) and store.transaction(escrow.violations) == []


def test_memory_queries_count_per_utc_day_and_an_operator_can_raise_the_cap(store: Store) -> None:
    late = dt.datetime(2026, 11, 30, 23, 59, tzinfo=dt.timezone(dt.timedelta(hours=-5)))  # 04:59 UTC on Dec 1
    spec = meters.daily_calls_meter(meters.MEMORY_QUERIES_DAY, late, 2)
    assert spec.key == "memory-queries:2026-12-01"
    assert [store.transaction(meters.take_call, spec, f"mq_{i}") for i in range(3)] == [True, True, False]
    next_day = meters.daily_calls_meter(meters.MEMORY_QUERIES_DAY, dt.datetime(2026, 12, 2, tzinfo=dt.UTC), 2)
    assert store.transaction(meters.take_call, next_day, "mq_next") is True
    store.transaction(meters.raise_limit, spec.key, 3)
    assert store.transaction(meters.take_call, spec, "mq_raised") is True
    assert store.transaction(meters.take_call, spec, "mq_over") is False


def test_a_lowered_limit_takes_back_every_slice_s_unused_grant(store: Store) -> None:
    change_id = submitted(store, 1.0)
    key = f"change-usd:{change_id}"
    spec = MeterSpec(key, "change", "", "usd", 1_000_000)
    assert store.transaction(meters.reserve_on_meters, "r1", [spec], {key: 100_000}) is None
    # The writer's slice took an eighth of the headroom, more than the call needed.
    assert store.transaction(lambda s: s.get(Meter, key).reserved) == 1_000_000 // 8
    store.transaction(meters.raise_limit, key, 150_000)
    assert used_reserved(store)[key] == (0, 100_000)  # what the call holds, nothing more
    assert store.transaction(lambda s: s.get(Meter, key).reserved) == 100_000  # the rest went back
    lowered = meters.spec_of_key(key, 150_000)
    assert store.transaction(meters.reserve_on_meters, "r2", [lowered], {key: 60_000}) == key
    assert store.transaction(meters.reserve_on_meters, "r3", [lowered], {key: 50_000}) is None
    store.transaction(meters.settle_on_meters, "r1", meters.exact_for(70_000))
    assert used_reserved(store)[key] == (70_000, 50_000)
    assert store.transaction(escrow.violations) == []


@pytest.mark.parametrize(
    ("purpose", "daily"),
    [
        ("classifier", ("classifier-calls:2026-11-03", meters.CLASSIFIER_CALLS_DAY, 200)),
        ("compaction", ("agent-calls:2026-11-03", meters.AGENT_CALLS_DAY, 1000)),
    ],
)
def test_the_control_plane_s_own_calls_draw_on_the_provider_month_and_their_daily_count(
    purpose: str, daily: tuple[str, str, int]
) -> None:
    now = dt.datetime(2026, 11, 3, 23, 59, tzinfo=dt.UTC)
    provider, count = meters.own_call_meters(purpose, now, 10_000_000, 1000, 200)
    assert (provider.key, provider.kind, provider.unit, provider.limit) == (
        "provider-usd:2026-11",
        meters.PROVIDER_MONTH,
        "usd",
        10_000_000,
    )
    assert (count.key, count.kind, count.limit) == daily and count.unit == "calls"
