"""The [quota_router] policy (seed 004's QuotaRouter) and when a Subscription member's quota window
resets, with what follows from it: the ramped floor and the DeadlineAwareDrain order of siblings.
Pure functions over frozen dataclasses.

A member's **deadline** is the sooner of two future instants: the reset its quota probe reported
(`resets_at` in the probe's answer) and the next reset declared for its agent kind in
`[quota_router.expected_resets.KIND]` (any of `timestamps`, or every `cadence_seconds` from
`cadence_anchor`). A member may have neither: then its deadline is unknown.

**Floor** (the least available quota a run may start with): with a deadline it ramps linearly from
`start_floor_pct` when the window opens (deadline - `ramp_window_seconds`) to `end_floor_pct` at the
deadline, so early in a window quota is protected and near its end it may be spent close to empty;
without one it is `min_quota_pct` (the seed's "fallback when a ramp cannot be computed").
`[quota_router.floor_by_agent.KIND]` overrides any of the four for one agent kind.

**DeadlineAwareDrain** orders siblings by the headroom at risk of being lost at the reset:

    at_risk = available_pct - 100 * (seconds left / ramp_window_seconds) / drain_aggressiveness

The subtracted term is what even pacing through the window would still hold at this point; a higher
`drain_aggressiveness` holds back less, so more of every member's headroom counts as at risk and the
member with more quota left is drained ahead of pace even when its reset is further away. Members
whose quota or deadline is unknown go after every member with both, in their previous order.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from collections.abc import Iterable, Mapping

from controlplane.domain import quota_shapes

UNKNOWN_POLICIES = ("UseObservedFailures", "FailCautious", "FailOpen")
INTRA_KIND_POLICIES = ("MostQuotaFirst", "RoundRobin", "Sticky", "DeadlineAwareDrain")
UNKNOWN = -1.0
"""`QuotaSnapshot.available_pct` when the probe could not tell."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExpectedResets:
    """Declared resets of one agent kind's quota window (`[quota_router.expected_resets.KIND]`)."""

    timestamps: tuple[dt.datetime, ...] = ()
    """One-off resets (zone-aware instants)."""
    cadence_seconds: float = 0.0
    """A recurring reset every this many seconds from `cadence_anchor` (0: none)."""
    cadence_anchor: dt.datetime | None = None

    def next_after(self, now: dt.datetime) -> dt.datetime | None:
        """The first declared reset after `now`, or None."""
        future = [t for t in self.timestamps if t > now]
        if self.cadence_seconds > 0 and self.cadence_anchor is not None:
            anchor = self.cadence_anchor
            if anchor > now:
                future.append(anchor)
            else:
                cycles = math.floor((now - anchor).total_seconds() / self.cadence_seconds) + 1
                future.append(anchor + dt.timedelta(seconds=cycles * self.cadence_seconds))
        return min(future, default=None)


@dataclasses.dataclass(frozen=True, kw_only=True)
class FloorOverride:
    """`[quota_router.floor_by_agent.KIND]`: the keys set replace the global ones for that agent kind."""

    start_floor_pct: float | None = None
    end_floor_pct: float | None = None
    min_quota_pct: float | None = None
    ramp_window_seconds: float | None = None


@dataclasses.dataclass(frozen=True)
class Floors:
    """The four floor settings that apply to one member."""

    start_floor_pct: float
    end_floor_pct: float
    min_quota_pct: float
    ramp_window_seconds: float

    def overridden(self, override: FloorOverride | None) -> Floors:
        if override is None:
            return self
        return Floors(
            *(
                mine if theirs is None else theirs
                for mine, theirs in zip(
                    dataclasses.astuple(self),
                    (
                        override.start_floor_pct,
                        override.end_floor_pct,
                        override.min_quota_pct,
                        override.ramp_window_seconds,
                    ),
                    strict=True,
                )
            )
        )


def deadline(reported: dt.datetime | None, expected: ExpectedResets | None, now: dt.datetime) -> dt.datetime | None:
    """The sooner of the probe's reported reset and the next expected one, both only when still ahead."""
    candidates: Iterable[dt.datetime | None] = (
        reported if reported is not None and reported > now else None,
        expected.next_after(now) if expected is not None else None,
    )
    return min((c for c in candidates if c is not None), default=None)


def floor_pct(floors: Floors, reset: dt.datetime | None, now: dt.datetime) -> float:
    """The floor at `now`: ramped toward the reset, or min_quota_pct when the reset is unknown."""
    if reset is None or floors.ramp_window_seconds <= 0:
        return floors.min_quota_pct
    left = (reset - now).total_seconds()
    elapsed = min(1.0, max(0.0, 1 - left / floors.ramp_window_seconds))
    return floors.start_floor_pct + (floors.end_floor_pct - floors.start_floor_pct) * elapsed


