"""The statements of every model call's reserve and settle (`controlplane.services.model_calls`), built
once with bound parameters and reused: building a statement and its cache key costs SQLAlchemy more CPU
than running it (benchmarks/budgets.py). Parameters are named p_*."""

from __future__ import annotations

import functools
from typing import Any, cast

from sqlalchemy import Table, bindparam, func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import aliased

from controlplane.store.models import Agent, Change, ModelCall, Project, Run, Task, Token

CALLS = cast(Table, ModelCall.__table__)


@functools.cache
def insert_call(dialect: str) -> Any:
    upsert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    return (
        upsert(CALLS)
        .values(
            id=bindparam("p_id"),
            run_id=bindparam("p_run"),
            key=bindparam("p_key"),
            model=bindparam("p_model"),
            purpose=bindparam("p_purpose"),
            estimate_micros=bindparam("p_estimate"),
            created_at=bindparam("p_at"),
        )
        .on_conflict_do_nothing(index_elements=["run_id", "key"])
        .returning(CALLS.c.id)
    )


def _run_facts() -> list[Any]:
    """What a reservation reads of its run, Change, Project, user and agent (see `model_calls._Facts`)."""
    return [
        Run.state,
        Run.tier,
        Run.change_id,
        Change.budget_usd,
        Change.project,
        Change.submitted_by,
        func.coalesce(Project.monthly_budget_usd, 0.0),
        select(Token.monthly_budget_usd)
        .where(Token.name == Change.submitted_by)
        .order_by(Token.id)
        .limit(1)
        .scalar_subquery(),
        select(func.count()).where(ModelCall.run_id == Run.id, ModelCall.purpose == "agent").scalar_subquery(),
    ]


def _joined(query: Any) -> Any:
    return (
        query.join(Change, Change.id == Run.change_id)
        .outerjoin(Project, Project.name == Change.project)
        .outerjoin(Agent, Agent.name == Run.agent)
    )


@functools.cache
def facts() -> Any:
    same = (ModelCall.run_id == Run.id, ModelCall.key == bindparam("p_key"))
    existing = [
        select(ModelCall.id).where(*same).scalar_subquery(),
        select(ModelCall.estimate_micros).where(*same).scalar_subquery(),
    ]
    return _joined(select(*_run_facts(), *existing, Run.agent, Agent.token_id)).where(Run.id == bindparam("p_run"))


@functools.cache
def facts_many() -> Any:
    """`facts` of every run in `p_runs` (one row a run, its id first), without the key's reservation."""
    columns = [Run.id, *_run_facts(), Run.agent, Agent.token_id]
    return _joined(select(*columns)).where(Run.id.in_(bindparam("p_runs", expanding=True)))


@functools.cache
def existing_many() -> Any:
    """The reservations of the runs `p_runs` with a key in `p_keys` (a superset of the batch's pairs)."""
    return select(ModelCall.run_id, ModelCall.key, ModelCall.id, ModelCall.estimate_micros).where(
        ModelCall.run_id.in_(bindparam("p_runs", expanding=True)),
        ModelCall.key.in_(bindparam("p_keys", expanding=True)),
    )


@functools.cache
def run_costs() -> Any:
    """The settled cost of each run in `p_runs` (a run without settled calls has no row)."""
    return (
        select(ModelCall.run_id, func.sum(ModelCall.cost_micros))
        .where(ModelCall.run_id.in_(bindparam("p_runs", expanding=True)), ModelCall.state == "settled")
        .group_by(ModelCall.run_id)
    )


@functools.cache
def change_costs() -> Any:
    """The settled cost of each Change in `p_changes` (one without settled calls has no row)."""
    return (
        select(Run.change_id, func.sum(ModelCall.cost_micros))
        .join(Run, Run.id == ModelCall.run_id)
        .where(Run.change_id.in_(bindparam("p_changes", expanding=True)), ModelCall.state == "settled")
        .group_by(Run.change_id)
    )


@functools.cache
def open_task_counts(closed: tuple[str, ...]) -> Any:
    """The Tasks of each Change in `p_changes` whose status is not in `closed`."""
    return (
        select(Task.change_id, func.count())
        .where(Task.change_id.in_(bindparam("p_changes", expanding=True)), Task.status.not_in(closed))
        .group_by(Task.change_id)
    )


def _settling_columns() -> list[Any]:
    # The run's other settled calls, read with the call: this call's own cost is the locked row's,
    # so a settle that waited for another settle of this call still counts it once.
    other = aliased(ModelCall)
    others_cost = (
        select(func.coalesce(func.sum(other.cost_micros), 0))
        .where(other.run_id == ModelCall.run_id, other.state == "settled", other.id != ModelCall.id)
        .scalar_subquery()
    )
    return [
        ModelCall.model,
        ModelCall.run_id,
        ModelCall.state,
        ModelCall.cost_micros,
        ModelCall.estimate_micros,
        Run.tier,
        Run.member,
        Run.agent,
        Agent.token_id,
        others_cost,
    ]


@functools.cache
def settling() -> Any:
    return (
        select(*_settling_columns())
        .join(Run, Run.id == ModelCall.run_id)
        .outerjoin(Agent, Agent.name == Run.agent)
        .where(ModelCall.id == bindparam("p_id"))
        .with_for_update(of=ModelCall)  # one settle at a time
    )


@functools.cache
def settling_many() -> Any:
    """`settling` of every call in `p_ids` (its id first), locked in id order."""
    return (
        select(ModelCall.id, *_settling_columns())
        .join(Run, Run.id == ModelCall.run_id)
        .outerjoin(Agent, Agent.name == Run.agent)
        .where(ModelCall.id.in_(bindparam("p_ids", expanding=True)))
        .order_by(ModelCall.id)
        .with_for_update(of=ModelCall)
    )


@functools.cache
def settled() -> Any:
    return (
        update(CALLS)
        .where(CALLS.c.id == bindparam("p_id"))
        .values(
            cost_micros=bindparam("p_cost"),
            input_tokens=bindparam("p_input"),
            output_tokens=bindparam("p_output"),
            cache_write_tokens=bindparam("p_cache_write"),
            cache_read_tokens=bindparam("p_cache_read"),
            error=bindparam("p_error"),
            state="settled",
            settled_at=bindparam("p_at"),
        )
    )
