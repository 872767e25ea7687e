"""The members of a tier's class and the choice among them (seed 004; DESIGN.md, Routing item 5).

Pure decisions over frozen dataclasses (the config they come from is checked in
`member_config`): effective scores with time-of-day modifiers, the capability gate, the
quota gate and the intra-kind order of sibling instances. The probes that
feed `QuotaSnapshot`s live in `controlplane.dispatch.quota`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from typing import Any, NamedTuple

from controlplane.domain import quota_deadline
from controlplane.domain.graph import RUNTIMES
from controlplane.domain.quota_deadline import INTRA_KIND_POLICIES as INTRA_KIND_POLICIES
from controlplane.domain.quota_deadline import UNKNOWN as UNKNOWN
from controlplane.domain.quota_deadline import UNKNOWN_POLICIES as UNKNOWN_POLICIES
from controlplane.domain.quota_deadline import QuotaPolicy as QuotaPolicy
from controlplane.domain.quota_deadline import QuotaSnapshot as QuotaSnapshot
from controlplane.domain.quota_deadline import member_deadline, member_floors

SUBSCRIPTION, PAY_PER_API = "Subscription", "PayPerApi"
BILLINGS = (SUBSCRIPTION, PAY_PER_API)
MIN_SCORE, MAX_SCORE = 0, 200
MAX_MODIFIER = 5
"""Time-of-day modifiers break ties; a bigger delta would gate, so start-up rejects it."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Member:
    """One way to serve a tier: a provider kind, an account on it and a model."""

    agent: str
    """Provider kind, lower case, e.g. "anthropic"."""
    instance_id: str = ""
    """Account of that kind, e.g. "acct-a"; "" for a single-account kind."""
    billing: str
    """"Subscription" (quota per period, probed) or "PayPerApi" (metered, never waits)."""
    model: str = ""
    """Messages API model id; "" means the tier's model."""
    quality_score: int
    """0-200, operator-curated; higher is preferred. No default."""
    capabilities: frozenset[str] = frozenset()
    """Lower-cased clearance tags; a Task is routed only to members holding every tag it requires."""
    reasoning: str = ""
    """Reasoning knob for the model, e.g. "high"."""
    max_concurrent: int = 0
    """Runs at once on this member; 0 is unlimited."""
    base_url: str = ""
    """Messages API base URL; "" means the harness's."""
    credential_env: str = ""
    """Environment variable holding this member's API key or token."""
    credential_file: str = ""
    """File holding this member's API key or token (alternative to credential_env)."""
    probe_url: str = ""
    """A Subscription member's quota endpoint; "" means its quota is always unknown."""
    order: int = 0
    """Index in the class's config; the last tie-break."""
    runtimes: frozenset[str] = frozenset(RUNTIMES)
    """The runtimes this member serves (harness, claude-code, opencode); default all of them."""

    @property
    def route_key(self) -> str:
        """Quota, concurrency and failures are tracked under this key: "anthropic" or "anthropic/acct-a"."""
        return f"{self.agent}/{self.instance_id}" if self.instance_id else self.agent


@dataclasses.dataclass(frozen=True)
class TierClass:
    """The members that can serve one tier (haiku, sonnet, opus)."""

    id: str
    members: tuple[Member, ...]
    display_name: str = ""

    def describe(self) -> str:
        """The start-up log line: AgentClass 'sonnet' resolved members: [anthropic/acct-a/m(Subscription), ...]."""
        listed = ", ".join(f"{m.route_key}/{m.model or '-'}({m.billing})" for m in self.members)
        return f"AgentClass '{self.id}' resolved members: [{listed}]"


