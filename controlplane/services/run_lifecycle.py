"""State changes of runs (seed 003's transitions): assignment, refusal, the agent's messages applied
once each, and the end of a run: a success moves its Change on here, any other end goes to
services/task_ends.py (retry, escalation, budget stop, failure). Each function runs inside one
transaction and appends the Events of what it changed."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, cast

from sqlalchemy import Table, insert, update
from sqlalchemy.orm import Session

from controlplane import metrics
from controlplane.domain import escalation, run_states
from controlplane.services import run_input, task_ends, tool_logs
from controlplane.services.late_results import take_late_result
from controlplane.services.progress import advance_after, block_dependents, change_state, settle_change, tally
from controlplane.services.tenancy import Scope, visible_run
from controlplane.store import locks
from controlplane.store.events import add_event, run_event
from controlplane.store.models import Change, Run, RunLog, Task, utcnow
from controlplane.store.objects import ObjectStore, session_key
from drover.errors import FailedPrecondition

DROPPED_LINE = "output limit of {limit} bytes reached: later output of this run is dropped\n"

RUN_LOGS = cast(Table, RunLog.__table__)


def move(s: Session, run: Run, target: str) -> None:
    run_states.check_move(run.state, target)
    run.state = target


def assign(s: Session, run_id: str, agent: str) -> Run | None:
    """queued -> starting on `agent`; None when the run is no longer queued."""
    run = s.get(Run, run_id)
    if run is None or run.state != "queued":
        return None
    move(s, run, "starting")
    run.agent = agent
    run.blocked_limit = False  # a later hold is a new blocking, said again
    run_event(s, "run.assigned", run)
    return run


def requeue(s: Session, run: Run, reason: str) -> None:
    move(s, run, "queued")
    run_event(s, "run.requeued", run, reason=reason, previous_agent=run.agent)
    run.agent = ""
    run.last_seq = 0  # the next agent numbers its messages about this run from 1


def finish_run(
    s: Session,
    run: Run,
    status: str,
    *,
    exit_code: int = 0,
    reason: str = "",
    error: str = "",
    policy: escalation.Policy | None = None,
    objects: ObjectStore | None = None,
) -> None:
    """End `run`; a failed harness run may queue the Task's next attempt, within `policy`. Its tool log
    goes to `objects` now (a run that never reached an agent, ended without them, has none)."""
    locks.lock_changes(s, [run.change_id])  # the Change before the run is written (lock order)
    if run.state == "starting" and status != "failed":
        move(s, run, "running")  # a session that ended was a session that started
    move(s, run, status)
    run.exit_code, run.reason, run.finished_at = exit_code, reason, utcnow()
    if objects is not None:
        tool_logs.write(s, objects, run)
    data: dict[str, Any] = {"status": status, "exit_code": exit_code, "reason": reason}
    if error:
        data["error"] = error[:2000]
    run_event(s, "run.finished", run, **data)
    from controlplane.services import (
        claims,  # claims uses this module's add_event and new_id
    )

    claims.release(s, run.id, utcnow())
    if status == "succeeded" and reason != "parked" and (key := _task_succeeded(s, run)) is not None:
        advance_after(s, change_state(s, run.change_id), key)  # the Change is locked above
        return
    task_ends.end_task(s, run, status, reason=reason, error=error, policy=policy)


def _task_succeeded(s: Session, run: Run) -> str | None:
    """The run's Task succeeded, in one UPDATE (no Task or Change object loaded: the common end of a
    run stays cheap): its key, or None when the Task was not ready or running any more."""
    q = update(Task).where(Task.id == run.task_id, Task.status.in_(("ready", "running")))
    key = s.scalar(q.values(status="succeeded", reason="").returning(Task.key))
    if key is not None:
        add_event(s, "task.succeeded", change_id=run.change_id, task_id=run.task_id, key=key)
    return key


def fail_unroutable(s: Session, run: Run, message: str, outcome: str = "routing_no_eligible") -> None:
    """No member can serve the run (ROUTING_NO_ELIGIBLE), or it cannot be routed or assigned at all:
    the run never starts and the Task fails."""
    task = s.get(Task, run.task_id)
    change = s.get(Change, run.change_id, with_for_update=True)
    assert task is not None and change is not None
    task.status, task.reason = "failed", message
    add_event(s, "task.failed", change_id=change.id, task_id=task.id, key=task.key, reason=message)
    block_dependents(s, change, task)
    finish_run(s, run, "cancelled", reason=outcome, error=message)


def fail_unassignable(s: Session, run_id: str, reason: str) -> None:
    """A queued run that cannot be assigned (its Task is malformed in a way submission did not catch):
    it never starts, its Task fails with the reason and its dependents are blocked; the rest of the
    fleet's dispatch goes on."""
    run = s.get(Run, run_id)
    if run is None or run.state != "queued":
        return
    fail_unroutable(s, run, reason, outcome="assignment_failed")


