"""The [[classes]], [[modifiers]] and [quota_router] tables of the control plane's TOML, checked at
start-up with seed 004's rules and messages (an invalid config stops the start; a hot reload with one
keeps the running config)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Mapping
from typing import Any

from controlplane.domain.graph import RUNTIMES
from controlplane.domain.members import (
    BILLINGS,
    INTRA_KIND_POLICIES,
    MAX_MODIFIER,
    MAX_SCORE,
    MIN_SCORE,
    SUBSCRIPTION,
    UNKNOWN_POLICIES,
    Member,
    QuotaPolicy,
    TierClass,
    TodModifier,
    tag_set,
)
from controlplane.domain.quota_deadline import ExpectedResets, FloorOverride
from controlplane.domain.reasoning import reasoning_problem
from drover.errors import DroverError

_MEMBER_KEYS = frozenset(
    {
        "agent",
        "instance_id",
        "billing",
        "model",
        "quality_score",
        "capabilities",
        "reasoning",
        "max_concurrent",
        "base_url",
        "credential_env",
        "credential_file",
        "probe_url",
        "runtimes",
    }
)


_HHMM = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$|^24:00$")


class ConfigError(DroverError, ValueError):
    """The routing config breaks a start-up rule; the control plane refuses to start."""

    code = "INVALID_ARGUMENT"


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
        runtimes = ["claude-code"]         # the runtimes it serves; default all: harness, claude-code, opencode

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
            if not _HHMM.match(value) or (value == "24:00" and name == "start"):
                raise ConfigError(f"{where}: {name} {value!r} is not UTC HH:MM")
        if start == end:
            raise ConfigError(f"{where}: start and end are equal; the window would be empty")
        mod = TodModifier(route_key=route_key, model=model, start=start, end=end, delta=_int(spec, "delta", where))
        if abs(mod.delta) > MAX_MODIFIER:
            raise ConfigError(
                f"modifier {_label(mod)}: delta {mod.delta} is outside ±{MAX_MODIFIER}; "
                "time-of-day modifiers only break ties"
            )
        out.append(mod)
    return tuple(out)


def parse_quota_router(data: Mapping[str, Any]) -> QuotaPolicy:
    """The [quota_router] table; raises ConfigError."""
    spec = dict(data.get("quota_router", {}))
    fields = {f.name: f for f in dataclasses.fields(QuotaPolicy)}
    _no_unknown_keys(spec, set(fields), "quota_router")
    values: dict[str, Any] = {
        "floor_by_agent": _per_agent(spec.pop("floor_by_agent", {}), "floor_by_agent", _floor_override),
        "expected_resets": _per_agent(spec.pop("expected_resets", {}), "expected_resets", _expected_resets),
    }
    for name, value in spec.items():
        values[name] = _scalar(f"quota_router.{name}", value, fields[name].type)
    policy = QuotaPolicy(**values)
    for name, allowed in (("unknown_policy", UNKNOWN_POLICIES), ("intra_kind_policy", INTRA_KIND_POLICIES)):
        if getattr(policy, name) not in allowed:
            raise ConfigError(f"quota_router.{name}: {getattr(policy, name)!r} is not one of {allowed}")
    for name in ("min_quota_pct", "start_floor_pct", "end_floor_pct"):
        if getattr(policy, name) > 100:
            raise ConfigError(f"quota_router.{name}: expected 0-100")
    if policy.drain_aggressiveness <= 0:
        raise ConfigError("quota_router.drain_aggressiveness: expected a number > 0")
    return policy


def _scalar(where: str, value: Any, kind: Any) -> Any:
    if kind == "str":
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string")
    elif isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ConfigError(f"{where}: expected a number >= 0")
    elif kind == "int" and not isinstance(value, int):
        raise ConfigError(f"{where}: expected an integer")
    return value


def _per_agent(spec: Any, name: str, parse: Any) -> dict[str, Any]:
    if not isinstance(spec, Mapping):
        raise ConfigError(f"quota_router.{name}: expected a table of agent kinds")
    return {agent: parse(f"quota_router.{name}.{agent}", entry) for agent, entry in spec.items()}


def _floor_override(where: str, spec: Any) -> FloorOverride:
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{where}: expected a table")
    names = {f.name for f in dataclasses.fields(FloorOverride)}
    _no_unknown_keys(spec, names, where)
    values = {name: float(_scalar(f"{where}.{name}", value, "float")) for name, value in spec.items()}
    for name, value in values.items():
        if name.endswith("_pct") and value > 100:
            raise ConfigError(f"{where}.{name}: expected 0-100")
    return FloorOverride(**values)


def _expected_resets(where: str, spec: Any) -> ExpectedResets:
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{where}: expected a table")
    _no_unknown_keys(spec, {"timestamps", "cadence_seconds", "cadence_anchor"}, where)
    stamps = spec.get("timestamps", [])
    if not isinstance(stamps, list):
        raise ConfigError(f"{where}.timestamps: expected a list of instants")
    cadence = float(_scalar(f"{where}.cadence_seconds", spec.get("cadence_seconds", 0), "float"))
    anchor = _instant(f"{where}.cadence_anchor", spec["cadence_anchor"]) if "cadence_anchor" in spec else None
    if cadence > 0 and anchor is None:
        raise ConfigError(f"{where}.cadence_anchor: required with cadence_seconds")
    timestamps = tuple(_instant(f"{where}.timestamps[{i}]", t) for i, t in enumerate(stamps))
    return ExpectedResets(timestamps=timestamps, cadence_seconds=cadence, cadence_anchor=anchor)


def _instant(where: str, value: Any) -> dt.datetime:
    """A zone-aware instant: a TOML offset date-time or an ISO 8601 string with a zone (Z or +hh:mm)."""
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value)
        except ValueError:
            raise ConfigError(f"{where}: {value!r} is not an ISO 8601 instant") from None
    if not isinstance(value, dt.datetime) or value.tzinfo is None:
        raise ConfigError(f"{where}: expected an instant with a zone, like 2030-01-01T00:20:00Z")
    return value


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
                "(legacy shadowing duplicates are rejected since #226 multi-subscription pooling)."
            )
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
            raise ConfigError(
                f"{where}: instance_id '{raw}' has prefix '{prefix}', which does not match agent '{agent}'"
            )
    if "/" in instance or instance != instance.strip() or (raw and not instance):
        raise ConfigError(f"{where}: instance_id '{raw}' is not a name or {agent}/name")
    key = f"{agent}/{instance}" if instance else agent
    where = f"AgentClass '{class_id}': member '{key}'"
    billing = {b.lower(): b for b in BILLINGS}.get(_str(spec, "billing", where).lower())
    if billing is None:
        raise ConfigError(f"{where}: billing {spec.get('billing')!r} must be Subscription or PayPerApi")
    if "quality_score" not in spec:
        raise ConfigError(
            f"{where} has no quality_score. Add quality_score=N ({MIN_SCORE}-{MAX_SCORE}) to it: "
            "there is no default score, members are ranked by it"
        )
    score = _int(spec, "quality_score", where)
    if not MIN_SCORE <= score <= MAX_SCORE:
        raise ConfigError(f"{where}: quality_score {score} is outside {MIN_SCORE}-{MAX_SCORE}")
    reasoning = _str(spec, "reasoning", where)
    if problem := reasoning_problem(agent, reasoning):
        raise ConfigError(f"{where}: {problem}")
    if agent == "gemini" and score >= 90 and reasoning != "high":
        raise ConfigError(f'{where}: gemini members with quality_score >= 90 must have reasoning = "high"')
    tags = spec.get("capabilities", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise ConfigError(f"{where}: capabilities must be a list of strings")
    max_concurrent = _int(spec, "max_concurrent", where)
    if max_concurrent < 0:
        raise ConfigError(f"{where}: max_concurrent must be >= 0 (0 is unlimited)")
    member = Member(
        agent=agent,
        instance_id=instance,
        billing=billing,
        model=_str(spec, "model", where),
        quality_score=score,
        capabilities=tag_set(tags),
        reasoning=reasoning,
        max_concurrent=max_concurrent,
        base_url=_str(spec, "base_url", where),
        credential_env=_str(spec, "credential_env", where),
        credential_file=_str(spec, "credential_file", where),
        probe_url=_str(spec, "probe_url", where),
        order=order,
        runtimes=_runtimes(spec, where),
    )
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


def _label(mod: TodModifier) -> str:
    return f"'{'/'.join(s for s in (mod.route_key, mod.model) if s)}' {mod.start}-{mod.end}"


def _runtimes(spec: Mapping[str, Any], where: str) -> frozenset[str]:
    runtimes = spec.get("runtimes", list(RUNTIMES))
    if not isinstance(runtimes, list) or not runtimes or any(r not in RUNTIMES for r in runtimes):
        raise ConfigError(f"{where}: runtimes must be a non-empty list of {', '.join(RUNTIMES)}")
    return frozenset(runtimes)
