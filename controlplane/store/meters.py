"""Budgets and meters (DESIGN.md "Budgets and meters"): which meters a model call draws on, whether
they admit it, and holding and settling its shares in the store.

`meters_for`, `own_call_meters`, `daily_calls_meter` and `amounts_for` are pure. The rest take a Session and do their
work inside the caller's one transaction (`Store.transaction`). A reservation holds its amount on
every meter or on none, admitted against the writer's escrow slice of each meter; a slice takes
more of a meter's headroom under that meter's row lock (`controlplane.store.escrow`, which states
the invariant that keeps every meter within its limit).

Limits: a Change, Project or user meter follows its budget column (the spec built from it);
a provider-month or daily-call meter keeps the limit it was created with, from the
configuration, until `raise_limit` changes it. Amounts are integer micro-dollars or calls.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from controlplane.store import escrow
from controlplane.store.models import Change, Meter, MeterReservation, Project, Token
from drover.errors import InvalidArgument, NotFound

PROVIDER_MONTH = "provider_month"
AGENT_CALLS_DAY = "agent_calls_day"
CLASSIFIER_CALLS_DAY = "classifier_calls_day"
MEMORY_QUERIES_DAY = "memory_queries_day"
CHANGE = "change"
PROJECT = "project"
USER = "user"
USD_KINDS = frozenset({PROVIDER_MONTH, CHANGE, PROJECT, USER})
LIMIT_FROM_SPEC = frozenset({CHANGE, PROJECT, USER})
"""Kinds whose limit is a budget column, re-read at every reservation."""

REFUSALS = {
    PROVIDER_MONTH: "monthly_budget",
    AGENT_CALLS_DAY: "daily_calls",
    CHANGE: "change_budget",
    PROJECT: "project_budget",
    USER: "user_budget",
    CLASSIFIER_CALLS_DAY: "classifier_calls",
}
"""The refusal a run ends with when a meter of this kind refuses its call."""

_PREFIXES = {
    "provider-usd": (PROVIDER_MONTH, "usd"),
    "agent-calls": (AGENT_CALLS_DAY, "calls"),
    "classifier-calls": (CLASSIFIER_CALLS_DAY, "calls"),
    "memory-queries": (MEMORY_QUERIES_DAY, "calls"),
    "change-usd": (CHANGE, "usd"),
    "project-usd": (PROJECT, "usd"),
    "user-usd": (USER, "usd"),
}


@dataclasses.dataclass(frozen=True)
class MeterSpec:
    key: str
    kind: str
    period: str
    """YYYY-MM, YYYY-MM-DD, or "" for a Change's whole life."""
    unit: str
    """usd (micro-dollars) or calls."""
    limit: int
    """0: no limit."""


MeterState = tuple[MeterSpec, int, int]
"""A meter as read: its spec (with the limit in force), used, reserved."""


def usd_micros(usd: float) -> int:
    return round(usd * 1_000_000)


def _month(now: dt.datetime) -> str:
    return now.astimezone(dt.UTC).strftime("%Y-%m")


def _day(now: dt.datetime) -> str:
    return now.astimezone(dt.UTC).strftime("%Y-%m-%d")


def meters_for(
    now: dt.datetime,
    change_id: str,
    change_budget_micros: int,
    project: str,
    project_budget_micros: int,
    user: str,
    user_budget_micros: int,
    provider_month_budget_micros: int,
    daily_call_cap: int,
) -> list[MeterSpec]:
    """The meters one agent model call of a Change draws on, broadest first; no user meter without a user."""
    month = _month(now)
    specs = [
        *fleet_meters(now, provider_month_budget_micros, daily_call_cap),
        MeterSpec(f"change-usd:{change_id}", CHANGE, "", "usd", change_budget_micros),
        MeterSpec(f"project-usd:{project}:{month}", PROJECT, month, "usd", project_budget_micros),
    ]
    if user:
        specs.append(MeterSpec(f"user-usd:{user}:{month}", USER, month, "usd", user_budget_micros))
    return specs


def fleet_meters(now: dt.datetime, provider_month_budget_micros: int, daily_call_cap: int) -> list[MeterSpec]:
    """The meters every model call of the fleet draws on: the provider month and the agent calls of the day."""
    month, day = _month(now), _day(now)
    return [
        MeterSpec(f"provider-usd:{month}", PROVIDER_MONTH, month, "usd", provider_month_budget_micros),
        MeterSpec(f"agent-calls:{day}", AGENT_CALLS_DAY, day, "calls", daily_call_cap),
    ]