def at_risk(
    available_pct: float, reset: dt.datetime | None, now: dt.datetime, window_seconds: float, aggressiveness: float
) -> float | None:
    """Headroom at risk before the reset (percentage points), or None without a quota reading or a reset."""
    if available_pct < 0 or reset is None or window_seconds <= 0 or aggressiveness <= 0:
        return None
    left = max(0.0, (reset - now).total_seconds())
    return available_pct - 100 * min(1.0, left / window_seconds) / aggressiveness


@dataclasses.dataclass(frozen=True, kw_only=True)
class QuotaPolicy:
    """The [quota_router] table."""

    min_quota_pct: float = 10.0
    """A Subscription member with less available quota than this is skipped (when its reset is unknown)."""
    start_floor_pct: float = 25.0
    """The floor just after the member's quota window opened (its reset is known: quota_deadline)."""
    end_floor_pct: float = 3.0
    """The floor at the reset; it ramps linearly from start_floor_pct over ramp_window_seconds."""
    ramp_window_seconds: float = 604800.0
    """The quota window's length, for the ramp and DeadlineAwareDrain's pacing."""
    floor_by_agent: Mapping[str, FloorOverride] = dataclasses.field(default_factory=dict)
    """Per agent kind: any of start_floor_pct, end_floor_pct, min_quota_pct, ramp_window_seconds."""
    expected_resets: Mapping[str, ExpectedResets] = dataclasses.field(default_factory=dict)
    """Per agent kind: declared resets; the deadline is the sooner of these and the probe's resets_at."""
    drain_aggressiveness: float = 1.0
    """DeadlineAwareDrain: how far ahead of even pacing to drain (quota_deadline.at_risk)."""
    recheck_interval_seconds: float = 300.0
    """When every Subscription member is exhausted, the Task is re-routed after this long."""
    cache_ttl_seconds: float = 60.0
    """A probe answer is reused this long."""
    unknown_policy: str = "UseObservedFailures"
    """Unknown quota: UseObservedFailures (blocked only after a recent quota failure), FailCautious, FailOpen."""
    intra_kind_policy: str = "MostQuotaFirst"
    """Order of same-kind siblings at equal score: MostQuotaFirst, RoundRobin, Sticky or DeadlineAwareDrain."""
    observed_failure_window_minutes: float = 10.0
    """A 429 or quota failure blocks a member of unknown quota this long."""
    observed_failure_retention_minutes: float = 30.0
    """Observed failures are kept this long."""
    probe_max_retries: int = 2
    """Further attempts after a transient probe failure (network, timeout, 5xx)."""
    probe_retry_initial_delay_ms: int = 250
    """Backoff before the first retry; it doubles for each one after."""
    probe_max_consecutive_failures: int = 3
    """Failed probes in a row that may still answer with the last good snapshot."""
    probe_max_staleness_seconds: float = 300.0
    """Oldest last good snapshot a failed probe may answer with; older is unknown."""


@dataclasses.dataclass(frozen=True)
class QuotaSnapshot:
    """What a probe said about one route key."""

    available_pct: float = UNKNOWN
    """0-100, or -1 when unknown."""
    fetched_at: float = 0.0
    """When the answer was fetched, on the probe's clock (monotonic seconds)."""
    resets_at: dt.datetime | None = None
    """When the probe said the quota window resets (zone-aware), if it said."""
    per_model: Mapping[str, float] = dataclasses.field(default_factory=dict)
    """Available percentage of each model bucket the probe reported (`quota_shapes`)."""
    bucket: str = ""
    """The model bucket `available_pct` is of; "": the overall quota."""

    @property
    def known(self) -> bool:
        return self.available_pct >= 0

    def for_model(self, model: str) -> QuotaSnapshot:
        """What a member naming `model` is gated on: its model bucket when the probe reported one
        (`quota_shapes.model_bucket`), else the overall quota, this snapshot (also when the probe reported
        buckets, but none of this model: the account's overall limit still binds it)."""
        bucket = quota_shapes.model_bucket(self.per_model, model) if self.known else ""
        return dataclasses.replace(self, available_pct=self.per_model[bucket], bucket=bucket) if bucket else self


def member_floors(policy: QuotaPolicy, agent: str) -> Floors:
    """The floor settings of an `agent` kind member: the global ones, its floor_by_agent entry over them."""
    floors = Floors(policy.start_floor_pct, policy.end_floor_pct, policy.min_quota_pct, policy.ramp_window_seconds)
    return floors.overridden(policy.floor_by_agent.get(agent))


def member_deadline(policy: QuotaPolicy, agent: str, snapshot: QuotaSnapshot, now: dt.datetime) -> dt.datetime | None:
    """When a member's quota window resets next: its probe's word or its kind's expected resets, the sooner."""
    return deadline(snapshot.resets_at, policy.expected_resets.get(agent), now)
