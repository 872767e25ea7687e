"""Model call accounting: reserve before each attempt, settle to the exact cost after.

A reservation is refused at the run's call cap, at any meter of its Change
(provider month, daily calls, Change, Project, user: all held or none, see
`controlplane.store.meters`) and at the run's share of the Change budget."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from controlplane import metrics
from controlplane.config import HarnessConfig
from controlplane.domain import pricing
from controlplane.store import meters
from controlplane.store.events import new_id, run_event
from controlplane.store.models import Change, ModelCall, Run, Task, utcnow
from drover.core.usage import Usage
from drover.errors import InvalidArgument, NotFound

CLOSED_TASK = ("succeeded", "failed", "cancelled", "blocked")


@dataclasses.dataclass(frozen=True)
class Reservation:
    reservation_id: str
    granted: bool
    refusal: str
    calls_used: int
    calls_cap: int
    estimate_micros: int
    meter: str = ""
    """The refusing meter's key ("" unless a meter refused)."""
    limit: int = 0
    """The limit that refused: the meter's, or the run's share of the Change budget (micro-dollars)."""


def run_calls(s: Session, run_id: str) -> int:
    return (
        s.scalar(
            select(func.count()).select_from(ModelCall).where(ModelCall.run_id == run_id, ModelCall.purpose == "agent")
        )
        or 0
    )


def run_cost(s: Session, run_id: str) -> int:
    # int(): PostgreSQL sums a bigint as numeric, which would come back as a Decimal.
    return int(
        s.scalar(
            select(func.coalesce(func.sum(ModelCall.cost_micros), 0)).where(
                ModelCall.run_id == run_id, ModelCall.state == "settled"
            )
        )
        or 0
    )


def change_spent(s: Session, change_id: str, except_run: str = "") -> int:
    """Settled cost of the Change's model calls, leaving out one run's."""
    return int(
        s.scalar(
            select(func.coalesce(func.sum(ModelCall.cost_micros), 0))
            .join(Run, Run.id == ModelCall.run_id)
            .where(Run.change_id == change_id, Run.id != except_run, ModelCall.state == "settled")
        )
        or 0
    )


def open_tasks(s: Session, change_id: str) -> int:
    return (
        s.scalar(
            select(func.count()).select_from(Task).where(Task.change_id == change_id, Task.status.not_in(CLOSED_TASK))
        )
        or 0
    )


def run_share(s: Session, change: Change, run_id: str) -> int:
    """The run's share of the Change budget: what the other runs left, split over the open Tasks."""
    left = meters.usd_micros(change.budget_usd) - change_spent(s, change.id, except_run=run_id)
    return left // max(open_tasks(s, change.id), 1)


def reserve(
    s: Session,
    config: HarnessConfig,
    run_id: str,
    key: str,
    model: str,
    purpose: str,
    max_output_tokens: int,
    estimated_input_tokens: int,
) -> Reservation:
    """One transaction: refuse at a cap or a meter, else hold the estimate on every meter of the
    Change and record the reservation. Idempotent by (run, key)."""
    if not key:
        raise InvalidArgument("must not be empty", field="key")
    if purpose not in ("agent", "fold"):
        raise InvalidArgument("must be agent or fold", field="purpose")
    run = s.get(Run, run_id)
    if run is None:
        raise NotFound(f"no run {run_id!r}", field="run_id")
    cap = (config.tiers.get(run.tier) or config.tiers[config.default_tier]).max_calls
    used = run_calls(s, run_id)
    if (call := _existing(s, run_id, key)) is not None:
        return Reservation(call.id, True, "", used, cap, call.estimate_micros)
    if run.state not in ("starting", "running"):
        return Reservation("", False, "run_not_running", used, cap, 0)
    if purpose == "agent" and used >= cap:
        run_event(s, "run.call_cap", run, calls=used, cap=cap)
        return Reservation("", False, "run_call_cap", used, cap, 0)
    estimate = pricing.estimate_micros(
        max(estimated_input_tokens, 0), max(max_output_tokens, 0), pricing.price_for(model, config.prices)
    )
    change = s.get(Change, run.change_id)
    assert change is not None
    # Read before the meters are locked, to keep that lock short; the share is a per-run cap only,
    # the Change meter holds the Change to its budget.
    share = run_share(s, change, run_id) if change.budget_usd > 0 else 0
    spent = run_cost(s, run_id)
    states = meters.lock_meters(s, meters.change_meters(s, change, utcnow(), config.budgets))
    if (call := _existing(s, run_id, key)) is not None:  # the same attempt, reserved while this one waited
        return Reservation(call.id, True, "", used, cap, call.estimate_micros)
    amounts = meters.amounts_for([spec for spec, _, _ in states], estimate)
    refused = meters.admit(states, amounts)
    if refused is not None:
        return _spend_limited(s, run, states, amounts, refused, used, cap, estimate)
    if change.budget_usd > 0 and spent + estimate > share:
        run_event(s, "run.cost_cap", run, share=share, run_cost=spent, estimate=estimate)
        return Reservation("", False, "run_cost_cap", used, cap, estimate, "", share)
    call = ModelCall(
        id=new_id("mc"),
        run_id=run_id,
        key=key,
        model=model,
        purpose=purpose,
        estimate_micros=estimate,
        created_at=utcnow(),
    )
    s.add(call)
    meters.hold(s, call.id, states, amounts)
    return Reservation(call.id, True, "", used + (purpose == "agent"), cap, estimate)


