"""Seed 004's QuotaRouter table, key by key, with the seed's own numbers (its sample config: MinQuotaPct 10,
StartFloorPct 25, EndFloorPct 3, RampWindowSeconds 604800, FloorByAgent codex {1, 0, 1}, ExpectedResets
codex anchored at 2030-01-01T00:20:00Z every 604800 s, DrainAggressiveness 1.0, ...), and DeadlineAwareDrain.
The probe keys (QuotaCacheTtlSeconds and the Probe* four) are tested against a real HTTP endpoint in
tests/controlplane/dispatch/test_quota.py; the names in Drover's TOML are snake_case."""

from __future__ import annotations

import datetime as dt

import pytest

from controlplane.dispatch.quota import ProbeFailed, parse_reading
from controlplane.domain.member_config import parse_quota_router
from controlplane.domain.members import Member, QuotaPolicy, QuotaSnapshot, TierClass, select
from controlplane.domain.quota_deadline import ExpectedResets, deadline, floor_pct, member_floors

ANCHOR = dt.datetime(2030, 1, 1, 0, 20, tzinfo=dt.UTC)
WEEK = 604800.0
SEED = parse_quota_router(
    {
        "quota_router": {
            "min_quota_pct": 10,
            "start_floor_pct": 25,
            "end_floor_pct": 3,
            "ramp_window_seconds": 604800,
            "floor_by_agent": {"codex": {"start_floor_pct": 1, "end_floor_pct": 0, "min_quota_pct": 1}},
            "recheck_interval_seconds": 300,
            "cache_ttl_seconds": 60,
            "unknown_policy": "UseObservedFailures",
            "intra_kind_policy": "MostQuotaFirst",
            "drain_aggressiveness": 1.0,
            "expected_resets": {
                "codex": {"timestamps": ["2030-01-01T00:20:00Z"], "cadence_seconds": 604800, "cadence_anchor": ANCHOR}
            },
            "observed_failure_window_minutes": 10,
            "observed_failure_retention_minutes": 30,
            "probe_max_retries": 2,
            "probe_retry_initial_delay_ms": 250,
            "probe_max_consecutive_failures": 3,
            "probe_max_staleness_seconds": 300,
        }
    }
)


def sub(agent: str, instance: str = "") -> Member:
    return Member(agent=agent, instance_id=instance, billing="Subscription", quality_score=100)


def gate(agent: str, pct: float, now: dt.datetime, policy: QuotaPolicy = SEED, resets_at=None) -> str:
    """The verdict of the quota gate for one member of `agent` kind at `pct` available."""
    m = sub(agent)
    chosen = select(
        TierClass("c", (m,)), (), (), {m.route_key: QuotaSnapshot(pct, 0.0, resets_at)}, {}, {}, policy, now
    )
    return chosen.candidates[0]["verdict"]


def before_reset(seconds: float) -> dt.datetime:
    """`seconds` before the seed's reset of 2030-01-08T00:20Z (one cadence after the anchor)."""
    return ANCHOR + dt.timedelta(seconds=WEEK - seconds)


def test_the_seed_sample_parses_whole() -> None:
    assert SEED.expected_resets["codex"].cadence_anchor == ANCHOR
    assert SEED.floor_by_agent["codex"].min_quota_pct == 1.0
    assert SEED.floor_by_agent["codex"].ramp_window_seconds is None  # omitted fields use the global values


@pytest.mark.parametrize("pct, allowed", [(9.5, False), (10.0, True), (55.0, True)])
def test_min_quota_pct_is_the_floor_when_no_reset_is_known(pct: float, allowed: bool) -> None:
    # claude has no expected resets and its probe said none: the ramp cannot be computed.
    verdict = gate("claude", pct, ANCHOR + dt.timedelta(days=3))
    assert (verdict == "chosen") is allowed, verdict
    if not allowed:
        assert "below min_quota_pct 10%" in verdict


@pytest.mark.parametrize(
    "left_seconds, floor",
    [
        (WEEK, 25.0),  # the window just opened: StartFloorPct
        (WEEK * 2, 25.0),  # the reset is more than a window away: still the start floor
        (WEEK / 2, 14.0),  # half way: (25 + 3) / 2
        (0.0, 3.0),  # at the reset: EndFloorPct
    ],
)
def test_start_and_end_floor_pct_ramp_over_ramp_window_seconds(left_seconds: float, floor: float) -> None:
    reset = dt.datetime(2030, 2, 1, tzinfo=dt.UTC)
    now = reset - dt.timedelta(seconds=left_seconds)
    assert floor_pct(member_floors(SEED, "claude"), reset, now) == pytest.approx(floor)


@pytest.mark.parametrize("pct, allowed", [(24.0, False), (25.0, True)])
def test_start_floor_pct_protects_a_window_that_just_opened(pct: float, allowed: bool) -> None:
    now = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    reset = now + dt.timedelta(seconds=WEEK)  # the probe says so
    verdict = gate("claude", pct, now, resets_at=reset)
    assert (verdict == "chosen") is allowed, verdict
    if not allowed:
        assert verdict.startswith("quota 24% below the floor 25% (ramping to 3% at the reset 2030-01-08T00:00:00")


