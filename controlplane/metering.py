"""Model call accounting: reserve before each attempt, settle to the exact cost after.

This issue enforces the per-run call cap and records cost per run; the meters of
the routing and budgets issue hook into reserve() (all meters, all or none)."""

from __future__ import annotations

import dataclasses
import datetime as dt

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from controlplane import pricing
from controlplane.config import HarnessConfig
from controlplane.errors import InvalidArgument, NotFound
from controlplane.lifecycle import add_event, new_id
from controlplane.models import ModelCall, Run, utcnow


@dataclasses.dataclass(frozen=True)
class Reservation:
    reservation_id: str
    granted: bool
    refusal: str
    calls_used: int
    calls_cap: int
    estimate_micros: int


def run_calls(s: Session, run_id: str) -> int:
    return s.scalar(select(func.count()).select_from(ModelCall).where(
        ModelCall.run_id == run_id, ModelCall.purpose == "agent")) or 0


def run_cost(s: Session, run_id: str) -> int:
    return s.scalar(select(func.coalesce(func.sum(ModelCall.cost_micros), 0)).where(
        ModelCall.run_id == run_id, ModelCall.state == "settled")) or 0


def reserve(s: Session, config: HarnessConfig, run_id: str, key: str, model: str, purpose: str,
            max_output_tokens: int, estimated_input_tokens: int) -> Reservation:
    """One transaction: refuse at a cap, else record the reservation. Idempotent by (run, key)."""
    if not key:
        raise InvalidArgument("must not be empty", field="key")
    if purpose not in ("agent", "fold"):
        raise InvalidArgument("must be agent or fold", field="purpose")
    run = s.get(Run, run_id)
    if run is None:
        raise NotFound(f"no run {run_id!r}", field="run_id")
    tier = config.tiers.get(run.tier) or config.tiers[config.default_tier]
    existing = s.scalar(select(ModelCall).where(ModelCall.run_id == run_id, ModelCall.key == key))
    used = run_calls(s, run_id)
    if existing is not None:
        return Reservation(existing.id, True, "", used, tier.max_calls, existing.estimate_micros)
    if run.state not in ("starting", "running"):
        return Reservation("", False, "run_not_running", used, tier.max_calls, 0)
    if purpose == "agent" and used >= tier.max_calls:
        add_event(s, "run.call_cap", change_id=run.change_id, task_id=run.task_id, run_id=run.id, agent=run.agent,
                  calls=used, cap=tier.max_calls)
        return Reservation("", False, "run_call_cap", used, tier.max_calls, 0)
    price = pricing.price_for(model, config.prices)
    estimate = pricing.estimate_micros(max(estimated_input_tokens, 0), max(max_output_tokens, 0), price)
    call = ModelCall(id=new_id("mc"), run_id=run_id, key=key, model=model, purpose=purpose,
                     estimate_micros=estimate, created_at=utcnow())
    s.add(call)
    return Reservation(call.id, True, "", used + (purpose == "agent"), tier.max_calls, estimate)


def settle(s: Session, config: HarnessConfig, reservation_id: str, usage: pricing.Usage,
           error: str) -> tuple[int, int]:
    """Settle to the exact cost of the usage; answers (cost of this call, cost of the run so far).
    Settling twice changes nothing (the first settle stands)."""
    call = s.get(ModelCall, reservation_id)
    if call is None:
        raise NotFound(f"no reservation {reservation_id!r}", field="reservation_id")
    if call.state != "settled":
        call.cost_micros = pricing.cost_micros(usage, pricing.price_for(call.model, config.prices))
        call.input_tokens, call.output_tokens = usage.input_tokens, usage.output_tokens
        call.cache_write_tokens = usage.cache_creation_input_tokens
        call.cache_read_tokens = usage.cache_read_input_tokens
        call.error, call.state, call.settled_at = error[:64], "settled", utcnow()
        s.flush()
    return call.cost_micros, run_cost(s, call.run_id)


def settle_expired(s: Session, older_than: dt.timedelta) -> int:
    """A reservation never settled (its agent died mid-call) settles at its estimate."""
    cutoff = utcnow() - older_than
    expired = list(s.scalars(select(ModelCall).where(ModelCall.state == "reserved",
                                                     ModelCall.created_at < cutoff)))
    for call in expired:
        call.cost_micros, call.state, call.error, call.settled_at = call.estimate_micros, "settled", "expired", utcnow()
    return len(expired)