def fail_unrouted(s: Session, run_id: str, reason: str) -> None:
    """A queued harness run whose routing or Context Packet keeps failing: failed alone."""
    run = s.get(Run, run_id)
    if run is None or run.state != "queued":
        return
    fail_unroutable(s, run, reason, outcome="routing_failed")


def cancel_run(s: Session, run_id: str, reason: str, scope: Scope = None) -> Run:
    """Cancel one run: a queued run ends now, an active one is marked for its agent to stop."""
    run = visible_run(s, run_id, scope)
    if run.state in run_states.TERMINAL:
        raise FailedPrecondition(f"run {run_id} already {run.state}", field="run_id")
    if run.state == "queued":
        finish_run(s, run, "cancelled", reason="cancelled", error=reason)
    elif not run.cancel_requested:
        run.cancel_requested = True
        run_event(s, "run.cancel_requested", run, reason=reason)
    return run


@dataclasses.dataclass(frozen=True)
class RunMessage:
    """What an agent said about a run, decoded from the wire."""

    run_id: str
    seq: int
    kind: str  # refused | started | log | finished | input_received
    stream: str = ""
    text: str = ""
    status: str = ""
    exit_code: int = 0
    reason: str = ""
    error: str = ""
    input_seq: int = 0
    parked: str = ""  # finished, reason parked: the session, JSON
    session_state: bytes = b""
    setup_seconds: float = 0.0  # finished: spent preparing the workspace
    setup_cached: bool = False  # finished: the workspace came prepared (setup skipped)
    result: SessionResult | None = None  # finished: a model-driven session's result


@dataclasses.dataclass(frozen=True)
class SessionResult:
    """How a model-driven session ended, as its agent reported it (text: Task-written, never logged)."""

    text: str = ""
    turns: int = 0
    cost_micros: int = 0
    success: bool = False
    compactions: int = 0


LOCKING_KINDS = ("started", "finished")
"""Run messages whose unit locks the run's Change."""


def lock_message_changes(s: Session, batch: list[tuple[Any, ...]]) -> None:
    """First in a group commit of run messages (`apply_run_message` argument tuples): the Changes its
    starts and ends will lock, all sorted by id, before any unit writes a run (lock order)."""
    locks.lock_changes_of_runs(s, [args[1].run_id for args in batch if args[1].kind in LOCKING_KINDS])


