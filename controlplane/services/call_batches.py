"""Model calls' reservations and settles many to a statement: what one group-commit batch of
ReserveModelCall and SettleModelCall units (`controlplane.api.agent_service`) runs instead of each
unit's own statements, so a batch of 50 pairs costs about ten round trips to the database, not 400.

Every unit answers exactly what it would alone (`ReserveUnit.alone`, `SettleUnit.alone`, which
are `model_calls.reserve` and `model_calls.settle_for_agent`): the batch reads the facts of all its
runs and calls in one query each, answers in memory the units whose answer writes nothing (NOT_FOUND,
INVALID_ARGUMENT, a key already held, a run no longer running, a call already settled), admits
the rest against this holder's escrow slices locked once (`controlplane.store.escrow_batch`), and
writes the admitted calls, their shares and the settles in one statement each. A unit whose answer
writes an event or needs more than its slice holds (the call cap, the run's share of a budget, a
meter to refill or create, a usage above its reservation), or that repeats a run or a reservation
already in the batch, is run alone afterwards in a savepoint of its own, in the same transaction.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy.orm import Session

from controlplane.config import HarnessConfig
from controlplane.domain import pricing
from controlplane.services import model_call_statements as statements
from controlplane.services import model_calls, tenancy
from controlplane.store import escrow_batch, locks, meters
from controlplane.store.events import new_id
from controlplane.store.models import utcnow
from drover.core.usage import Usage
from drover.errors import DroverError, NotFound

Reservation = model_calls.Reservation
Settled = tuple[str, int, int]
"""A settle's answer: (run id, cost of the call, cost of the run so far)."""


@dataclasses.dataclass
class ReserveUnit:
    config: HarnessConfig
    run_id: str
    key: str
    model: str
    purpose: str
    max_output_tokens: int
    estimated_input_tokens: int
    token_id: int | None
    after: Callable[[Session, Reservation], None] | None = None
    """Run in the same transaction with each answer (a batch run again runs it again)."""

    def alone(self, s: Session) -> Reservation:
        r = model_calls.reserve(
            s,
            self.config,
            self.run_id,
            self.key,
            self.model,
            self.purpose,
            self.max_output_tokens,
            self.estimated_input_tokens,
            token_id=self.token_id,
        )
        return self.answered(s, r)

    def answered(self, s: Session, r: Reservation) -> Reservation:
        if self.after is not None:
            self.after(s, r)
        return r


@dataclasses.dataclass
class SettleUnit:
    config: HarnessConfig
    reservation_id: str
    usage: Usage
    error: str
    token_id: int | None

    def alone(self, s: Session) -> Settled:
        return model_calls.settle_for_agent(s, self.config, self.reservation_id, self.usage, self.error, self.token_id)


Unit = ReserveUnit | SettleUnit


def alone(s: Session, unit: Unit) -> Any:
    """One unit by itself (GroupCommit's `fn`)."""
    return unit.alone(s)


def apply_many(s: Session, units: Sequence[Unit]) -> list[Any]:
    """Every unit's answer (an error as a value), the settles first, then the reservations, then the
    units that go alone. GroupCommit's `many`."""
    answers: list[Any] = [None] * len(units)
    settles = [(i, u) for i, u in enumerate(units) if isinstance(u, SettleUnit)]
    reserves = [(i, u) for i, u in enumerate(units) if isinstance(u, ReserveUnit)]
    slow = _settle(s, settles, answers) + _reserve(s, reserves, answers)
    for i in sorted(slow):
        answers[i] = _in_savepoint(s, units[i])
    return answers


def _in_savepoint(s: Session, unit: Unit) -> Any:
    try:
        with s.begin_nested():
            return unit.alone(s)
    except Exception as err:
        if locks.retry_reason(err) is not None:
            raise  # the whole batch runs again (`controlplane.store.group_commit`)
        return err


# --- settles -------------------------------------------------------------------------------------------


def _settle(s: Session, units: list[tuple[int, SettleUnit]], answers: list[Any]) -> list[int]:
    if not units:
        return []
    ids = sorted({u.reservation_id for _, u in units})
    calls = {row[0]: row[1:] for row in s.execute(statements.settling_many(), {"p_ids": ids})}
    slow: list[int] = []
    seen: set[str] = set()
    spent: dict[str, int] = {}
    """What the batch's earlier settles of a run added to its cost."""
    written: list[tuple[SettleUnit, int, str, str]] = []
    for i, u in units:
        call = calls.get(u.reservation_id)
        if u.reservation_id in seen:
            slow.append(i)  # alone, afterwards: it finds the call settled
            continue
        seen.add(u.reservation_id)
        if call is None or (u.token_id is not None and not tenancy.agent_holds(call[7], call[8], u.token_id)):
            answers[i] = NotFound(f"no reservation {u.reservation_id!r}", field="reservation_id")
            continue
        model, run_id, state, cost, reserved, tier, member = call[:7]
        before = int(call[-1] or 0) + spent.get(run_id, 0)
        if state != "settled":
            reported = pricing.cost_micros(u.usage, pricing.price_for(model, u.config.prices))
            settled = pricing.settled_micros(reported, reserved)
            if settled.excess:  # recorded as an event: alone
                slow.append(i)
                continue
            cost = settled.applied
            written.append((u, cost, tier, member))
            spent[run_id] = spent.get(run_id, 0) + cost
        answers[i] = (run_id, cost, before + cost)
    if written:
        s.execute(
            statements.settled(),
            [model_calls.settled_params(u.reservation_id, c, u.usage, u.error) for u, c, _, _ in written],
        )
        exact = [(u.reservation_id, meters.settled_prefixes(meters.exact_for(c))) for u, c, _, _ in written]
        escrow_batch.settle_many(s, exact)
        for u, cost, tier, member in written:
            model_calls.after_settle(s, u.config, tier, member, cost, u.error)
    return slow


