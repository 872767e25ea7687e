"""Admission at dispatch: which queued runs their Changes' caps let start (max_active_runs_per_change,
and max_open_sandboxes_per_change for the runs that open a sandbox), counted per Change in one query; a
run a cap holds stays queued and is said once (run.blocked_limit). The decisions are
`controlplane.domain.scheduling`'s; this module reads and writes the rows."""

from __future__ import annotations

from sqlalchemy import case, func, or_, select
from sqlalchemy.orm import Session

from controlplane.dispatch.assignments import opens_sandbox, opens_sandbox_clause
from controlplane.domain import run_states
from controlplane.domain.scheduling import CappedRun, Hold, admit_by_change, holding_cap, holds_after
from controlplane.store import events
from controlplane.store.models import Change, Project, Run, Task


def admit(
    queued: dict[str, tuple[Run, Task, Project]], active: dict[str, int], sandboxes: dict[str, int]
) -> tuple[list[str], list[tuple[Run, Hold]]]:
    """The queued runs their Changes' caps let start (oldest first), and the others with the cap that
    holds each (to be said with `mark_held`, once the caller holds their Changes' locks)."""
    capped = [
        CappedRun(
            run.id,
            run.change_id,
            project.max_active_runs_per_change,
            project.max_open_sandboxes_per_change,
            opens_sandbox(run.driver, task.kind, project),
        )
        for run, task, project in queued.values()
    ]
    admitted, held = admit_by_change(capped, active, sandboxes)
    if not held:
        return list(admitted), []
    # the counts the event says: active before this pass and admitted in it
    holds = holds_after(capped, admitted, active, sandboxes)
    return list(admitted), [(queued[run_id][0], hold) for run_id, hold in holds.items()]


def change_load(s: Session) -> tuple[dict[str, int], dict[str, int], dict[str, tuple[int, int]]]:
    """Of each Change with queued runs, in one query: its active (starting/running) runs, the open sandboxes
    among them, and its project's (max_active_runs_per_change, max_open_sandboxes_per_change)."""
    waiting = select(Run.change_id).where(Run.state == "queued").distinct()
    is_active = Run.state.in_(run_states.ACTIVE)
    active_runs = func.sum(case((is_active, 1), else_=0))
    open_sandboxes = func.sum(case((is_active & opens_sandbox_clause(), 1), else_=0))
    caps = (Project.max_active_runs_per_change, Project.max_open_sandboxes_per_change)
    rows = s.execute(
        select(Run.change_id, active_runs, open_sandboxes, *caps)
        .join(Task, Run.task_id == Task.id)
        .join(Change, Change.id == Run.change_id)
        .join(Project, Project.name == Change.project)
        .where(Run.change_id.in_(waiting), Run.state.in_({"queued", *run_states.ACTIVE}))
        .group_by(Run.change_id, *caps)
    ).all()
    return (
        {c: int(n or 0) for c, n, _, _, _ in rows},
        {c: int(o or 0) for c, _, o, _, _ in rows},
        {c: (cap, sandbox_cap) for c, _, _, cap, sandbox_cap in rows},
    )


def held_at_caps(
    s: Session, full: list[str], boxed: list[str], active: dict[str, int], sandboxes: dict[str, int]
) -> list[tuple[Run, Hold]]:
    """The queued runs a cap of their Change holds whatever this pass admits, not said to be held yet: every
    run of a Change at its active-run cap (`full`), the sandbox runs of one at its sandbox cap (`boxed`),
    with the cap that holds each (one query; the runs locked, none written)."""
    sandbox = opens_sandbox_clause()
    rows = s.execute(
        select(Run, sandbox, Project.max_active_runs_per_change, Project.max_open_sandboxes_per_change)
        .join(Task, Run.task_id == Task.id)
        .join(Change, Change.id == Run.change_id)
        .join(Project, Project.name == Change.project)
        .where(Run.state == "queued", Run.blocked_limit.is_(False))
        .where(or_(Run.change_id.in_(full), Run.change_id.in_(boxed) & sandbox))
        .order_by(Run.created_at, Run.id)
        .limit(500)
        .with_for_update(of=Run, skip_locked=True)
    ).all()
    out = []
    for run, opens, cap, sandbox_cap in rows:
        hold = holding_cap(CappedRun(run.id, run.change_id, cap, sandbox_cap, bool(opens)), active, sandboxes)
        if hold is not None:
            out.append((run, hold))
    return out


def mark_held(s: Session, run: Run, hold: Hold) -> None:
    """A ready run a cap of its Change holds queued: the event once per blocking (a run assigned later and
    refused back to the queue may be held, and said, again)."""
    if run.blocked_limit:
        return
    run.blocked_limit = True
    events.add_event(
        s,
        "run.blocked_limit",
        change_id=run.change_id,
        task_id=run.task_id,
        run_id=run.id,
        cap=hold.cap,
        limit=hold.limit,
        active=hold.active,
    )
