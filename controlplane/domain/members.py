"""The members of a tier's class and the choice among them (seed 004; DESIGN.md, Routing item 5).

Pure decisions over frozen dataclasses: start-up validation of the routing
config, effective scores with time-of-day modifiers, the capability gate, the
quota gate and the intra-kind order of sibling instances. The probes that
feed `QuotaSnapshot`s live in `controlplane.dispatch.quota`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from typing import Any, Iterable, Mapping, MutableMapping, NamedTuple, Sequence

from controlplane.domain.errors import DroverError

SUBSCRIPTION, PAY_PER_API = "Subscription", "PayPerApi"
BILLINGS = (SUBSCRIPTION, PAY_PER_API)
UNKNOWN_POLICIES = ("UseObservedFailures", "FailCautious", "FailOpen")
INTRA_KIND_POLICIES = ("MostQuotaFirst", "RoundRobin", "Sticky")
MIN_SCORE, MAX_SCORE = 0, 200
MAX_MODIFIER = 5
"""Time-of-day modifiers break ties; a bigger delta would gate, so start-up rejects it."""
UNKNOWN = -1.0
"""`QuotaSnapshot.available_pct` when the probe could not tell."""

_MEMBER_KEYS = frozenset({"agent", "instance_id", "billing", "model", "quality_score", "capabilities", "reasoning",
                          "max_concurrent", "base_url", "credential_env", "credential_file", "probe_url"})
_HHMM = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$|^24:00$")


class ConfigError(DroverError, ValueError):
    """The routing config breaks a start-up rule; the control plane refuses to start."""

    code = "INVALID_ARGUMENT"


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

    def matches(self, member: Member) -> bool:
        if self.route_key and self.route_key.lower() not in (member.route_key.lower(), member.agent):
            return False
        return not self.model or self.model == member.model

    def active(self, now: dt.datetime) -> bool:
        utc = now.astimezone(dt.timezone.utc) if now.tzinfo else now
        minute, start, end = utc.hour * 60 + utc.minute, _minutes(self.start), _minutes(self.end)
        return start <= minute < end if start < end else minute >= start or minute < end


@dataclasses.dataclass(frozen=True, kw_only=True)
class QuotaPolicy:
    """The [quota_router] table."""

    min_quota_pct: float = 10.0
    """A Subscription member with less available quota than this is skipped."""
    recheck_interval_seconds: float = 300.0
    """When every Subscription member is exhausted, the Task is re-routed after this long."""
    cache_ttl_seconds: float = 60.0
    """A probe answer is reused this long."""
    unknown_policy: str = "UseObservedFailures"
    """Unknown quota: UseObservedFailures (blocked only after a recent quota failure), FailCautious, FailOpen."""
    intra_kind_policy: str = "MostQuotaFirst"
    """Order of same-kind siblings at equal score: MostQuotaFirst, RoundRobin or Sticky."""
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

    @property
    def known(self) -> bool:
        return self.available_pct >= 0


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
    """{route_key, model, billing, base, effective, verdict}; verdict is "chosen" or why it lost."""
    message: str


# --- configuration -------------------------------------------------------------------------------------------


def parse_classes(data: Mapping[str, Any]) -> tuple[dict[str, TierClass], list[str]]:
    """Validate the routing tables of the control plane's TOML file; the classes by lower-cased id, and warnings.

    Shape (every table optional)::

        [[classes]]
        id = "sonnet"                      # the tier; unique, case-insensitive
        display_name = "Sonnet members"    # default: id
        [[classes.members]]
        agent = "anthropic"                # provider kind, required
        instance_id = "acct-a"             # or "anthropic/acct-a"; default "" (one account)
        billing = "PayPerApi"              # or "Subscription", required
        model = "claude-sonnet-5-5"        # default "": the tier's model
        quality_score = 100                # 0-200, required
        capabilities = ["sensitive"]       # default []
        reasoning = "high"                 # default ""
        max_concurrent = 4                 # default 0: unlimited
        base_url = "https://..."           # default "": the harness's
        credential_env = "ANTHROPIC_KEY_A" # or credential_file = "/path"; not both
        probe_url = "https://..."          # Subscription quota endpoint; default "": unknown

        [[modifiers]]                      # time-of-day score modifiers
        route_key = "anthropic/acct-a"     # or a bare kind, and/or model = "..."
        start = "22:00"                    # UTC
        end = "06:00"
        delta = -1                         # -5..+5

        [quota_router]                     # see QuotaPolicy for every key and its default

    The modifiers and [quota_router] are validated here too (read them with
    `parse_modifiers` and `parse_quota_router`), so one call checks the whole
    routing config at start-up. Raises ConfigError.
    """
    modifiers = parse_modifiers(data)
    parse_quota_router(data)
    specs = data.get("classes", [])
    if not isinstance(specs, list):
        raise ConfigError("classes: expected an array of tables ([[classes]])")
    classes: dict[str, TierClass] = {}
    warnings: list[str] = []
    for index, spec in enumerate(specs):
        cls = _parse_class(spec, index)
        if cls.id.lower() in classes:
            raise ConfigError(f"AgentClass '{cls.id}': duplicate class id (class ids are case-insensitive)")
        classes[cls.id.lower()] = cls
        if all(m.billing == SUBSCRIPTION for m in cls.members):
            warnings.append(f"AgentClass '{cls.id}' has no PayPerApi fallback — items may wait indefinitely")
    members = [m for cls in classes.values() for m in cls.members]
    for mod in modifiers:
        if not any(mod.matches(m) for m in members):
            warnings.append(f"modifier {_label(mod)} matches no member")
    return classes, warnings


def parse_modifiers(data: Mapping[str, Any]) -> tuple[TodModifier, ...]:
    """The [[modifiers]] array of tables; raises ConfigError."""
    out = []
    for index, spec in enumerate(data.get("modifiers", [])):
        where = f"modifier {index + 1}"
        _no_unknown_keys(spec, {"route_key", "model", "start", "end", "delta"}, where)
        route_key, model = _str(spec, "route_key", where), _str(spec, "model", where)
        if not route_key and not model:
            raise ConfigError(f"{where}: set route_key or model")
        start, end = _str(spec, "start", where), _str(spec, "end", where)
        for name, value in (("start", start), ("end", end)):
            if not _HHMM.match(value) or value == "24:00" and name == "start":
                raise ConfigError(f"{where}: {name} {value!r} is not UTC HH:MM")
        if start == end:
            raise ConfigError(f"{where}: start and end are equal; the window would be empty")
        mod = TodModifier(route_key=route_key, model=model, start=start, end=end, delta=_int(spec, "delta", where))
        if abs(mod.delta) > MAX_MODIFIER:
            raise ConfigError(f"modifier {_label(mod)}: delta {mod.delta} is outside ±{MAX_MODIFIER}; "
                              "time-of-day modifiers only break ties")
        out.append(mod)
    return tuple(out)


def parse_quota_router(data: Mapping[str, Any]) -> QuotaPolicy:
    """The [quota_router] table; raises ConfigError."""
    spec = data.get("quota_router", {})
    fields = {f.name: f for f in dataclasses.fields(QuotaPolicy)}
    _no_unknown_keys(spec, set(fields), "quota_router")
    values: dict[str, Any] = {}
    for name, value in spec.items():
        kind = fields[name].type
        if kind == "str":
            if not isinstance(value, str):
                raise ConfigError(f"quota_router.{name}: expected a string")
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ConfigError(f"quota_router.{name}: expected a number >= 0")
        elif kind == "int" and not isinstance(value, int):
            raise ConfigError(f"quota_router.{name}: expected an integer")
        values[name] = value
    policy = QuotaPolicy(**values)
    for name, allowed in (("unknown_policy", UNKNOWN_POLICIES), ("intra_kind_policy", INTRA_KIND_POLICIES)):
        if getattr(policy, name) not in allowed:
            raise ConfigError(f"quota_router.{name}: {getattr(policy, name)!r} is not one of {allowed}")
    if policy.min_quota_pct > 100:
        raise ConfigError("quota_router.min_quota_pct: expected 0-100")
    return policy


def _parse_class(spec: Any, index: int) -> TierClass:
    if not isinstance(spec, Mapping):
        raise ConfigError(f"classes[{index}]: expected a table")
    class_id = spec.get("id")
    if not isinstance(class_id, str) or not class_id.strip():
        raise ConfigError(f"classes[{index}]: id is required")
    class_id = class_id.strip()
    _no_unknown_keys(spec, {"id", "display_name", "members"}, f"AgentClass '{class_id}'")
    specs = spec.get("members", [])
    if not isinstance(specs, list) or not specs:
        raise ConfigError(f"AgentClass '{class_id}' has no members")
    members, seen = [], set()
    for order, member_spec in enumerate(specs):
        member = _parse_member(class_id, member_spec, order)
        if (member.route_key, member.model) in seen:
            raise ConfigError(
                f"AgentClass '{class_id}': duplicate member route '{member.route_key}' model '{member.model}'. "
                "Give same-kind subscriptions distinct instance_id values "
                "(legacy shadowing duplicates are rejected since #226 multi-subscription pooling).")
        seen.add((member.route_key, member.model))
        members.append(member)
    display = spec.get("display_name") or class_id
    return TierClass(class_id, tuple(members), str(display))


def _parse_member(class_id: str, spec: Any, order: int) -> Member:
    where = f"AgentClass '{class_id}': member {order + 1}"
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{where}: expected a table")
    _no_unknown_keys(spec, _MEMBER_KEYS, where)
    agent = _str(spec, "agent", where).lower()
    if not agent:
        raise ConfigError(f"{where}: agent is empty")
    raw = instance = _str(spec, "instance_id", where)
    if "/" in raw:
        prefix, _, instance = raw.partition("/")
        if prefix.lower() != agent:
            raise ConfigError(f"{where}: instance_id '{raw}' has prefix '{prefix}', which does not match "
                              f"agent '{agent}'")
    if "/" in instance or instance != instance.strip() or raw and not instance:
        raise ConfigError(f"{where}: instance_id '{raw}' is not a name or {agent}/name")
    key = f"{agent}/{instance}" if instance else agent
    where = f"AgentClass '{class_id}': member '{key}'"
    billing = {b.lower(): b for b in BILLINGS}.get(_str(spec, "billing", where).lower())
    if billing is None:
        raise ConfigError(f"{where}: billing {spec.get('billing')!r} must be Subscription or PayPerApi")
    if "quality_score" not in spec:
        raise ConfigError(f"{where} has no quality_score. Add quality_score=N ({MIN_SCORE}-{MAX_SCORE}) to it: "
                          "there is no default score, members are ranked by it")
    score = _int(spec, "quality_score", where)
    if not MIN_SCORE <= score <= MAX_SCORE:
        raise ConfigError(f"{where}: quality_score {score} is outside {MIN_SCORE}-{MAX_SCORE}")
    reasoning = _str(spec, "reasoning", where)
    if agent == "gemini" and score >= 90 and reasoning != "high":
        raise ConfigError(f"{where}: gemini members with quality_score >= 90 must have reasoning = \"high\"")
    tags = spec.get("capabilities", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise ConfigError(f"{where}: capabilities must be a list of strings")
    max_concurrent = _int(spec, "max_concurrent", where)
    if max_concurrent < 0:
        raise ConfigError(f"{where}: max_concurrent must be >= 0 (0 is unlimited)")
    member = Member(
        agent=agent, instance_id=instance, billing=billing, model=_str(spec, "model", where), quality_score=score,
        capabilities=_tags(tags), reasoning=reasoning, max_concurrent=max_concurrent,
        base_url=_str(spec, "base_url", where), credential_env=_str(spec, "credential_env", where),
        credential_file=_str(spec, "credential_file", where), probe_url=_str(spec, "probe_url", where), order=order)
    if member.credential_env and member.credential_file:
        raise ConfigError(f"{where}: set credential_env or credential_file, not both")
    return member


def _no_unknown_keys(spec: Any, allowed: set[str] | frozenset[str], where: str) -> None:
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{where}: expected a table")
    unknown = set(spec) - set(allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}")


def _str(spec: Mapping[str, Any], key: str, where: str) -> str:
    value = spec.get(key, "")
    if not isinstance(value, str):
        raise ConfigError(f"{where}: {key} must be a string")
    return value.strip()


def _int(spec: Mapping[str, Any], key: str, where: str) -> int:
    value = spec.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{where}: {key} must be an integer")
    return value


def _minutes(hhmm: str) -> int:
    hours, minutes = hhmm.split(":")
    return int(hours) * 60 + int(minutes)


def _label(mod: TodModifier) -> str:
    return f"'{'/'.join(s for s in (mod.route_key, mod.model) if s)}' {mod.start}-{mod.end}"


def _tags(tags: Iterable[str]) -> frozenset[str]:
    return frozenset(t.strip().lower() for t in tags if t.strip())


# --- decisions -----------------------------------------------------------------------------------------------


def effective_score(member: Member, modifiers: Sequence[TodModifier], now: dt.datetime) -> int:
    """Quality score plus the deltas of every modifier that matches the member and is active at `now`."""
    return member.quality_score + sum(m.delta for m in modifiers if m.matches(member) and m.active(now))


def rank(members: Sequence[Member], required_capabilities: Iterable[str], modifiers: Sequence[TodModifier],
         now: dt.datetime) -> tuple[list[Ranked], list[tuple[Member, str]]]:
    """The members holding every required tag, best first; and the others with why.

    Best first: effective score, then Subscription before PayPerApi, then config order.
    Modifiers shape preference only; they never make a member ineligible.
    """
    required = _tags(required_capabilities)
    ranked, rejected = [], []
    for member in members:
        missing = required - member.capabilities
        if missing:
            rejected.append((member, f"missing capabilities [{', '.join(sorted(missing))}]"))
        else:
            ranked.append(Ranked(member, member.quality_score, effective_score(member, modifiers, now)))
    ranked.sort(key=lambda r: (-r.effective, r.member.billing != SUBSCRIPTION, r.member.order))
    return ranked, rejected


def quota_allows(member: Member, snapshot: QuotaSnapshot, observed_failures: Sequence[dt.datetime],
                 policy: QuotaPolicy, now: dt.datetime, *, active: int = 0) -> tuple[bool, str]:
    """May a run start on `member` now, and why. `observed_failures`: its 429 or quota failures; `active`: its runs."""
    if member.max_concurrent and active >= member.max_concurrent:
        return False, "at max_concurrent"
    if member.billing == PAY_PER_API:
        return True, "PayPerApi"
    if snapshot.known:
        if snapshot.available_pct >= policy.min_quota_pct:
            return True, f"quota {snapshot.available_pct:g}%"
        return False, f"quota {snapshot.available_pct:g}% below min_quota_pct {policy.min_quota_pct:g}%"
    if policy.unknown_policy == "FailOpen":
        return True, "quota unknown (FailOpen)"
    if policy.unknown_policy == "FailCautious":
        return False, "quota unknown (FailCautious)"
    window = policy.observed_failure_window_minutes
    since = now - dt.timedelta(minutes=window)
    if any(since <= at <= now for at in observed_failures):
        return False, f"quota unknown and a quota failure in the last {window:g} min"
    return True, f"quota unknown; no quota failure in the last {window:g} min"


def intra_kind_order(ranked: Sequence[Ranked], policy: str, snapshots: Mapping[str, QuotaSnapshot],
                     rr_counters: Mapping[str, int], sticky_route_key: str = "") -> list[Ranked]:
    """Reorder same-kind siblings that tie on effective score and billing, in the places they hold.

    MostQuotaFirst: most available quota first, unknown last. RoundRobin: rotated
    by the kind's counter. Sticky: `sticky_route_key` first; if it turns out
    unusable, the quota gate moves on to the next sibling.
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
            siblings.sort(key=lambda r: -snapshots.get(r.member.route_key, QuotaSnapshot()).available_pct)
        elif policy == "RoundRobin":
            shift = rr_counters.get(kind, 0) % len(siblings)
            siblings = siblings[shift:] + siblings[:shift]
        elif policy == "Sticky":
            siblings.sort(key=lambda r: r.member.route_key != sticky_route_key)
        for index, r in zip(slots, siblings):
            out[index] = r
    return out