@dataclasses.dataclass(frozen=True, kw_only=True)
class TodModifier:
    """A score delta for matching members during a daily UTC window [start, end); end < start wraps midnight."""

    route_key: str = ""
    """A route key ("anthropic/acct-a") or a bare kind ("anthropic", every instance); "" matches any."""
    model: str = ""
    """A model id; "" matches any. At least one of route_key and model is set."""
    start: str
    """UTC "HH:MM"."""
    end: str
    """UTC "HH:MM"; "24:00" is midnight at the end of the day."""
    delta: int
    """-5..+5."""

    @property
    def name(self) -> str:
        """How events and receipts name it: "anthropic/acct-a 22:00-06:00 -1"."""
        return f"{'/'.join(s for s in (self.route_key, self.model) if s)} {self.start}-{self.end} {self.delta:+d}"

    def matches(self, member: Member) -> bool:
        if self.route_key and self.route_key.lower() not in (member.route_key.lower(), member.agent):
            return False
        return not self.model or self.model == member.model

    def active(self, now: dt.datetime) -> bool:
        utc = now.astimezone(dt.UTC) if now.tzinfo else now
        minute, start, end = utc.hour * 60 + utc.minute, _minutes(self.start), _minutes(self.end)
        return start <= minute < end if start < end else minute >= start or minute < end


class Ranked(NamedTuple):
    member: Member
    base: int
    effective: int


@dataclasses.dataclass(frozen=True)
class Selection:
    """The outcome of routing one Task to a member, with every candidate for the Decision Receipt."""

    chosen: Member | None
    outcome: str
    """"chosen", "no_eligible" (the Task fails with ROUTING_NO_ELIGIBLE) or "wait" (re-route later)."""
    candidates: list[dict[str, Any]]
    """{route_key, model, billing, base, effective, modifiers, verdict}: modifiers names the time-of-day
    modifiers applied (`TodModifier.name`); verdict is "chosen" or why it lost."""
    message: str


# --- configuration -------------------------------------------------------------------------------------------


def _minutes(hhmm: str) -> int:
    hours, minutes = hhmm.split(":")
    return int(hours) * 60 + int(minutes)


# --- decisions -----------------------------------------------------------------------------------------------


def tag_set(values: Iterable[str]) -> frozenset[str]:
    """Capability and reasoning tags compare trimmed and in lower case."""
    return frozenset(t.strip().lower() for t in values if t.strip())


def effective_score(member: Member, modifiers: Sequence[TodModifier], now: dt.datetime) -> int:
    """Quality score plus the deltas of every modifier that matches the member and is active at `now`."""
    return member.quality_score + sum(m.delta for m in applied_modifiers(member, modifiers, now))


def applied_modifiers(member: Member, modifiers: Sequence[TodModifier], now: dt.datetime) -> list[TodModifier]:
    """The modifiers that match the member and are active at `now`, in config order."""
    return [m for m in modifiers if m.matches(member) and m.active(now)]


def rank(
    members: Sequence[Member],
    required_capabilities: Iterable[str],
    modifiers: Sequence[TodModifier],
    now: dt.datetime,
    runtime: str = "harness",
) -> tuple[list[Ranked], list[tuple[Member, str]]]:
    """The members holding every required tag, best first; and the others with why.

    Best first: effective score, then Subscription before PayPerApi, then config order.
    Modifiers shape preference only; they never make a member ineligible.
    """
    required = tag_set(required_capabilities)
    ranked, rejected = [], []
    for member in members:
        missing = required - member.capabilities
        if runtime not in member.runtimes:
            rejected.append((member, f"does not serve runtime {runtime}"))
        elif missing:
            rejected.append((member, f"missing capabilities [{', '.join(sorted(missing))}]"))
        else:
            ranked.append(Ranked(member, member.quality_score, effective_score(member, modifiers, now)))
    ranked.sort(key=lambda r: (-r.effective, r.member.billing != SUBSCRIPTION, r.member.order))
    return ranked, rejected


