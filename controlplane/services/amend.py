"""Amend a running Change (issue 29, seed 000 "Escalation": the replan a person does): add Tasks and
dependency edges, checked as a submit's Tasks are, in one transaction with its `change.amended` Event.

Only an `open` or `running` Change is amended: one that ended (succeeded, failed, budget_blocked,
cancelled) or whose candidate is being composed is FAILED_PRECONDITION; a failed one runs again after
`RetryTask`, and is amended then. An existing Task gains a dependency only while it is `pending`: a
Task that is ready (its run queued), running or finished has started.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.orm import Session

from controlplane.domain import graph
from controlplane.services.change_lifecycle import workspace_of
from controlplane.services.progress import advance
from controlplane.services.tenancy import Scope, check_owner, visible_change
from controlplane.store.changes import tasks_of
from controlplane.store.events import add_event, new_id
from controlplane.store.models import Change, Task
from drover.errors import FailedPrecondition, InvalidArgument

Edge = tuple[str, str]
"""(task, depends_on): Task keys of the Change."""


def amend_change(
    s: Session,
    change_id: str,
    tasks: Sequence[graph.TaskSpec],
    edges: Sequence[Edge],
    *,
    scope: Scope = None,
    by: str = "",
    may_manage: bool = True,
) -> Change:
    """Add `tasks` and `edges` to the Change; the new Tasks become ready by the graph's rules."""
    change = visible_change(s, change_id, scope, lock=True)
    check_owner(change, by, may_manage, "amending")
    if change.cancel_requested or change.status not in ("open", "running"):
        status = "cancelled" if change.cancel_requested else change.status
        then = "; retry its failed Tasks first (RetryTask), then amend it" if status == "failed" else ""
        raise FailedPrecondition(f"change {change.id} is {status}{then}", field="change_id")
    if change.candidate_state == "pending":
        raise FailedPrecondition(f"change {change.id} is composing its candidate", field="change_id")
    if not tasks and not edges:
        raise InvalidArgument("an amendment adds at least one Task or edge", field="tasks")
    existing = tasks_of(s, change.id)
    _check(existing, tasks, edges)
    by_key = {t.key: t for t in existing}
    for task_key, dep in edges:
        if task_key in by_key:
            task = by_key[task_key]
            task.depends_on = [*task.depends_on, dep]
    added_edges = {t.key: [d for k, d in edges if k == t.key] for t in tasks}
    for position, t in enumerate(tasks, start=len(existing)):
        s.add(
            Task(
                id=new_id("tsk"),
                change_id=change.id,
                position=position,
                key=t.key,
                kind=t.kind,
                objective=t.objective,
                depends_on=[*t.depends_on, *added_edges[t.key]],
                command=list(t.command),
                env=dict(t.env),
                timeout_seconds=t.timeout_seconds,
                spec={**t.traits, **workspace_of(t)},
                status="pending",
            )
        )
    add_event(
        s,
        "change.amended",
        change_id=change.id,
        by=by,
        tasks=[t.key for t in tasks],
        edges=[[t.key, d] for t in tasks for d in t.depends_on] + [[k, d] for k, d in edges],
    )
    s.flush()
    advance(s, change)
    return change


def _check(existing: Sequence[Task], tasks: Sequence[graph.TaskSpec], edges: Sequence[Edge]) -> None:
    """INVALID_ARGUMENT or FAILED_PRECONDITION naming the first bad field; nothing is written yet."""
    old = {t.key: t for t in existing}
    if len(existing) + len(tasks) > graph.MAX_TASKS:
        raise InvalidArgument(
            f"the Change has {len(existing)} Tasks; at most {graph.MAX_TASKS} with the new ones", field="tasks"
        )
    for i, t in enumerate(tasks):
        if t.key in old:
            raise InvalidArgument(f"the Change already has a Task {t.key!r}", field=f"tasks[{i}].key")
    if tasks:  # a submit's checks of each Task, its keys and its depends_on (existing keys count as known)
        stubs = tuple(graph.TaskSpec(key=k, kind="existing", objective="existing") for k in old)
        graph.validate(graph.ChangeSpec(project="-", goal="-", tasks=(*tasks, *stubs)))
    keys = set(old) | {t.key for t in tasks}
    for i, (task_key, dep) in enumerate(edges):
        for key in (task_key, dep):
            if key not in keys:
                raise InvalidArgument(f"unknown Task {key!r}", field=f"edges[{i}]")
        if task_key == dep:
            raise InvalidArgument(f"Task {dep!r} depends on itself", field=f"edges[{i}]")
        started = old.get(task_key)
        if started is not None and started.status != "pending":
            raise FailedPrecondition(
                f"Task {task_key!r} is {started.status}: it has started, so it can gain no dependency",
                field=f"edges[{i}]",
            )
    deps = {k: list(t.depends_on) for k, t in old.items()} | {t.key: list(t.depends_on) for t in tasks}
    for task_key, dep in edges:
        deps[task_key].append(dep)
    cycle = graph.find_cycle(deps)
    if cycle:
        raise InvalidArgument("cycle " + " -> ".join(cycle), field="edges")