@pytest.mark.parametrize("pct, allowed", [(2.9, False), (3.1, True)])
def test_end_floor_pct_lets_quota_run_low_as_the_reset_approaches(pct: float, allowed: bool) -> None:
    reset = dt.datetime(2030, 1, 8, tzinfo=dt.UTC)
    assert (gate("claude", pct, reset - dt.timedelta(seconds=1), resets_at=reset) == "chosen") is allowed


@pytest.mark.parametrize(
    "window, left_seconds, floor",
    [
        (86400.0, 2 * 86400, 25.0),  # a one-day window that has not opened yet
        (86400.0, 43200, 14.0),  # half of it left
        (WEEK, 43200, 3.0 + 22.0 * 43200 / WEEK),  # the same moment in a week-long window
    ],
)
def test_ramp_window_seconds_is_the_windows_length(window: float, left_seconds: float, floor: float) -> None:
    policy = parse_quota_router({"quota_router": {"ramp_window_seconds": window}})
    reset = dt.datetime(2030, 2, 1, tzinfo=dt.UTC)
    assert floor_pct(member_floors(policy, "claude"), reset, reset - dt.timedelta(seconds=left_seconds)) == (
        pytest.approx(floor)
    )


@pytest.mark.parametrize(
    "agent, pct, now, allowed",
    [
        ("codex", 2.0, before_reset(WEEK / 2), True),  # codex burns close to empty: its floor ramps 1 -> 0
        ("claude", 2.0, before_reset(WEEK / 2), False),  # an omitted claude keeps the global ramp (its min 10)
        ("codex", 0.5, before_reset(WEEK - 1), False),  # just after codex's reset: its start floor 1
        ("codex", 0.5, before_reset(60), True),  # close to the reset: codex's end floor 0
    ],
)
def test_floor_by_agent_overrides_the_floors_of_one_agent_kind(
    agent: str, pct: float, now: dt.datetime, allowed: bool
) -> None:
    assert (gate(agent, pct, now) == "chosen") is allowed


@pytest.mark.parametrize("seconds", [300, 60])
def test_quota_recheck_interval_seconds_is_when_an_exhausted_class_is_routed_again(seconds: int) -> None:
    policy = parse_quota_router({"quota_router": {"recheck_interval_seconds": seconds}})
    m = sub("claude")
    waiting = select(TierClass("c", (m,)), (), (), {m.route_key: QuotaSnapshot(5.0)}, {}, {}, policy, ANCHOR)
    assert waiting.outcome == "wait"
    assert waiting.message.endswith(f"recheck in {seconds} s")


@pytest.mark.parametrize(
    "policy, failure_minutes_ago, allowed",
    [
        ("UseObservedFailures", None, True),  # unknown and nothing seen: allowed
        ("UseObservedFailures", 3, False),  # a quota failure 3 minutes ago blocks it
        ("FailCautious", None, False),
        ("FailOpen", 3, True),
    ],
)
def test_unknown_policy(policy: str, failure_minutes_ago: int | None, allowed: bool) -> None:
    m, now = sub("claude"), ANCHOR
    seen = {m.route_key: [now - dt.timedelta(minutes=failure_minutes_ago)]} if failure_minutes_ago else {}
    quota = parse_quota_router({"quota_router": {"unknown_policy": policy}})
    chosen = select(TierClass("c", (m,)), (), (), {m.route_key: QuotaSnapshot()}, seen, {}, quota, now)
    assert (chosen.outcome == "chosen") is allowed


@pytest.mark.parametrize("window, minutes_ago, allowed", [(10, 6, False), (5, 6, True), (10, 11, True)])
def test_observed_failure_window_minutes(window: int, minutes_ago: int, allowed: bool) -> None:
    m, now = sub("claude"), ANCHOR
    quota = parse_quota_router({"quota_router": {"observed_failure_window_minutes": window}})
    seen = {m.route_key: [now - dt.timedelta(minutes=minutes_ago)]}
    chosen = select(TierClass("c", (m,)), (), (), {m.route_key: QuotaSnapshot()}, seen, {}, quota, now)
    assert (chosen.outcome == "chosen") is allowed


@pytest.mark.parametrize(
    "now, expected",
    [
        (ANCHOR - dt.timedelta(days=1), ANCHOR),  # before the anchor: the anchor (and the timestamp)
        (ANCHOR, ANCHOR + dt.timedelta(seconds=WEEK)),  # at a reset, the next one
        (dt.datetime(2030, 1, 3, tzinfo=dt.UTC), ANCHOR + dt.timedelta(seconds=WEEK)),
        (dt.datetime(2030, 1, 20, tzinfo=dt.UTC), ANCHOR + dt.timedelta(seconds=3 * WEEK)),
    ],
)
def test_expected_resets_timestamps_and_cadence(now: dt.datetime, expected: dt.datetime) -> None:
    assert SEED.expected_resets["codex"].next_after(now) == expected