def select(cls: TierClass, required_capabilities: Iterable[str], modifiers: Sequence[TodModifier],
           snapshots: Mapping[str, QuotaSnapshot], observed: Mapping[str, Sequence[dt.datetime]],
           active_counts: Mapping[str, int], policy: QuotaPolicy, now: dt.datetime, sticky: str = "",
           rr_counters: MutableMapping[str, int] | None = None) -> Selection:
    """Route one Task to a member of `cls`: the first in rank (and intra-kind) order that the gates allow.

    `snapshots`, `observed` (quota failures) and `active_counts` (runs) are by
    route key; a missing snapshot is unknown. Under RoundRobin the chosen kind's
    counter in `rr_counters` advances (the caller keeps it between calls).
    """
    required = _tags(required_capabilities)
    ranked, rejected = rank(cls.members, required, modifiers, now)
    lost = [_candidate(m, effective_score(m, modifiers, now), reason) for m, reason in rejected]
    if not ranked:
        return Selection(None, "no_eligible", lost, f"ROUTING_NO_ELIGIBLE: no member of class '{cls.id}' meets "
                                                    f"RequiredCapabilities=[{', '.join(sorted(required))}]")
    counters = rr_counters if rr_counters is not None else {}
    chosen: Member | None = None
    candidates, quota_blocked = [], False
    for r in intra_kind_order(ranked, policy.intra_kind_policy, snapshots, counters, sticky):
        if chosen is not None:
            verdict = f"ranked below {chosen.route_key}"
        else:
            key = r.member.route_key
            allowed, verdict = quota_allows(r.member, snapshots.get(key, QuotaSnapshot()), observed.get(key, ()),
                                            policy, now, active=active_counts.get(key, 0))
            if allowed:
                chosen, verdict = r.member, "chosen"
            else:
                quota_blocked |= verdict != "at max_concurrent"
        candidates.append(_candidate(r.member, r.effective, verdict))
    candidates += lost
    if chosen is not None:
        if policy.intra_kind_policy == "RoundRobin":
            counters[chosen.agent] = counters.get(chosen.agent, 0) + 1
        best = next(c for c in candidates if c["verdict"] == "chosen")
        return Selection(chosen, "chosen", candidates,
                         f"class '{cls.id}': chose {chosen.route_key} model '{chosen.model}' ({chosen.billing}), "
                         f"score {best['base']}, effective {best['effective']}")
    # PayPerApi members pass the quota gate, so only max_concurrent can stop them: waiting is the only answer.
    why = (f"all Subscription members of class '{cls.id}' are exhausted" if quota_blocked
           else f"every eligible member of class '{cls.id}' is at max_concurrent")
    return Selection(None, "wait", candidates, f"{why}; recheck in {policy.recheck_interval_seconds:g} s")


def _candidate(member: Member, effective: int, verdict: str) -> dict[str, Any]:
    return {"route_key": member.route_key, "model": member.model, "billing": member.billing,
            "base": member.quality_score, "effective": effective, "verdict": verdict}
