"""How a Change moves on: its ready Tasks get queued runs, a Task that will not succeed blocks its
dependents, and the Change's status follows its Tasks. Each function works inside the caller's
one transaction and appends its Events there."""

from __future__ import annotations

import dataclasses
from typing import Any

from sqlalchemy import case, func, select, update
from sqlalchemy.orm import Session

from controlplane.domain import graph, run_states
from controlplane.store import changes
from controlplane.store.changes import tasks_of
from controlplane.store.events import add_event, new_id, run_event
from controlplane.store.models import Change, ChangeSet, Run, Task, utcnow


@dataclasses.dataclass
class TaskState:
    """What moving a Change on reads of each Task: a row, not an ORM object (a Change may have hundreds
    of Tasks, and every run that ends reads them all)."""

    id: str
    key: str
    status: str
    reason: str
    depends_on: list[str]


def task_states(s: Session, change_id: str) -> list[TaskState]:
    q = select(Task.id, Task.key, Task.status, Task.reason, Task.depends_on).where(Task.change_id == change_id)
    return [TaskState(*row) for row in s.execute(q.order_by(Task.position))]


@dataclasses.dataclass
class ChangeState:
    """What settling a Change reads of it and may write: a row, not an ORM object."""

    id: str
    status: str
    cancel_requested: bool
    candidate_state: str
    reason: str


def change_state(s: Session, change_id: str) -> ChangeState:
    """The Change's row (the caller holds its lock: `locks.lock_changes`)."""
    q = select(Change.id, Change.status, Change.cancel_requested, Change.candidate_state, Change.reason)
    return ChangeState(*s.execute(q.where(Change.id == change_id)).one())


BUDGET_STOP = "budget_stop"


def tally(s: Session, change_id: str) -> graph.Tally:
    """The Change's Tasks counted by status, in one grouped statement."""
    budget_stop = case((func.substr(Task.reason, 1, len(BUDGET_STOP)) == BUDGET_STOP, 1), else_=0)
    q = select(Task.status, func.count(), func.max(budget_stop)).where(Task.change_id == change_id)
    rows = s.execute(q.group_by(Task.status)).all()
    return graph.Tally({status: n for status, n, _ in rows}, any(st == "blocked" and b for st, _, b in rows))


def advance(s: Session, change: Change) -> None:
    """Make ready what can run, then settle the Change's status."""
    tasks = task_states(s, change.id)
    by_key = {t.key: t for t in tasks}
    if not change.cancel_requested:
        ready = graph.ready_tasks({t.key: t.status for t in tasks}, {t.key: t.depends_on for t in tasks})
        if ready:  # one UPDATE and one read for them all, their runs in one INSERT (a Change of 100 Tasks)
            made = {t.key: t for t in dependents_by_id(s, [by_key[key].id for key in ready])}
            s.execute(update(Task).where(Task.id.in_([t.id for t in made.values()])).values(status="ready"))
            for key in ready:
                by_key[key].status = "ready"
                add_event(s, "task.ready", change_id=change.id, task_id=made[key].id, key=key)
                queue_run(s, made[key], attempt=1, flush=False)
            s.flush()
    settle_change(s, change, graph.tally((t.status, t.reason) for t in tasks))


def advance_after(s: Session, change: ChangeState, finished: str) -> None:
    """After the Task `finished` succeeded: make ready those of its dependents that can run now, then
    settle the Change's status. Reads the pending dependents, their other dependencies' statuses and a
    count of the Change's Tasks by status: O(dependents), whatever the Change's size."""
    if not change.cancel_requested:
        dependents = pending_dependents(s, change.id, finished)
        others = {d for t in dependents for d in t.depends_on} - {finished}
        statuses = {t.key: "pending" for t in dependents} | statuses_of(s, change.id, others)
        ready = set(graph.newly_ready({t.key: t.depends_on for t in dependents}, statuses | {finished: "succeeded"}))
        made = [t for t in dependents if t.key in ready]
        if made:
            s.execute(update(Task).where(Task.id.in_([t.id for t in made])).values(status="ready"))
        for task in made:
            add_event(s, "task.ready", change_id=change.id, task_id=task.id, key=task.key)
            queue_run(s, task, attempt=1, flush=False)  # the runs go in one INSERT, at the next read
    settle_change(s, change, tally(s, change.id))