def test_the_deadline_is_the_sooner_of_the_probes_reset_and_the_expected_one() -> None:
    expected = ExpectedResets(cadence_seconds=WEEK, cadence_anchor=ANCHOR)
    now = dt.datetime(2030, 1, 3, tzinfo=dt.UTC)
    sooner = dt.datetime(2030, 1, 4, tzinfo=dt.UTC)
    assert deadline(sooner, expected, now) == sooner
    assert deadline(dt.datetime(2030, 1, 9, tzinfo=dt.UTC), expected, now) == ANCHOR + dt.timedelta(seconds=WEEK)
    assert deadline(dt.datetime(2030, 1, 2, tzinfo=dt.UTC), None, now) is None  # a reset in the past says nothing
    assert deadline(None, None, now) is None


# --- DeadlineAwareDrain ----------------------------------------------------------------------------------

NOW = dt.datetime(2030, 1, 3, tzinfo=dt.UTC)
A, B, C = sub("codex", "acct-a"), sub("codex", "acct-b"), sub("codex", "acct-c")


def drained(snapshots: dict[str, QuotaSnapshot], aggressiveness: float = 1.0) -> list[str]:
    policy = parse_quota_router(
        {"quota_router": {"intra_kind_policy": "DeadlineAwareDrain", "drain_aggressiveness": aggressiveness}}
    )
    chosen = select(TierClass("c", (A, B, C)), (), (), snapshots, {}, {}, policy, NOW)
    return [c["route_key"] for c in chosen.candidates]


def resets_in(days: float) -> dt.datetime:
    return NOW + dt.timedelta(days=days)


@pytest.mark.parametrize(
    "aggressiveness, order",
    [
        # a: 60 % left, resets in 1 day (at risk 60 - 14.3); b: 90 % left, resets in 6 days (90 - 85.7)
        (1.0, ["codex/acct-a", "codex/acct-b", "codex/acct-c"]),
        # drained harder: pacing holds back a quarter as much; b's 90 % is more at risk (68.6 against 56.4)
        (4.0, ["codex/acct-b", "codex/acct-a", "codex/acct-c"]),
    ],
)
def test_deadline_aware_drain_spends_first_what_the_reset_would_waste(aggressiveness: float, order: list[str]) -> None:
    snapshots = {
        "codex/acct-a": QuotaSnapshot(60.0, 0.0, resets_in(1)),
        "codex/acct-b": QuotaSnapshot(90.0, 0.0, resets_in(6)),
        "codex/acct-c": QuotaSnapshot(),  # unknown: behind every member with a reading and a deadline
    }
    assert drained(snapshots, aggressiveness) == order


def test_members_without_a_deadline_fall_behind_deadline_aware_ones() -> None:
    snapshots = {
        "codex/acct-a": QuotaSnapshot(95.0),  # full, but no reset known (no probe reset; codex has no expected one)
        "codex/acct-b": QuotaSnapshot(20.0, 0.0, resets_in(0.5)),
        "codex/acct-c": QuotaSnapshot(50.0, 0.0, resets_in(3)),
    }
    assert drained(snapshots) == ["codex/acct-b", "codex/acct-c", "codex/acct-a"]


@pytest.mark.parametrize(
    "declared, chosen",
    [
        # no declared reset: acct-b has no deadline and falls behind acct-a, whose probe says 5 days
        ({}, "codex/acct-a"),
        # codex declares a reset in 12 hours: both have it, and acct-b's 70 % is the more at risk
        ({"codex": {"timestamps": ["2030-01-03T12:00:00Z"]}}, "codex/acct-b"),
    ],
)
def test_deadline_aware_drain_takes_the_expected_resets_of_the_kind(declared: dict, chosen: str) -> None:
    policy = parse_quota_router(
        {"quota_router": {"intra_kind_policy": "DeadlineAwareDrain", "expected_resets": declared}}
    )
    snapshots = {"codex/acct-a": QuotaSnapshot(40.0, 0.0, resets_in(5)), "codex/acct-b": QuotaSnapshot(70.0)}
    selection = select(TierClass("c", (A, B)), (), (), snapshots, {}, {}, policy, NOW)
    assert selection.chosen is not None and selection.chosen.route_key == chosen


def test_the_probe_reports_its_reset() -> None:
    assert parse_reading(b'{"available_pct": 42, "resets_at": "2030-01-08T00:20:00Z"}').resets_at == (
        ANCHOR + dt.timedelta(seconds=WEEK)
    )
    assert parse_reading(b'{"available_pct": 42}').resets_at is None
    for bad in (b'{"available_pct": 42, "resets_at": "tomorrow"}', b'{"available_pct": 42, "resets_at": 5}'):
        with pytest.raises(ProbeFailed, match="resets_at"):
            parse_reading(bad)
