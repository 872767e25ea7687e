"""How a Change moves on: its ready Tasks get queued runs, a Task that will not succeed blocks its
dependents, and the Change's status follows its Tasks. Each function works inside the caller's
one transaction and appends its Events there."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.domain import graph, run_states
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


def advance(s: Session, change: Change) -> None:
    """Make ready what can run, then settle the Change's status."""
    tasks = task_states(s, change.id)
    by_key = {t.key: t for t in tasks}
    if not change.cancel_requested:
        statuses = {t.key: t.status for t in tasks}
        for key in graph.ready_tasks(statuses, {t.key: t.depends_on for t in tasks}):
            task = s.get(Task, by_key[key].id)
            assert task is not None
            task.status = by_key[key].status = "ready"
            add_event(s, "task.ready", change_id=change.id, task_id=task.id, key=key)
            queue_run(s, task, attempt=1)
    settle_change(s, change, tasks)


def settle_change(s: Session, change: Change, tasks: Sequence[Task | TaskState]) -> None:
    if change.status in graph.TERMINAL_CHANGE:
        return
    active = s.scalar(select(Run.id).where(Run.change_id == change.id, Run.state.in_(run_states.ACTIVE)).limit(1))
    started = change.status == "running" or any(t.status in ("running", "succeeded", "failed") for t in tasks)
    status = graph.change_status((t.status for t in tasks), cancel_requested=change.cancel_requested, started=started)
    if status == "failed" and any(t.status == "blocked" and t.reason.startswith("budget_stop") for t in tasks):
        status = "budget_blocked"  # a person raises the budget (or cancels): the Change can go on
    if status in graph.TERMINAL_CHANGE and active is not None:
        return  # cancelled runs still winding down; the Change ends with its last run
    if status == "succeeded" and change.candidate_state != "composed":
        if (
            change.candidate_state == ""
            and s.scalar(select(ChangeSet.id).where(ChangeSet.change_id == change.id).limit(1)) is not None
        ):
            change.candidate_state = "pending"  # the composer merges the ChangeSets, then finishes it
            add_event(s, "change.composing", change_id=change.id)
        if change.candidate_state == "pending":
            return
    if status != change.status:
        change.status = status
        if status in graph.TERMINAL_CHANGE:
            change.finished_at = utcnow()
            counts: dict[str, int] = {}
            for t in tasks:
                counts[t.status] = counts.get(t.status, 0) + 1
            add_event(
                s,
                "change.finished",
                change_id=change.id,
                status=status,
                tasks=counts,
                **({"limit": change.reason} if status == "budget_blocked" else {}),
            )
        else:
            add_event(s, f"change.{status}", change_id=change.id)


def queue_run(s: Session, task: Task, attempt: int) -> Run:
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
