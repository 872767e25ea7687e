"""A run's result that reaches the control plane after the run was ended as `agent_lost` (its agent was
judged gone, then came back with the result). Applied when nothing moved on since: the run succeeds,
its Task succeeds, the dependents it blocked wait again and the Change goes on; otherwise the result is
recorded as an event saying why it was not applied. Works inside the caller's transaction."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.domain import graph, presence, run_states
from controlplane.services.progress import advance, block_dependents
from controlplane.store.changes import tasks_of
from controlplane.store.events import add_event, run_event
from controlplane.store.models import Change, Run, Task


def take_late_result(s: Session, run: Run, status: str, exit_code: int, reason: str, error: str) -> bool:
    """A `finished` message for the ended `run`; answers whether it was applied."""
    change = s.get(Change, run.change_id, with_for_update=True)  # one finisher at a time per Change
    task = s.get(Task, run.task_id)
    assert change is not None and task is not None
    rerun = s.scalar(
        select(Run.id).where(Run.task_id == run.task_id, Run.attempt > run.attempt).order_by(Run.attempt).limit(1)
    )
    verdict = presence.judge_late_result(
        run_reason=run.reason,
        reported=status if reason != "parked" else "parked",
        task_status=task.status,
        task_reason=task.reason,
        rerun=rerun or "",
        change_status=change.status,
        cancel_requested=change.cancel_requested,
    )
    reported = {"status": status, "exit_code": exit_code, "reason": reason}
    if error:
        reported["error"] = error[:2000]
    if verdict.action != "apply":
        run_event(s, "run.late_result_ignored", run, why=verdict.why, judged=run.reason, **reported)
        return False
    judged = run.reason
    run_states.check_move(run.state, "succeeded")
    run.state, run.exit_code, run.reason = "succeeded", exit_code, reason
    run_event(s, "run.late_result_applied", run, why=verdict.why, judged=judged, **reported)
    task.status, task.reason = "succeeded", ""
    add_event(s, "task.succeeded", change_id=change.id, task_id=task.id, key=task.key, late=True)
    _unblock_dependents(s, change, task)
    if change.status == "failed":
        change.status, change.finished_at = "running", None
        add_event(s, "change.reopened", change_id=change.id, reason=f"late result of run {run.id}")
    s.flush()
    advance(s, change)
    return True


def _unblock_dependents(s: Session, change: Change, task: Task) -> None:
    """The Tasks blocked because `task` failed wait again, unless another Task that will not succeed
    still stands in their way (then they are blocked by that one)."""
    tasks = tasks_of(s, change.id)
    deps = {t.key: t.depends_on for t in tasks}
    for t in tasks:
        if t.status == "blocked" and t.reason.startswith("dependency ") and task.key in graph.ancestors(t.key, deps):
            t.status, t.reason = "pending", ""
            add_event(s, "task.unblocked", change_id=change.id, task_id=t.id, key=t.key, because=task.key)
    s.flush()
    for other in tasks:
        stopped = other.status == "blocked" and not other.reason.startswith("dependency ")  # by a budget
        if other.status in ("failed", "cancelled") or stopped:
            block_dependents(s, change, other)
