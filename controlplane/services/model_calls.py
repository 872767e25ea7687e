"""Model call accounting: reserve before each attempt, settle to the exact cost after.

A reservation is refused at the run's call cap, at any meter of its Change
(provider month, daily calls, Change, Project, user: all held or none, see
`controlplane.store.meters`) and at the run's share of the Change budget."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from controlplane import metrics
from controlplane.config import BudgetConfig, HarnessConfig
from controlplane.domain import pricing
from controlplane.services import model_call_statements as statements
from controlplane.services import tenancy
from controlplane.store import meters, quota_failures
from controlplane.store.events import new_id, run_event
from controlplane.store.models import ModelCall, Run, Task, utcnow
from drover.core.usage import Usage
from drover.errors import InvalidArgument, NotFound

CALLS = statements.CALLS
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


def run_share(s: Session, change_id: str, budget_usd: float, run_id: str) -> int:
    """The run's share of the Change budget: what the other runs left, split over the open Tasks."""
    left = meters.usd_micros(budget_usd) - change_spent(s, change_id, except_run=run_id)
    return left // max(open_tasks(s, change_id), 1)


def reserve(
    s: Session,
    config: HarnessConfig,
    run_id: str,
    key: str,
    model: str,
    purpose: str,
    max_output_tokens: int,
    estimated_input_tokens: int,
    *,
    token_id: int | None = None,
) -> Reservation:
    """One transaction: refuse at a cap or a meter, else hold the estimate on every meter of the
    Change and record the reservation. Idempotent by (run, key). With `token_id` (an agent's call),
    a run its agent does not hold is NOT_FOUND (`tenancy.agent_run`), checked in the same first read
    and before the arguments, as the servicer did when it checked tenancy on its own."""
    facts = _facts(s, run_id, key)
    early = screened(facts, config, run_id, key, purpose, token_id)
    if early is not None:
        return early
    assert facts is not None
    cap, used = call_cap(config, facts.tier), facts.calls
    if purpose == "agent" and used >= cap:
        run_event(s, "run.call_cap", _run(s, run_id), calls=used, cap=cap)
        return Reservation("", False, "run_call_cap", used, cap, 0)
    estimate = estimate_of(config, model, max_output_tokens, estimated_input_tokens)
    call_id = new_id("mc")
    # The call first: a concurrent reservation of the same key (another writer) waits for this one
    # and then finds it, so a key is held once without locking the run.
    if not _insert_call(s, call_id, run_id, key, model, purpose, estimate):
        existing, held = s.execute(
            select(ModelCall.id, ModelCall.estimate_micros).where(ModelCall.run_id == run_id, ModelCall.key == key)
        ).one()
        return Reservation(existing, True, "", used, cap, held)
    refusal = _hold(s, facts, run_id, call_id, estimate, config.budgets, used, cap)
    if refusal is not None:
        s.execute(delete(CALLS).where(CALLS.c.id == call_id))
        return refusal
    return Reservation(call_id, True, "", used + (purpose == "agent"), cap, estimate)


def call_cap(config: HarnessConfig, tier: str) -> int:
    return (config.tiers.get(tier) or config.tiers[config.default_tier]).max_calls


def screened(
    facts: Facts | None, config: HarnessConfig, run_id: str, key: str, purpose: str, token_id: int | None
) -> Reservation | None:
    """What a reservation answers before it writes anything: NOT_FOUND (no such run, or one its agent
    does not hold) and INVALID_ARGUMENT raised, the reservation already held under the key, or
    run_not_running; None: it goes on to the cap and the meters."""
    if facts is None or (token_id is not None and not tenancy.agent_holds(facts.agent, facts.agent_token, token_id)):
        raise NotFound(f"no run {run_id!r}", field="run_id")
    if not key:
        raise InvalidArgument("must not be empty", field="key")
    if purpose not in ("agent", "fold"):
        raise InvalidArgument("must be agent or fold", field="purpose")
    cap = call_cap(config, facts.tier)
    if facts.existing:
        return Reservation(facts.existing, True, "", facts.calls, cap, facts.existing_estimate)
    if facts.state not in ("starting", "running"):
        return Reservation("", False, "run_not_running", facts.calls, cap, 0)
    return None


