"""Merge conflicts reopen the later Task (controlplane/domain/conflicts.py decides which, with which
edge). Each function runs inside the caller's one transaction and appends `task.reopened` there;
it answers False when the conflict is final (the caller fails as before, naming the files)."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from controlplane.domain import conflicts, graph
from controlplane.services.progress import queue_run
from controlplane.store.changes import latest_changesets, tasks_by_key
from controlplane.store.events import add_event
from controlplane.store.models import Change, ChangeSet, Event, Run, Task


def after_candidate_conflict(s: Session, change: Change, changeset_id: str, files: list[str]) -> bool:
    """The composer could not merge `changeset_id`: reopen its Task on the ones merged before it."""
    tasks = tasks_by_key(s, change.id)
    return _reopen(s, change, tasks, list(tasks), changeset_id, files, "candidate_conflict", None)


def after_dependency_conflict(s: Session, change: Change, dependent: Task, error: str) -> bool:
    """`dependent`'s run could not merge its dependencies' ChangeSets (`error` names the one that did not
    merge and the files): reopen that ChangeSet's Task on the others; `dependent` waits for it again."""
    parsed = conflicts.parse_run_error(error)
    if parsed is None:
        return False
    changeset_id, files = parsed
    tasks = tasks_by_key(s, change.id)
    cause = "dependency_merge_conflict"
    return _reopen(s, change, tasks, dependent.depends_on, changeset_id, list(files), cause, dependent)


def _merge_order(
    s: Session, tasks: dict[str, Task], merged: list[str], deps: dict[str, list[str]]
) -> list[conflicts.Merged]:
    """The `merged` Tasks' newest ChangeSets in the order they are stacked, each with the files it changed."""
    latest = latest_changesets(s, [tasks[k].id for k in merged])
    present = [k for k in merged if tasks[k].id in latest]
    tie = {k: (latest[tasks[k].id].created_at.isoformat(), tasks[k].id) for k in present}
    return [
        conflicts.Merged(k, tuple(latest[tasks[k].id].own_files or latest[tasks[k].id].files))
        for k in graph.stack_order(present, deps, tie)
    ]


def _reopen(
    s: Session,
    change: Change,
    tasks: dict[str, Task],
    merged: list[str],
    changeset_id: str,
    files: list[str],
    cause: str,
    dependent: Task | None,
) -> bool:
    changeset = s.get(ChangeSet, changeset_id)
    by_id = {t.id: t for t in tasks.values()}
    if changeset is None or changeset.task_id not in by_id:
        return False
    task = by_id[changeset.task_id]
    deps = {k: t.depends_on for k, t in tasks.items()}
    order = _merge_order(s, tasks, merged, deps)
    reopened = s.scalar(
        select(func.count(Event.id)).where(
            Event.change_id == change.id, Event.kind == "task.reopened", Event.task_id == task.id
        )
    )
    decision = conflicts.decide(order, task.key, files, reopened or 0, deps)
    if not decision.reopen:
        return False
    task.depends_on = [*task.depends_on, *decision.depends_on]
    deps[task.key] = task.depends_on
    add_event(
        s,
        "task.reopened",
        change_id=change.id,
        task_id=task.id,
        key=task.key,
        reason=cause,
        depends_on=list(decision.depends_on),
        files=files,
        changeset_id=changeset_id,
        reopening=(reopened or 0) + 1,
        **({"dependent": dependent.key} if dependent is not None else {}),
    )
    # Whatever was built on its old ChangeSet runs again on the new one.
    later = {k for k in tasks if task.key in graph.ancestors(k, deps)}
    for k in later:
        if tasks[k].status == "succeeded" or tasks[k] is dependent:
            tasks[k].status, tasks[k].reason = "pending", ""
    if all(tasks[d].status == "succeeded" for d in task.depends_on):
        task.status, task.reason = "ready", ""
        last = s.scalar(select(func.max(Run.attempt)).where(Run.task_id == task.id)) or 0
        run = queue_run(s, task, attempt=last + 1)
        add_event(s, "task.ready", change_id=change.id, task_id=task.id, run_id=run.id, key=task.key, reason=cause)
    else:
        task.status, task.reason = "pending", ""
    change.candidate_state, change.reason = "", ""
    s.flush()
    return True