def _existing(s: Session, run_id: str, key: str) -> ModelCall | None:
    return s.scalar(select(ModelCall).where(ModelCall.run_id == run_id, ModelCall.key == key))


def _spend_limited(
    s: Session,
    run: Run,
    states: list[Any],
    amounts: dict[str, int],
    refused: str,
    used: int,
    cap: int,
    estimate: int,
) -> Reservation:
    """A meter refused the reservation: a budget stop whose reason is the exact limit."""
    spec, meter_used, meter_reserved = next(state for state in states if state[0].key == refused)
    refusal = meters.REFUSALS[spec.kind]
    run_event(
        s,
        "run.spend_limited",
        run,
        refusal=refusal,
        meter=refused,
        limit=spec.limit,
        used=meter_used,
        reserved=meter_reserved,
        amount=amounts[refused],
    )
    return Reservation("", False, refusal, used, cap, estimate, refused, spec.limit)


def settle(s: Session, config: HarnessConfig, reservation_id: str, usage: Usage, error: str) -> tuple[int, int]:
    """Settle to the exact cost of the usage; answers (cost of this call, cost of the run so far).
    Settling twice changes nothing (the first settle stands)."""
    call = s.get(ModelCall, reservation_id, with_for_update=True)  # one settle at a time
    if call is None:
        raise NotFound(f"no reservation {reservation_id!r}", field="reservation_id")
    if call.state != "settled":
        call.cost_micros = pricing.cost_micros(usage, pricing.price_for(call.model, config.prices))
        call.input_tokens, call.output_tokens = usage.input_tokens, usage.output_tokens
        call.cache_write_tokens = usage.cache_creation_input_tokens
        call.cache_read_tokens = usage.cache_read_input_tokens
        call.error, call.state, call.settled_at = error[:64], "settled", utcnow()
        meters.settle_on_meters(s, call.id, meters.exact_for(call.cost_micros))
        s.flush()
        run = s.get(Run, call.run_id)
        metrics.on_settled(s, run.tier if run else "", run.member if run else "", call.cost_micros)
    return call.cost_micros, run_cost(s, call.run_id)


def settle_expired(s: Session, older_than: dt.timedelta) -> int:
    """A reservation never settled (its agent died mid-call) settles at its estimate, on its meters too.
    A call being settled right now is left to that settle."""
    cutoff = utcnow() - older_than
    expired = list(
        s.scalars(
            select(ModelCall)
            .where(ModelCall.state == "reserved", ModelCall.created_at < cutoff)
            .order_by(ModelCall.id)
            .with_for_update(skip_locked=True)
        )
    )
    for call in expired:
        call.cost_micros, call.state, call.error, call.settled_at = call.estimate_micros, "settled", "expired", utcnow()
        meters.settle_on_meters(s, call.id, {})
    return len(expired)


def member_of(s: Session, reservation_id: str) -> str:
    """The route key of the member a reserved call ran on."""
    return (
        s.scalar(select(Run.member).join(ModelCall, ModelCall.run_id == Run.id).where(ModelCall.id == reservation_id))
        or ""
    )