def own_call_meters(
    purpose: str, now: dt.datetime, provider_month_budget_micros: int, daily_call_cap: int, classifier_cap: int
) -> list[MeterSpec]:
    """The meters a call the control plane makes itself draws on: the provider month, and its daily
    count: the classifier's own cap for a routing classifier call, the agent calls' for any other
    (failure-log compaction), which has no cap of its own."""
    provider, agent_calls = fleet_meters(now, provider_month_budget_micros, daily_call_cap)
    if purpose == "classifier":
        return [provider, daily_calls_meter(CLASSIFIER_CALLS_DAY, now, classifier_cap)]
    return [provider, agent_calls]


def daily_calls_meter(kind: str, now: dt.datetime, cap: int) -> MeterSpec:
    """The shared count of one kind of call for the UTC day of `now`: routing classifier calls
    (CLASSIFIER_CALLS_DAY) or semantic-memory query embeddings (MEMORY_QUERIES_DAY)."""
    prefix = next(p for p, (k, unit) in _PREFIXES.items() if k == kind and unit == "calls")
    day = _day(now)
    return MeterSpec(f"{prefix}:{day}", kind, day, "calls", cap)


def amounts_for(specs: Sequence[MeterSpec], estimate_micros: int) -> dict[str, int]:
    """What one call reserves: its estimate on USD meters, one call on call meters."""
    return {spec.key: estimate_micros if spec.unit == "usd" else 1 for spec in specs}


def exact_for(cost_micros: int) -> dict[str, int]:
    """What one call settles to, by kind: its exact cost on USD meters (call meters keep their 1)."""
    return dict.fromkeys(USD_KINDS, cost_micros)


# --- the store ------------------------------------------------------------------------------------


def _create_missing(s: Session, specs: Sequence[MeterSpec]) -> None:
    rows = [
        {
            "key": p.key,
            "kind": p.kind,
            "period": p.period,
            "unit": p.unit,
            "limit_amount": p.limit,
            "used": 0,
            "reserved": 0,
        }
        for p in sorted(specs, key=lambda p: p.key)
    ]
    if not rows:
        return
    dialect = s.get_bind().dialect.name
    if dialect in ("postgresql", "sqlite"):
        upsert = postgresql.insert if dialect == "postgresql" else sqlite.insert
        s.execute(upsert(Meter).values(rows).on_conflict_do_nothing(index_elements=["key"]))
        return
    for row in rows:  # other databases: no concurrent writers are expected
        if s.get(Meter, row["key"]) is None:
            s.add(Meter(**row))
    s.flush()


def take(s: Session, reservation_id: str, specs: Sequence[MeterSpec], amounts: Mapping[str, int]) -> MeterState | None:
    """Hold `amounts` on every meter of `specs` or on none, through this writer's escrow slices
    (`controlplane.store.escrow`); None, or the refusing meter as read (its limit in force, used, reserved)."""
    by_key = {spec.key: spec for spec in specs}
    wants = wants_for(specs, amounts)
    refused = escrow.take(s, reservation_id, wants, lambda keys: _create_missing(s, [by_key[k] for k in keys]))
    if refused is None:
        return None
    key, limit = refused
    [row] = usage(s, key, exact=True)
    return dataclasses.replace(by_key[key], limit=limit), row["used"], row["reserved"]


def reserve_on_meters(
    s: Session, reservation_id: str, specs: Sequence[MeterSpec], amounts: Mapping[str, int]
) -> str | None:
    """Hold `amounts` on every meter of `specs` or on none; answers the refusing meter's key or None.
    A reservation already held is not held again."""
    missing = [p.key for p in specs if p.key not in amounts]
    if missing:
        raise InvalidArgument(f"no amount for {missing}", field="amounts")
    if s.scalar(select(MeterReservation.id).where(MeterReservation.reservation_id == reservation_id).limit(1)):
        return None
    refused = take(s, reservation_id, specs, amounts)
    return None if refused is None else refused[0].key


