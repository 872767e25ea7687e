"""State changes of Changes: submit, cancel, raise the budget, record the composed candidate. Each
function runs inside one transaction and appends the Events of what it changed."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.domain import graph, run_states
from controlplane.services import conflicts, recovery
from controlplane.services.progress import advance, settle_change, tally
from controlplane.services.run_lifecycle import finish_run
from controlplane.services.tenancy import Scope, check_owner, visible_change
from controlplane.store.changes import tasks_of
from controlplane.store.events import add_event, new_id, run_event
from controlplane.store.models import Change, Project, Run, Task, utcnow
from drover.errors import FailedPrecondition, InvalidArgument, NotFound


def submit_change(s: Session, spec: graph.ChangeSpec, submitted_by: str, scope: Scope = None) -> str:
    graph.validate(spec)
    if s.get(Project, spec.project) is None or (scope is not None and spec.project not in scope):
        raise NotFound(f"no project {spec.project!r}", field="project")
    change = Change(
        id=new_id("chg"),
        project=spec.project,
        goal=spec.goal,
        criteria=list(spec.criteria),
        invariants=list(spec.invariants),
        budget_usd=spec.budget_usd,
        base_branch=spec.base_branch,
        submitted_by=submitted_by,
        status="open",
        created_at=utcnow(),
    )
    s.add(change)
    s.flush()
    add_event(s, "change.submitted", change_id=change.id, project=spec.project, tasks=len(spec.tasks))
    for position, t in enumerate(spec.tasks):
        s.add(
            Task(
                id=new_id("tsk"),
                change_id=change.id,
                position=position,
                key=t.key,
                kind=t.kind,
                objective=t.objective,
                depends_on=list(t.depends_on),
                command=list(t.command),
                env=dict(t.env),
                timeout_seconds=t.timeout_seconds,
                spec={**t.traits, **workspace_of(t)},
                status="pending",
            )
        )
    s.flush()
    advance(s, change)
    return change.id


def workspace_of(t: graph.TaskSpec) -> dict[str, object]:
    """A command Task's files and workdir, kept with its spec when it has them."""
    kept: dict[str, object] = {}
    if t.workspace_files:
        kept["workspace_files"] = dict(t.workspace_files)
    if t.workdir:
        kept["workdir"] = t.workdir
    return kept


def finish_composition(
    s: Session,
    change_id: str,
    branch: str,
    commit: str,
    conflict: str,
    changeset_id: str = "",
    files: tuple[str, ...] = (),
) -> None:
    """Record the composed candidate branch, or the conflict that stopped it. A merge conflict (the
    ChangeSet `changeset_id` did not merge, in `files`) reopens that ChangeSet's Task stacked on the
    ones it conflicted with, and the Change runs on; the last conflict, or any other failure, ends it."""
    change = s.get(Change, change_id)
    if change is None or change.candidate_state != "pending":
        return
    if conflict:
        add_event(s, "change.candidate_conflict", change_id=change.id, reason=conflict, files=list(files))
        reopened = changeset_id and conflicts.after_candidate_conflict(s, change, changeset_id, list(files))
        if reopened:
            advance(s, change)
            return
        change.candidate_state, change.reason = "failed", conflict
        change.status, change.finished_at = "failed", utcnow()
        add_event(s, "change.finished", change_id=change.id, status="failed", reason=conflict)
        return
    change.candidate_state, change.candidate_branch, change.candidate_commit = "composed", branch, commit
    add_event(s, "change.candidate_composed", change_id=change.id, branch=branch, commit=commit)
    settle_change(s, change, tally(s, change.id))


def cancel_change(
    s: Session,
    change_id: str,
    reason: str = "cancelled by user",
    *,
    scope: Scope = None,
    by: str = "",
    may_manage: bool = True,
) -> list[Run]:
    """Cancel every open Task; answers the active runs whose agents must be told."""
    change = visible_change(s, change_id, scope)
    check_owner(change, by, may_manage, "cancelling")
    if change.status in graph.TERMINAL_CHANGE:
        return []
    change.cancel_requested = True
    add_event(s, "change.cancel_requested", change_id=change.id, reason=reason)
    to_tell: list[Run] = []
    for task in tasks_of(s, change.id):
        if task.status in graph.TERMINAL_TASK:
            continue
        task.status, task.reason = "cancelled", reason
        add_event(s, "task.cancelled", change_id=change.id, task_id=task.id, key=task.key, reason=reason)
        for run in s.scalars(select(Run).where(Run.task_id == task.id, Run.state.not_in(run_states.TERMINAL))):
            if run.state == "queued":
                finish_run(s, run, "cancelled", reason="cancelled")
            else:
                run.cancel_requested = True
                run_event(s, "run.cancel_requested", run, reason=reason)
                to_tell.append(run)
    settle_change(s, change, tally(s, change.id))
    return to_tell


def raise_budget(
    s: Session, change_id: str, budget_usd: float, *, scope: Scope = None, by: str = "", may_manage: bool = True
) -> Change:
    """A higher budget: Tasks stopped by a budget get a fresh attempt window and run again."""
    change = visible_change(s, change_id, scope, lock=True)
    check_owner(change, by, may_manage, "raising the budget of")
    if budget_usd <= change.budget_usd:
        raise InvalidArgument(f"must be more than the current budget {change.budget_usd:g}", field="budget_usd")
    if change.status in ("succeeded", "failed", "cancelled"):
        raise FailedPrecondition(f"change {change_id} is {change.status}", field="change_id")
    old, change.budget_usd = change.budget_usd, budget_usd
    add_event(s, "change.budget_raised", change_id=change.id, previous_usd=old, budget_usd=budget_usd)
    from controlplane.store import meters  # the meters import the lifecycle's helpers

    meters.raise_limit(s, f"change-usd:{change.id}", round(budget_usd * 1_000_000))
    tasks = tasks_of(s, change.id)
    stopped = [t for t in tasks if t.status == "blocked" and t.reason.startswith("budget_stop")]
    recovery.reopen(s, change, tasks, stopped, "budget raised")
    s.flush()
    advance(s, change)
    return change
