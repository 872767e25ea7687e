"""Questions sessions ask people (seed 003 "Waiting for answers"): asked by a run's supervisor (idempotent
by its key), answered by the Change's submitter or someone with run.manage. An answer is stored as the
run's next input (kind answer), so it travels to the session like any message: persisted first, sent
until received, applied once. The session stays held while one of its blocking questions is open."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from controlplane.domain import run_states
from controlplane.services import progress, run_input
from controlplane.services.tenancy import Scope, check_owner, visible_change
from controlplane.store.events import add_event, new_id
from controlplane.store.models import Change, Project, Question, Run, RunInput, Task, utcnow
from drover.errors import FailedPrecondition, InvalidArgument, NotFound

MAX_TEXT = 16 * 1024


def ask(s: Session, run: Run, key: str, text: str, blocking: bool) -> Question:
    """Record a run's question once (a retry with the same key answers the same question)."""
    existing = s.scalar(select(Question).where(Question.run_id == run.id, Question.key == key))
    if existing is not None:
        return existing
    if not text.strip():
        raise InvalidArgument("a question needs text", field="text")
    if run.state not in run_states.ACTIVE:
        raise FailedPrecondition(f"run {run.id} has ended", field="run_id")
    row = Question(
        id=new_id("q"),
        run_id=run.id,
        change_id=run.change_id,
        task_id=run.task_id,
        key=key,
        text=text,
        blocking=blocking,
        state="open",
        created_at=utcnow(),
    )
    s.add(row)
    add_event(
        s,
        "question.asked",
        change_id=run.change_id,
        task_id=run.task_id,
        run_id=run.id,
        agent=run.agent,
        question_id=row.id,
        blocking=blocking,
        text=text[:1000],
    )
    s.flush()
    return row


def answer(
    s: Session, question_id: str, text: str, by: str, may_manage: bool, scope: Scope = None
) -> tuple[Question, RunInput | None]:
    """Answer an open question: the answer becomes the run's next input, delivered as a message; a parked
    session's answers are kept, and once none of its blocking questions is open a new run resumes it."""
    question = s.get(Question, question_id) if question_id else None
    if question is None:
        raise NotFound(f"no question {question_id!r}", field="question_id")
    change = visible_change(s, question.change_id, scope)  # another project's question is NOT_FOUND
    check_owner(change, by, may_manage, "answering a question of")
    if not text.strip():
        raise InvalidArgument("an answer needs text", field="text")
    if question.state != "open":
        raise FailedPrecondition(f"question {question_id} was answered already", field="question_id")
    run = s.get(Run, question.run_id)
    task = s.get(Task, question.task_id)
    assert run is not None and task is not None
    parked = run.state == "succeeded" and run.reason == "parked" and task.status == "parked"
    sent = None
    if not parked:
        sent = run_input.send_input(s, question.run_id, "answer", text, by, scope, question_id=question.id)
    question.state, question.answer, question.answered_by, question.answered_at = "answered", text, by, utcnow()
    add_event(
        s,
        "question.answered",
        change_id=question.change_id,
        task_id=question.task_id,
        run_id=question.run_id,
        question_id=question.id,
        answered_by=by,
    )
    s.flush()
    if parked and not _open_blocking(s, run.id):
        resume(s, run, task)
    return question, sent


def _open_blocking(s: Session, run_id: str) -> bool:
    found = s.scalar(
        select(Question.id).where(Question.run_id == run_id, Question.state == "open", Question.blocking).limit(1)
    )
    return found is not None


def resume(s: Session, parked: Run, task: Task) -> Run:
    """A new run of the parked Task that resumes its session, on the same tier."""
    run = progress.queue_run(s, task, attempt=parked.attempt)
    run.resume_of, run.tier = parked.id, parked.tier
    task.status, task.reason = "ready", ""
    add_event(s, "task.resumed", change_id=task.change_id, task_id=task.id, key=task.key, run_id=run.id)
    return run


def answers_of(s: Session, run_id: str) -> str:
    """The questions a parked run asked and their answers, as the resuming session's next message."""
    asked = s.scalars(
        select(Question).where(Question.run_id == run_id, Question.state == "answered").order_by(Question.created_at)
    )
    lines = ["Your session was parked while it waited for answers. The answers to your questions:"]
    for q in asked:
        lines += ["", f"Q: {q.text}", f"A: {q.answer}"]
    return "\n".join(lines)


def list_questions(
    s: Session, change_id: str, run_id: str, open_only: bool, scope: Scope = None
) -> list[tuple[Question, str]]:
    """Questions with their Task's key, oldest first, within the caller's projects."""
    q = select(Question).order_by(Question.created_at, Question.id)
    if change_id:
        visible_change(s, change_id, scope)
        q = q.where(Question.change_id == change_id)
    if run_id:
        q = q.where(Question.run_id == run_id)
    if open_only:
        q = q.where(Question.state == "open")
    if scope is not None:
        q = q.where(Question.change_id.in_(select(Change.id).where(Change.project.in_(sorted(scope)))))
    rows = list(s.scalars(q))
    keys = _task_keys(s, {r.task_id for r in rows})
    return [(r, keys.get(r.task_id, "")) for r in rows]


def _task_keys(s: Session, task_ids: set[str]) -> dict[str, str]:
    if not task_ids:
        return {}
    return dict(s.execute(select(Task.id, Task.key).where(Task.id.in_(sorted(task_ids)))).tuples().all())


def park_overdue(s: Session, now: dt.datetime) -> list[run_input.Pending]:
    """Sessions held by a blocking question longer than their project's answer window are told to park
    (one park input per run); answers what to send to their agents."""
    rows = s.execute(
        select(Question.run_id, func.min(Question.created_at), Project.answer_window_minutes)
        .join(Run, Run.id == Question.run_id)
        .join(Change, Change.id == Run.change_id)
        .join(Project, Project.name == Change.project)
        .where(Question.state == "open", Question.blocking, Run.state == "running", ~Run.cancel_requested)
        .group_by(Question.run_id, Project.answer_window_minutes)
    ).all()
    parked: list[str] = []
    for run_id, oldest, window in rows:
        if window <= 0 or _aware(oldest) > now - dt.timedelta(minutes=window):
            continue
        if s.scalar(select(RunInput.id).where(RunInput.run_id == run_id, RunInput.kind == "park").limit(1)):
            continue
        run_input.send_input(s, run_id, "park", "", "drover")
        parked.append(run_id)
    if not parked:
        return []
    return [p for p in run_input.pending_for_runs(s, parked) if p.kind == "park"]


def _aware(at: dt.datetime) -> dt.datetime:
    return at if at.tzinfo else at.replace(tzinfo=dt.UTC)