def apply_run_message(
    s: Session,
    agent: str,
    msg: RunMessage,
    output_limit: int,
    objects: ObjectStore | None = None,
    policy: escalation.Policy | None = None,
) -> int:
    """Apply one message exactly once; answers the seq to ack (the run's highest applied seq)."""
    run = s.get(Run, msg.run_id)
    if run is None or run.agent != agent:
        return msg.seq  # not this agent's run (any more): ack so the agent forgets it
    if msg.seq <= run.last_seq:
        return run.last_seq  # a duplicate after a reconnect
    if msg.seq != run.last_seq + 1:
        return run.last_seq  # a gap: wait for the missing message
    run.last_seq = msg.seq
    if msg.kind == "refused":
        if run.state == "starting":
            requeue(s, run, reason=msg.reason or "refused")
        return msg.seq  # acked as seen; the next agent numbers from 1 again
    elif msg.kind == "started":
        if run.state == "starting":
            move(s, run, "running")
            run.started_at = utcnow()
            task = s.get(Task, run.task_id)
            assert task is not None
            if task.status == "ready":
                task.status = "running"
            run_event(s, "run.started", run)
            change = s.get(Change, run.change_id, with_for_update=True)
            assert change is not None
            if change.status != "running":  # a started Task makes its Change running and nothing else
                settle_change(s, change, tally(s, change.id))
    elif msg.kind == "input_received":
        run_input.received(s, run, msg.input_seq)
    elif msg.kind == "log" and msg.stream == "tool":
        tool_logs.record(s, run, msg.seq, msg.text)
    elif msg.kind == "log":
        _append_output(s, run, msg.seq, msg.stream, msg.text, output_limit)
    elif msg.kind == "finished" and run.state in run_states.ACTIVE:
        status = msg.status if msg.status in run_states.TERMINAL else "failed"
        if status == "succeeded" and msg.reason == "parked":
            _keep_parked(s, run, msg, objects)
        if status == "succeeded" and run.state == "starting":
            move(s, run, "running")
        run.setup_seconds, run.setup_cached = max(msg.setup_seconds, 0.0), msg.setup_cached
        if msg.result is not None:
            keep_result(run, msg.result)
        finish_run(
            s, run, status, exit_code=msg.exit_code, reason=msg.reason, error=msg.error, policy=policy, objects=objects
        )
    elif msg.kind == "finished":  # ended here first (judged lost): the agent's word may still count
        take_late_result(s, run, msg.status, msg.exit_code, msg.reason, msg.error)
        if objects is not None:  # with the tool calls that came after the end, before this last word
            tool_logs.write(s, objects, run)
    return run.last_seq


RESULT_TEXT_LIMIT = 4096
"""Characters of a session's final message kept on its run (agentd bounds it to 4 KiB of UTF-8)."""


def keep_result(run: Run, result: SessionResult) -> None:
    """The session's result on the run, in the transaction that finishes it."""
    run.result_text = result.text[:RESULT_TEXT_LIMIT]
    run.result_turns = max(result.turns, 0)
    run.result_cost_micros = max(result.cost_micros, 0)
    run.result_success = result.success
    run.compactions = max(result.compactions, 0)


def _keep_parked(s: Session, run: Run, msg: RunMessage, objects: ObjectStore | None) -> None:
    """What a parked session left: its id, branch and workspace commits, and its state in the object store."""
    try:
        parked = json.loads(msg.parked or "{}")
    except ValueError:
        parked = {}
    if not isinstance(parked, dict):
        parked = {}
    if msg.session_state and objects is not None:
        change = s.get(Change, run.change_id)
        assert change is not None
        key = session_key(change.project, run.change_id, run.task_id, run.id)
        objects.put(key, msg.session_state)
        parked["state_key"] = key
    run.parked = parked


def _append_output(s: Session, run: Run, seq: int, stream: str, text: str, limit: int) -> None:
    if run.output_truncated:
        return
    size = len(text.encode())
    if run.output_bytes + size > limit:
        room = limit - run.output_bytes
        kept = text.encode()[: max(room, 0)].decode(errors="ignore")
        if kept:
            s.add(RunLog(run_id=run.id, seq=seq, stream=stream, text=kept, created_at=utcnow()))
            run.output_bytes += len(kept.encode())
            metrics.on_output(s, len(kept.encode()))
        s.add(
            RunLog(run_id=run.id, seq=seq, stream="system", text=DROPPED_LINE.format(limit=limit), created_at=utcnow())
        )
        run.output_truncated = True
        run_event(s, "run.output_truncated", run, limit=limit)
        return
    # A Core insert: output is the bulk of what agents send, and no one reads the row back here.
    s.execute(insert(RUN_LOGS).values(run_id=run.id, seq=seq, stream=stream, text=text, created_at=utcnow()))
    run.output_bytes += size
    metrics.on_output(s, size)
