"""How a Task ends when its run did not simply succeed: parked for answers, run again after a merge
conflict, retried or escalated or stopped by a budget (seed 000), or failed or cancelled with its
dependents blocked; then its Change moves on. Works inside `finish_run`'s transaction, with its Events."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.domain import escalation, graph
from controlplane.services import conflicts
from controlplane.services.progress import advance, block_dependents, queue_run
from controlplane.store.engine import aware
from controlplane.store.events import add_event
from controlplane.store.models import Change, DecisionReceipt, Run, Task, utcnow


def end_task(s: Session, run: Run, status: str, *, reason: str, error: str, policy: escalation.Policy | None) -> None:
    """The Task of `run`, which ended with `status`, follows it (when it was ready or running), and its
    Change moves on."""
    task = s.get(Task, run.task_id)
    change = s.get(Change, run.change_id, with_for_update=True)  # one finisher at a time per Change
    assert task is not None and change is not None
    if task.status in ("ready", "running"):
        if status == "succeeded" and reason == "parked":
            task.status, task.reason = "parked", "waiting for answers"  # answering resumes it in a new run
            add_event(s, "task.parked", change_id=change.id, task_id=task.id, key=task.key, run_id=run.id)
        elif status == "succeeded":
            task.status, task.reason = "succeeded", ""
            add_event(s, "task.succeeded", change_id=change.id, task_id=task.id, key=task.key)
        elif (
            status == "failed"
            and reason == "dependency_merge_conflict"
            and conflicts.after_dependency_conflict(s, change, task, error)
        ):
            pass  # the Task whose ChangeSet did not merge runs again, stacked; this one waits for it
        elif run.driver in graph.RUNTIMES and status == "failed" and next_attempt(s, change, task, run, policy):
            pass  # queued again (retry or escalation) or stopped by a budget
        else:
            task.status = "cancelled" if status == "cancelled" else "failed"
            task.reason = reason or status
            add_event(s, f"task.{task.status}", change_id=change.id, task_id=task.id, key=task.key, reason=task.reason)
        if task.status in ("failed", "cancelled", "blocked"):
            block_dependents(s, change, task)
    s.flush()
    advance(s, change)


def _attempt_window(s: Session, task: Task) -> list[escalation.Attempt]:
    """The Task's failed harness runs since its attempt window opened (a raised budget opens one)."""
    since = aware(task.attempts_reset_at)
    out = []
    for r in s.scalars(
        select(Run)
        .where(Run.task_id == task.id, Run.state == "failed", Run.driver.in_(graph.RUNTIMES))
        .order_by(Run.finished_at, Run.id)
    ):
        finished = aware(r.finished_at)
        if since is not None and finished is not None and finished <= since:
            continue
        outcome = r.reason if r.reason in escalation.OUTCOMES else "failed"
        out.append(
            escalation.Attempt(r.tier if r.tier in escalation.TIERS else "sonnet", outcome, finished or utcnow())
        )
    return out


def next_attempt(s: Session, change: Change, task: Task, run: Run, policy: escalation.Policy | None) -> bool:
    """After a failed harness run: retry, escalate, or stop on a budget (seed 000). Answers False when
    the Task simply fails."""
    s.flush()
    policy = policy or escalation.Policy()
    step = escalation.decide(_attempt_window(s, task), policy.allow_opus, policy.retry_delay_seconds)
    if step.action in ("retry", "escalate"):
        task.status, task.reason = "ready", ""
        new = queue_run(s, task, attempt=run.attempt + 1)
        new.tier = step.tier
        new.not_before = utcnow() + dt.timedelta(seconds=step.delay_seconds)
        s.add(
            DecisionReceipt(
                run_id=new.id,
                change_id=change.id,
                task_id=task.id,
                tier=step.tier,
                data={"escalation": escalation.receipt_reason(step) or step.reason},
                created_at=utcnow(),
            )
        )
        if step.action == "escalate":
            add_event(
                s,
                "agent.escalated",
                change_id=change.id,
                task_id=task.id,
                run_id=new.id,
                key=task.key,
                **{"from": step.escalated_from, "to": step.escalated_to, "reason": step.reason},
            )
        else:
            add_event(
                s,
                "task.retrying",
                change_id=change.id,
                task_id=task.id,
                run_id=new.id,
                key=task.key,
                tier=step.tier,
                reason=step.reason,
            )
        return True
    if step.action in ("stop", "replan"):
        task.status, task.reason = "blocked", f"budget_stop: {step.limit}"
        add_event(
            s,
            "budget.stopped",
            change_id=change.id,
            task_id=task.id,
            run_id=run.id,
            key=task.key,
            limit=step.limit,
            reason=step.reason,
        )
        change.reason = step.limit
        return True
    return False