def settle_on_meters(s: Session, reservation_id: str, exact: Mapping[str, int]) -> int:
    """Move each unsettled share of the reservation from reserved to used at `exact[kind]`, or at
    the reserved amount for a kind not given, in one statement. Settling again changes nothing; answers
    the shares settled."""
    return escrow.settle(s, reservation_id, settled_prefixes(exact))


def wants_for(specs: Sequence[MeterSpec], amounts: Mapping[str, int]) -> list[escrow.Want]:
    """What escrow admits for `amounts` on the meters of `specs` (a budget column's limit goes with its want)."""
    return [escrow.Want(p.key, amounts[p.key], p.limit if p.kind in LIMIT_FROM_SPEC else None) for p in specs]


def settled_prefixes(exact: Mapping[str, int]) -> dict[str, int]:
    """`exact` (by kind) as escrow settles it: by the prefix of the meters' keys."""
    return {f"{prefix}:": exact[kind] for prefix, (kind, _) in _PREFIXES.items() if kind in exact}


def usage(s: Session, prefix: str = "", exact: bool = False) -> list[dict[str, Any]]:
    """Every meter whose key starts with `prefix` (is `prefix`, when exact), by key: used (settled),
    reserved (admitted, not settled; escrow slices' unused grants are not counted), limit (0: none)."""
    where = Meter.key == prefix if exact else Meter.key.startswith(prefix, autoescape=True)
    rows = list(s.scalars(select(Meter).where(where).order_by(Meter.key)))
    extra = escrow.adjustments(s, [m.key for m in rows])
    return [
        {
            "key": m.key,
            "kind": m.kind,
            "period": m.period,
            "unit": m.unit,
            "used": m.used + extra.get(m.key, (0, 0))[0],
            "reserved": m.reserved + extra.get(m.key, (0, 0))[1],
            "limit": m.limit_amount,
        }
        for m in rows
    ]


def spec_of_key(key: str, limit: int) -> MeterSpec:
    """The spec a meter key names, e.g. `project-usd:web:2026-11`."""
    prefix, _, rest = key.partition(":")
    if prefix not in _PREFIXES or not rest:
        raise InvalidArgument(f"not a meter key: {key!r}", field="key")
    kind, unit = _PREFIXES[prefix]
    period = "" if kind == CHANGE else rest.rsplit(":", 1)[-1]
    return MeterSpec(key, kind, period, unit, limit)


def raise_limit(s: Session, key: str, new_limit: int) -> None:
    """Set a meter's limit (0: none). For a Change, Project or user meter its budget column changes
    too, so later reservations keep the new limit (and a Project or user keeps it in later months)."""
    if new_limit < 0:
        raise InvalidArgument("must not be negative", field="new_limit")
    spec = spec_of_key(key, new_limit)
    if spec.kind in LIMIT_FROM_SPEC and not _set_budget(s, spec, new_limit / 1_000_000):
        raise NotFound(f"nothing owns meter {key!r}", field="key")
    escrow.fold_all(s, key)  # no slice keeps a grant made under the old limit
    row = s.get(Meter, key, populate_existing=True)
    if row is not None:
        row.limit_amount = new_limit
    elif spec.kind not in LIMIT_FROM_SPEC:
        _create_missing(s, [spec])


def _set_budget(s: Session, spec: MeterSpec, usd: float) -> bool:
    """Write the budget column behind a Change, Project or user meter; False when nothing owns it."""
    name = spec.key.partition(":")[2]
    row: Change | Project | Token | None
    if spec.kind == CHANGE:
        row, column = s.get(Change, name), "budget_usd"
    elif spec.kind == PROJECT:
        row, column = s.get(Project, name.rsplit(":", 1)[0]), "monthly_budget_usd"
    else:
        row, column = _user_token(s, name.rsplit(":", 1)[0]), "monthly_budget_usd"
    if row is None:
        return False
    setattr(row, column, usd)
    return True


def _user_token(s: Session, name: str) -> Token | None:
    return s.scalar(select(Token).where(Token.name == name).order_by(Token.id).limit(1))


def take_call(s: Session, spec: MeterSpec, reservation_id: str) -> bool:
    """Count one call on a daily calls meter; False (and nothing counted) at its cap."""
    if reserve_on_meters(s, reservation_id, [spec], {spec.key: 1}) is not None:
        return False
    settle_on_meters(s, reservation_id, {})
    return True