@dataclasses.dataclass(frozen=True)
class Dependent:
    """A pending Task waiting on a finished one: what making it ready and queueing its run read."""

    id: str
    change_id: str
    key: str
    depends_on: list[str]
    command: list[str]
    spec: dict[str, Any]


def pending_dependents(s: Session, change_id: str, key: str) -> list[Dependent]:
    """The pending Tasks of the Change that depend on `key` directly, in submission order."""
    q = select(Task.id, Task.change_id, Task.key, Task.depends_on, Task.command, Task.spec)
    q = q.where(Task.change_id == change_id, Task.status == "pending", changes.needs(s, key))
    return [Dependent(*row) for row in s.execute(q.order_by(Task.position))]


def dependents_by_id(s: Session, ids: list[str]) -> list[Dependent]:
    """The Tasks `ids`, read as `pending_dependents` reads them."""
    q = select(Task.id, Task.change_id, Task.key, Task.depends_on, Task.command, Task.spec).where(Task.id.in_(ids))
    return [Dependent(*row) for row in s.execute(q)]


def statuses_of(s: Session, change_id: str, keys: set[str]) -> dict[str, str]:
    if not keys:
        return {}
    q = select(Task.key, Task.status).where(Task.change_id == change_id, Task.key.in_(sorted(keys)))
    return {row.key: row.status for row in s.execute(q)}


def settle_change(s: Session, change: Change | ChangeState, tasks: graph.Tally) -> None:
    if change.status in graph.TERMINAL_CHANGE:
        return
    status = graph.settled_status(tasks, change.status, cancel_requested=change.cancel_requested)
    if status in graph.TERMINAL_CHANGE and _has_active_run(s, change.id):
        return  # cancelled runs still winding down; the Change ends with its last run
    if status == "succeeded" and change.candidate_state != "composed":
        if (
            change.candidate_state == ""
            and s.scalar(select(ChangeSet.id).where(ChangeSet.change_id == change.id).limit(1)) is not None
        ):
            _write(s, change, candidate_state="pending")  # the composer merges the ChangeSets, then finishes it
            add_event(s, "change.composing", change_id=change.id)
        if change.candidate_state == "pending":
            return
    if status != change.status:
        if status in graph.TERMINAL_CHANGE:
            _write(s, change, status=status, finished_at=utcnow())
            add_event(
                s,
                "change.finished",
                change_id=change.id,
                status=status,
                tasks={k: n for k, n in tasks.counts.items() if n},
                **({"limit": change.reason} if status == "budget_blocked" else {}),
            )
        else:
            _write(s, change, status=status)
            add_event(s, f"change.{status}", change_id=change.id)


def _has_active_run(s: Session, change_id: str) -> bool:
    q = select(Run.id).where(Run.change_id == change_id, Run.state.in_(run_states.ACTIVE)).limit(1)
    return s.scalar(q) is not None


def _write(s: Session, change: Change | ChangeState, **values: Any) -> None:
    """Set the Change's columns: on its ORM object when the caller holds one (flushed with the rest),
    else in one UPDATE (which also updates a copy of the Change the session may hold)."""
    if isinstance(change, ChangeState):
        s.execute(update(Change).where(Change.id == change.id).values(**values))
    for name, value in values.items():
        setattr(change, name, value)


def queue_run(s: Session, task: Task | Dependent, attempt: int, *, flush: bool = True) -> Run:
    run = Run(
        id=new_id("run"),
        change_id=task.change_id,
        task_id=task.id,
        attempt=attempt,
        state="queued",
        driver=graph.driver(task.command, task.spec or {}),
        created_at=utcnow(),
    )
    s.add(run)
    if flush:
        s.flush()
    run_event(s, "run.queued", run, key=task.key, attempt=attempt)
    return run


def block_dependents(s: Session, change: Change, task: Task) -> None:
    """Pending Tasks that needed `task` (directly or through others) can no longer run."""
    tasks = tasks_of(s, change.id)
    blocked = set(
        graph.dependents_to_block(task.key, {t.key: t.status for t in tasks}, {t.key: t.depends_on for t in tasks})
    )
    for t in tasks:
        if t.key in blocked:
            t.status, t.reason = "blocked", f"dependency {task.key} {task.status}"
            add_event(s, "task.blocked", change_id=change.id, task_id=t.id, key=t.key, because=task.key)