def quota_allows(
    member: Member,
    snapshot: QuotaSnapshot,
    observed_failures: Sequence[dt.datetime],
    policy: QuotaPolicy,
    now: dt.datetime,
    *,
    active: int = 0,
) -> tuple[bool, str]:
    """May a run start on `member` now, and why. `observed_failures`: its 429 or quota failures; `active`: its runs."""
    if member.max_concurrent and active >= member.max_concurrent:
        return False, "at max_concurrent"
    if member.billing == PAY_PER_API:
        return True, "PayPerApi"
    snapshot = snapshot.for_model(member.model)  # its model's bucket when the probe reported one
    if snapshot.known:
        floors, reset = member_floors(policy, member.agent), member_deadline(policy, member.agent, snapshot, now)
        floor = quota_deadline.floor_pct(floors, reset, now)
        quota = " ".join(filter(None, ("quota", snapshot.bucket, f"{snapshot.available_pct:g}%")))
        if snapshot.available_pct >= floor:
            return True, quota
        if reset is None:
            return False, f"{quota} below min_quota_pct {floor:g}%"
        return False, (
            f"{quota} below the floor {floor:.3g}% "
            f"(ramping to {floors.end_floor_pct:g}% at the reset {reset.isoformat()})"
        )
    if policy.unknown_policy == "FailOpen":
        return True, "quota unknown (FailOpen)"
    if policy.unknown_policy == "FailCautious":
        return False, "quota unknown (FailCautious)"
    window = policy.observed_failure_window_minutes
    since = now - dt.timedelta(minutes=window)
    if any(since <= at <= now for at in observed_failures):
        return False, f"quota unknown and a quota failure in the last {window:g} min"
    return True, f"quota unknown; no quota failure in the last {window:g} min"


def drain_scores(
    ranked: Sequence[Ranked], snapshots: Mapping[str, QuotaSnapshot], policy: QuotaPolicy, now: dt.datetime
) -> dict[str, float | None]:
    """DeadlineAwareDrain's headroom at risk by route key (None: quota or deadline unknown)."""
    scores: dict[str, float | None] = {}
    for r in ranked:
        snapshot = _gated(snapshots, r.member)
        reset = member_deadline(policy, r.member.agent, snapshot, now)
        window = member_floors(policy, r.member.agent).ramp_window_seconds
        scores[r.member.route_key] = quota_deadline.at_risk(
            snapshot.available_pct, reset, now, window, policy.drain_aggressiveness
        )
    return scores


def _gated(snapshots: Mapping[str, QuotaSnapshot], member: Member) -> QuotaSnapshot:
    return snapshots.get(member.route_key, QuotaSnapshot()).for_model(member.model)


def intra_kind_order(
    ranked: Sequence[Ranked],
    policy: str,
    snapshots: Mapping[str, QuotaSnapshot],
    rr_counters: Mapping[str, int],
    sticky_route_key: str = "",
    drain: Mapping[str, float | None] | None = None,
) -> list[Ranked]:
    """Reorder same-kind siblings that tie on effective score and billing, in the places they hold.

    MostQuotaFirst: most available quota first, unknown last. RoundRobin: rotated
    by the kind's counter. Sticky: `sticky_route_key` first; if it turns out
    unusable, the quota gate moves on to the next sibling. DeadlineAwareDrain: most
    headroom at risk first (`drain`, from `drain_scores`), unknown after, as they were.
    """
    out = list(ranked)
    groups: dict[tuple[int, str, str], list[int]] = {}
    for index, r in enumerate(out):
        groups.setdefault((r.effective, r.member.billing, r.member.agent), []).append(index)
    for (_, _, kind), slots in groups.items():
        if len(slots) < 2:
            continue
        siblings = [out[i] for i in slots]
        if policy == "MostQuotaFirst":
            siblings.sort(key=lambda r: -_gated(snapshots, r.member).available_pct)
        elif policy == "RoundRobin":
            shift = rr_counters.get(kind, 0) % len(siblings)
            siblings = siblings[shift:] + siblings[:shift]
        elif policy == "Sticky":
            siblings.sort(key=lambda r: r.member.route_key != sticky_route_key)
        elif policy == "DeadlineAwareDrain":
            risk = drain or {}
            siblings.sort(key=lambda r: (risk.get(r.member.route_key) is None, -(risk.get(r.member.route_key) or 0.0)))
        for index, r in zip(slots, siblings, strict=True):
            out[index] = r
    return out


