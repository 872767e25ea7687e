"""Input to running sessions (seed 003 "Talking to a running session"): a person's message or interrupt
is stored with the run's next input seq and an event in one transaction before the sender hears back;
it is sent to the run's agent until the agent reports it received (on disk there, applied once by the
run's supervisor), so it survives reconnects and restarts of either side."""

from __future__ import annotations

import dataclasses

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from controlplane.domain import run_states
from controlplane.services.tenancy import Scope, visible_run
from controlplane.store.events import new_id, run_event
from controlplane.store.models import Run, RunInput, utcnow
from drover.errors import FailedPrecondition, InvalidArgument

KINDS = ("message", "interrupt", "answer", "park")
MAX_TEXT = 64 * 1024


@dataclasses.dataclass(frozen=True)
class Pending:
    """An input on its way to an agent."""

    agent: str
    run_id: str
    seq: int
    kind: str
    text: str
    id: str
    question_id: str = ""


def send_input(
    s: Session, run_id: str, kind: str, text: str, sent_by: str, scope: Scope = None, question_id: str = ""
) -> RunInput:
    """Store one input for a running session; FAILED_PRECONDITION when there is no session to take it."""
    if kind not in KINDS:
        raise InvalidArgument(f"must be one of {', '.join(KINDS)}", field="kind")
    if kind in ("message", "answer") and not text.strip():
        raise InvalidArgument(f"{'an answer' if kind == 'answer' else 'a message'} needs text", field="text")
    run = visible_run(s, run_id, scope)
    if run.state in run_states.TERMINAL or run.cancel_requested:
        raise FailedPrecondition(f"run {run_id} has ended ({run.state}): its session takes no input", field="run_id")
    if run.driver == "command":
        raise FailedPrecondition(f"run {run_id} runs a command: there is no session to talk to", field="run_id")
    if run.state not in ("starting", "running"):
        raise FailedPrecondition(f"run {run_id} is {run.state}: its session has not started", field="run_id")
    s.get(Run, run.id, with_for_update=True)  # one seq per input, however many senders
    seq = (s.scalar(select(func.max(RunInput.seq)).where(RunInput.run_id == run.id)) or 0) + 1
    row = RunInput(
        id=new_id("inp"),
        run_id=run.id,
        seq=seq,
        kind=kind,
        text=text,
        state="sent",
        sent_by=sent_by,
        created_at=utcnow(),
        question_id=question_id,
    )
    s.add(row)
    run_event(s, "run.input", run, input_id=row.id, seq=seq, input_kind=kind, sent_by=sent_by, chars=len(text))
    s.flush()
    return row


def pending_for(s: Session, agent: str, run_ids: list[str] | None = None) -> list[Pending]:
    """Inputs not yet received by `agent`, for its active runs (or only `run_ids`), in seq order."""
    q = (
        select(RunInput, Run.agent)
        .join(Run, Run.id == RunInput.run_id)
        .where(Run.agent == agent, Run.state.in_(run_states.ACTIVE), RunInput.state == "sent")
        .order_by(RunInput.run_id, RunInput.seq)
    )
    if run_ids is not None:
        q = q.where(RunInput.run_id.in_(run_ids))
    return [Pending(a, i.run_id, i.seq, i.kind, i.text, i.id, i.question_id) for i, a in s.execute(q)]


def pending_for_runs(s: Session, run_ids: list[str]) -> list[Pending]:
    """Inputs not yet received for these runs (whatever their agents), in seq order."""
    q = (
        select(RunInput, Run.agent)
        .join(Run, Run.id == RunInput.run_id)
        .where(RunInput.run_id.in_(run_ids), RunInput.state == "sent")
        .order_by(RunInput.run_id, RunInput.seq)
    )
    return [Pending(a, i.run_id, i.seq, i.kind, i.text, i.id, i.question_id) for i, a in s.execute(q)]


def received(s: Session, run: Run, through_seq: int) -> None:
    """The run's agent has every input up to `through_seq` on disk."""
    s.execute(
        update(RunInput)
        .where(RunInput.run_id == run.id, RunInput.seq <= through_seq, RunInput.state == "sent")
        .values(state="received", received_at=utcnow())
    )


def list_inputs(s: Session, run_id: str, scope: Scope = None) -> list[RunInput]:
    run = visible_run(s, run_id, scope)
    return list(s.scalars(select(RunInput).where(RunInput.run_id == run.id).order_by(RunInput.seq)))