# --- reservations --------------------------------------------------------------------------------------


@dataclasses.dataclass
class _Plan:
    index: int
    unit: ReserveUnit
    facts: model_calls.Facts
    wants: list[Any]
    estimate: int
    call_id: str = ""


def _reserve(s: Session, units: list[tuple[int, ReserveUnit]], answers: list[Any]) -> list[int]:
    if not units:
        return []
    plans, slow = _screen(s, units, answers)
    room = _share_room(s, [p for p in plans if p.facts.budget_usd > 0])
    admission = escrow_batch.Admission.lock(s, [w.key for p in plans for w in p.wants])
    admitted: list[_Plan] = []
    for p in plans:
        share = room.get(p.unit.run_id)
        if share is not None and share[1] + p.estimate > share[0]:
            slow.append(p.index)  # refused with an event: alone
            continue
        p.call_id = new_id("mc")
        if admission.admit(p.call_id, p.wants):
            admitted.append(p)
        else:
            slow.append(p.index)  # its slice lacks room, or does not exist yet: alone, through the meters
    recorded = _insert_calls(s, admitted)
    lost = {p.call_id for p in admitted if p.call_id not in recorded}  # a concurrent reservation of the key
    admission.forget(lost)
    admission.write(s)
    for p in admitted:
        if p.call_id in lost:
            slow.append(p.index)
            continue
        cap = model_calls.call_cap(p.unit.config, p.facts.tier)
        calls = p.facts.calls + (p.unit.purpose == "agent")
        answers[p.index] = p.unit.answered(s, Reservation(p.call_id, True, "", calls, cap, p.estimate))
    return slow


def _screen(s: Session, units: list[tuple[int, ReserveUnit]], answers: list[Any]) -> tuple[list[_Plan], list[int]]:
    """The facts of every unit's run, read in two queries; the units answered without a write are
    answered, the rest planned (their meters' wants) or left to go alone."""
    runs = sorted({u.run_id for _, u in units})
    rows = {row[0]: row for row in s.execute(statements.facts_many(), {"p_runs": runs})}
    keys = sorted({u.key for _, u in units})
    held = {
        (r[0], r[1]): (r[2], r[3] or 0) for r in s.execute(statements.existing_many(), {"p_runs": runs, "p_keys": keys})
    }
    plans: list[_Plan] = []
    slow: list[int] = []
    seen: set[str] = set()
    now = utcnow()
    for i, u in units:
        row = rows.get(u.run_id)
        existing, estimate = held.get((u.run_id, u.key), ("", 0))
        facts = None if row is None else model_calls.facts_of(row[1:10], existing, estimate, row[10], row[11])
        try:
            early = model_calls.screened(facts, u.config, u.run_id, u.key, u.purpose, u.token_id)
        except DroverError as err:
            answers[i] = err
            continue
        if early is not None:
            answers[i] = u.answered(s, early)
            continue
        assert facts is not None
        capped = u.purpose == "agent" and facts.calls >= model_calls.call_cap(u.config, facts.tier)
        if u.run_id in seen or capped:  # a second call of a run, or the cap's event: alone
            slow.append(i)
            continue
        seen.add(u.run_id)
        estimate = model_calls.estimate_of(u.config, u.model, u.max_output_tokens, u.estimated_input_tokens)
        specs = facts.meters(now, u.config.budgets)
        plans.append(_Plan(i, u, facts, meters.wants_for(specs, meters.amounts_for(specs, estimate)), estimate))
    return plans, slow


def _share_room(s: Session, plans: list[_Plan]) -> dict[str, tuple[int, int]]:
    """For each run of a budgeted Change: (its share of the budget, its settled cost), as
    `model_calls.run_share` and `run_cost` read them, for all the batch's runs in three queries."""
    if not plans:
        return {}
    runs = sorted({p.unit.run_id for p in plans})
    changes = sorted({p.facts.change_id for p in plans})
    run_cost = {r: int(c or 0) for r, c in s.execute(statements.run_costs(), {"p_runs": runs})}
    change_cost = {ch: int(c or 0) for ch, c in s.execute(statements.change_costs(), {"p_changes": changes})}
    open_tasks = dict(s.execute(statements.open_task_counts(model_calls.CLOSED_TASK), {"p_changes": changes}).all())
    room: dict[str, tuple[int, int]] = {}
    for p in plans:
        run, change = p.unit.run_id, p.facts.change_id
        mine = run_cost.get(run, 0)
        left = meters.usd_micros(p.facts.budget_usd) - (change_cost.get(change, 0) - mine)
        room[run] = (left // max(open_tasks.get(change, 0), 1), mine)
    return room


def _insert_calls(s: Session, plans: list[_Plan]) -> set[str]:
    """The planned calls in one statement; answers the ids recorded (a key a concurrent transaction
    recorded first is not)."""
    if not plans:
        return set()
    at = utcnow()
    rows = [
        {
            "p_id": p.call_id,
            "p_run": p.unit.run_id,
            "p_key": p.unit.key,
            "p_model": p.unit.model,
            "p_purpose": p.unit.purpose,
            "p_estimate": p.estimate,
            "p_at": at,
        }
        for p in plans
    ]
    return set(s.execute(statements.insert_call(s.get_bind().dialect.name), rows).scalars())