def estimate_of(config: HarnessConfig, model: str, max_output_tokens: int, estimated_input_tokens: int) -> int:
    price = pricing.price_for(model, config.prices)
    return pricing.worst_case_micros(estimated_input_tokens, max_output_tokens, price)


def _insert_call(s: Session, call_id: str, run_id: str, key: str, model: str, purpose: str, estimate: int) -> bool:
    """Record the reservation; False when the run already has one with this key."""
    params: dict[str, Any] = {"p_id": call_id, "p_run": run_id, "p_key": key, "p_model": model}
    params |= {"p_purpose": purpose, "p_estimate": estimate, "p_at": utcnow()}
    return s.execute(statements.insert_call(s.get_bind().dialect.name), params).first() is not None


def _hold(
    s: Session,
    facts: Facts,
    run_id: str,
    call_id: str,
    estimate: int,
    budgets: BudgetConfig,
    used: int,
    cap: int,
) -> Reservation | None:
    """Hold the estimate on every meter of the call; None, or the refusal (nothing held then)."""
    specs = facts.meters(utcnow(), budgets)
    amounts = meters.amounts_for(specs, estimate)
    # A budgeted Change: the meters first (a meter's refusal names the budget), then the run's share,
    # which undoes the meters' hold when it refuses.
    held = s.begin_nested() if facts.budget_usd > 0 else None
    refused = meters.take(s, call_id, specs, amounts)
    if refused is not None:
        if held is not None:
            held.commit()  # nothing was held (a slice may have been returned to its meter)
        return _spend_limited(s, _run(s, run_id), refused, amounts, used, cap, estimate)
    if held is not None:
        share = run_share(s, facts.change_id, facts.budget_usd, run_id)
        if (spent := run_cost(s, run_id)) + estimate > share:
            held.rollback()
            run_event(s, "run.cost_cap", _run(s, run_id), share=share, run_cost=spent, estimate=estimate)
            return Reservation("", False, "run_cost_cap", used, cap, estimate, "", share)
        held.commit()
    return None


@dataclasses.dataclass(frozen=True)
class Facts:
    """What a reservation needs to know of its run, Change, Project and user, read in one query."""

    state: str
    tier: str
    change_id: str
    budget_usd: float
    project: str
    user: str
    project_budget_usd: float
    user_budget_usd: float
    calls: int
    existing: str
    existing_estimate: int
    agent: str
    agent_token: int | None
    """The token the run's agent is bound to (None: no such agent, or one bound to none)."""

    def meters(self, now: dt.datetime, budgets: BudgetConfig) -> list[meters.MeterSpec]:
        return meters.meters_for(
            now,
            self.change_id,
            meters.usd_micros(self.budget_usd),
            self.project,
            meters.usd_micros(self.project_budget_usd),
            self.user,
            meters.usd_micros(self.user_budget_usd),
            meters.usd_micros(budgets.provider_month_usd),
            budgets.agent_calls_per_day,
        )


def _facts(s: Session, run_id: str, key: str) -> Facts | None:
    row = s.execute(statements.facts(), {"p_run": run_id, "p_key": key}).first()
    return None if row is None else facts_of(row[:9], row[9] or "", row[10] or 0, row[11], row[12])


def facts_of(run: Any, existing: str, estimate: int, agent: str | None, agent_token: int | None) -> Facts:
    """Facts from the nine run columns of `model_call_statements` (state ... calls) and the rest."""
    state, tier, change_id, budget, project, user, project_budget, user_budget, calls = run
    user_budget = (user_budget or 0.0) if user else 0.0
    return Facts(
        state,
        tier,
        change_id,
        budget,
        project,
        user,
        project_budget,
        user_budget,
        calls or 0,
        existing,
        estimate,
        agent or "",
        agent_token,
    )


def _run(s: Session, run_id: str) -> Run:
    run = s.get(Run, run_id)
    assert run is not None
    return run


