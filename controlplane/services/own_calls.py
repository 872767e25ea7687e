"""The control plane's own model calls (the routing classifier, failure-log compaction), metered on the
fleet's meters like every run's call: the worst case is held on the provider month and on the call's
daily count before the call (`store.meters.own_call_meters`), and settles to the exact cost of its
usage after it, a failed call at what it used. Each is one transaction with its `model.own_call` event."""

from __future__ import annotations

import dataclasses
from typing import Any

from sqlalchemy.orm import Session

from controlplane import metrics
from controlplane.config import BudgetConfig
from controlplane.domain import pricing
from controlplane.store import meters
from controlplane.store.events import add_event
from controlplane.store.models import Run, utcnow
from drover.core.usage import Usage

CLASSIFIER = "classifier"
COMPACTION = "compaction"
EVENT = "model.own_call"
OVER_RESERVATION_SOURCE = {CLASSIFIER: "classifier", COMPACTION: "compact"}
"""The `source` label of drover_model_over_reservation_total for each purpose."""


@dataclasses.dataclass(frozen=True)
class OwnCall:
    """One call the control plane makes itself, as its meters see it."""

    call_id: str
    purpose: str
    """classifier or compaction"""
    run_id: str
    """The run it is made for (routed, or given its packet)."""
    model: str
    estimate_micros: int


def reserve(s: Session, call: OwnCall, budgets: BudgetConfig) -> str:
    """Hold the call's estimate on its meters, all or none: "" when held, else the kind of the meter
    that refused (nothing is held then, and the refusal is the call's event)."""
    specs = meters.own_call_meters(
        call.purpose,
        utcnow(),
        meters.usd_micros(budgets.provider_month_usd),
        budgets.agent_calls_per_day,
        budgets.classifier_calls_per_day,
    )
    refused = meters.take(s, call.call_id, specs, meters.amounts_for(specs, call.estimate_micros))
    if refused is None:
        return ""
    spec, used, reserved = refused
    _event(s, call, outcome="refused", meter=spec.key, limit=spec.limit, used=used, reserved=reserved)
    return spec.kind


def settle(s: Session, call: OwnCall, price: pricing.Price, usage: Usage, error: str) -> int:
    """Settle a held call to the exact cost of `usage` (never above its estimate: an excess is logged
    in the event and counted); answers the cost settled."""
    reported = pricing.cost_micros(usage, price)
    settled = pricing.settled_micros(reported, call.estimate_micros)
    meters.settle_on_meters(s, call.call_id, meters.exact_for(settled.applied))
    if settled.excess:
        metrics.on_over_reservation(s, OVER_RESERVATION_SOURCE[call.purpose], settled.excess)
    _event(
        s,
        call,
        outcome="failed" if error else "settled",
        cost_micros=settled.applied,
        excess=settled.excess,
        error=error[:64],
        usage=dataclasses.asdict(usage),
    )
    return settled.applied


def _event(s: Session, call: OwnCall, **data: Any) -> None:
    run = s.get(Run, call.run_id) if call.run_id else None
    add_event(
        s,
        EVENT,
        change_id=run.change_id if run is not None else "",
        task_id=run.task_id if run is not None else "",
        run_id=call.run_id,
        purpose=call.purpose,
        model=call.model,
        reservation_id=call.call_id,
        estimate=call.estimate_micros,
        **data,
    )