def select(
    cls: TierClass,
    required_capabilities: Iterable[str],
    modifiers: Sequence[TodModifier],
    snapshots: Mapping[str, QuotaSnapshot],
    observed: Mapping[str, Sequence[dt.datetime]],
    active_counts: Mapping[str, int],
    policy: QuotaPolicy,
    now: dt.datetime,
    sticky: str = "",
    rr_counters: MutableMapping[str, int] | None = None,
    runtime: str = "harness",
) -> Selection:
    """Route one Task to a member of `cls`: the first in rank (and intra-kind) order that the gates allow.

    `snapshots`, `observed` (quota failures) and `active_counts` (runs) are by
    route key; a missing snapshot is unknown. Under RoundRobin the chosen kind's
    counter in `rr_counters` advances (the caller keeps it between calls).
    """
    required = tag_set(required_capabilities)
    ranked, rejected = rank(cls.members, required, modifiers, now, runtime)
    lost = [_candidate(m, modifiers, now, reason) for m, reason in rejected]
    if not ranked:
        return Selection(
            None,
            "no_eligible",
            lost,
            f"ROUTING_NO_ELIGIBLE: no member of class '{cls.id}' meets "
            f"RequiredCapabilities=[{', '.join(sorted(required))}]"
            + (f" and serves runtime {runtime}" if runtime != "harness" else ""),
        )
    counters = rr_counters if rr_counters is not None else {}
    drain = drain_scores(ranked, snapshots, policy, now) if policy.intra_kind_policy == "DeadlineAwareDrain" else None
    ordered = intra_kind_order(ranked, policy.intra_kind_policy, snapshots, counters, sticky, drain)
    chosen, candidates, quota_blocked = _first_allowed(
        ordered, snapshots, observed, active_counts, policy, now, modifiers
    )
    candidates += lost
    if chosen is not None:
        if policy.intra_kind_policy == "RoundRobin":
            counters[chosen.agent] = counters.get(chosen.agent, 0) + 1
        best = next(c for c in candidates if c["verdict"] == "chosen")
        return Selection(
            chosen,
            "chosen",
            candidates,
            f"class '{cls.id}': chose {chosen.route_key} model '{chosen.model}' ({chosen.billing}), "
            f"score {best['base']}, effective {best['effective']}",
        )
    # PayPerApi members pass the quota gate, so only max_concurrent can stop them: waiting is the only answer.
    why = (
        f"all Subscription members of class '{cls.id}' are exhausted"
        if quota_blocked
        else f"every eligible member of class '{cls.id}' is at max_concurrent"
    )
    return Selection(None, "wait", candidates, f"{why}; recheck in {policy.recheck_interval_seconds:g} s")


def _first_allowed(
    ordered: Sequence[Ranked],
    snapshots: Mapping[str, QuotaSnapshot],
    observed: Mapping[str, Sequence[dt.datetime]],
    active_counts: Mapping[str, int],
    policy: QuotaPolicy,
    now: dt.datetime,
    modifiers: Sequence[TodModifier],
) -> tuple[Member | None, list[dict[str, Any]], bool]:
    """The first member the quota gate allows, every candidate with its verdict, and whether a quota (not
    max_concurrent) stopped any."""
    chosen: Member | None = None
    candidates, quota_blocked = [], False
    for r in ordered:
        if chosen is not None:
            verdict = f"ranked below {chosen.route_key}"
        else:
            key = r.member.route_key
            allowed, verdict = quota_allows(
                r.member,
                snapshots.get(key, QuotaSnapshot()),
                observed.get(key, ()),
                policy,
                now,
                active=active_counts.get(key, 0),
            )
            if allowed:
                chosen, verdict = r.member, "chosen"
            else:
                quota_blocked |= verdict != "at max_concurrent"
        candidates.append(_candidate(r.member, modifiers, now, verdict))
    return chosen, candidates, quota_blocked


def _candidate(member: Member, modifiers: Sequence[TodModifier], now: dt.datetime, verdict: str) -> dict[str, Any]:
    applied = applied_modifiers(member, modifiers, now)
    return {
        "route_key": member.route_key,
        "model": member.model,
        "billing": member.billing,
        "base": member.quality_score,
        "effective": member.quality_score + sum(m.delta for m in applied),
        "modifiers": [m.name for m in applied],
        "verdict": verdict,
    }