def _spend_limited(
    s: Session, run: Run, refused: meters.MeterState, amounts: dict[str, int], used: int, cap: int, estimate: int
) -> Reservation:
    """A meter refused the reservation: a budget stop whose reason is the exact limit."""
    spec, meter_used, meter_reserved = refused
    refusal = meters.REFUSALS[spec.kind]
    run_event(
        s,
        "run.spend_limited",
        run,
        refusal=refusal,
        meter=spec.key,
        limit=spec.limit,
        used=meter_used,
        reserved=meter_reserved,
        amount=amounts[spec.key],
    )
    return Reservation("", False, refusal, used, cap, estimate, spec.key, spec.limit)


def settle(s: Session, config: HarnessConfig, reservation_id: str, usage: Usage, error: str) -> tuple[int, int]:
    """Settle to the exact cost of the usage, never above the reservation (a report above it is
    capped, recorded as `run.over_reservation` and counted); answers (cost of this call, cost of the
    run so far). Settling twice changes nothing (the first settle stands)."""
    _, cost, spent = settle_for_agent(s, config, reservation_id, usage, error, None)
    return cost, spent


def settle_for_agent(
    s: Session, config: HarnessConfig, reservation_id: str, usage: Usage, error: str, token_id: int | None
) -> tuple[str, int, int]:
    """`settle` for an agent's call: a reservation of a run its agent does not hold (`token_id`; None:
    any) is NOT_FOUND, read in the settle's own first query; answers (run id, cost, run cost)."""
    call = _settling(s, reservation_id, token_id)
    model, run_id, state, cost, reserved, tier, member = call[:7]
    spent_before = int(call[-1] or 0)  # int(): PostgreSQL sums a bigint as numeric (a Decimal)
    if state != "settled":
        reported = pricing.cost_micros(usage, pricing.price_for(model, config.prices))
        settled = pricing.settled_micros(reported, reserved)
        cost = settled.applied
        if settled.excess:
            run_event(
                s,
                "run.over_reservation",
                _run(s, run_id),
                reservation_id=reservation_id,
                model=model,
                reported=reported,
                reserved=reserved,
                excess=settled.excess,
                usage=dataclasses.asdict(usage),
            )
            metrics.on_over_reservation(s, "agent", settled.excess)
        s.execute(statements.settled(), settled_params(reservation_id, cost, usage, error))
        meters.settle_on_meters(s, reservation_id, meters.exact_for(cost))
        after_settle(s, config, tier, member, cost, error)
    return run_id, cost, spent_before + cost


def settled_params(reservation_id: str, cost: int, usage: Usage, error: str) -> dict[str, Any]:
    """The parameters of `model_call_statements.settled` for one call."""
    return {
        "p_id": reservation_id,
        "p_cost": cost,
        "p_input": usage.input_tokens,
        "p_output": usage.output_tokens,
        "p_cache_write": usage.cache_creation_input_tokens,
        "p_cache_read": usage.cache_read_input_tokens,
        "p_error": error[:64],
        "p_at": utcnow(),
    }


def after_settle(s: Session, config: HarnessConfig, tier: str, member: str, cost: int, error: str) -> None:
    """What a settle counts besides the call: the spend metrics, and a quota error every router sees."""
    metrics.on_settled(s, tier, member, cost)
    retention = dt.timedelta(minutes=config.quota.observed_failure_retention_minutes)
    quota_failures.record(s, member, error, utcnow(), retention)


def _settling(s: Session, reservation_id: str, token_id: int | None) -> Any:
    """The call to settle, locked, with its run's facts and the cost of the run's other settled calls;
    NOT_FOUND for a reservation that is not there or whose run the agent (`token_id`) does not hold."""
    call = s.execute(statements.settling(), {"p_id": reservation_id}).first()
    if call is None or (token_id is not None and not tenancy.agent_holds(call.agent, call.token_id, token_id)):
        raise NotFound(f"no reservation {reservation_id!r}", field="reservation_id")
    return call


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
