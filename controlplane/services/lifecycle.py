"""State changes of Changes, Tasks and Runs. Each function runs inside one transaction
and appends the Events of what it changed, so a state change and its Event land together."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from controlplane.domain import escalation, graph, run_states
from controlplane.services import tool_logs
from controlplane.domain.errors import FailedPrecondition, InvalidArgument, NotFound, PermissionDenied
from controlplane.store.models import (Agent, Change, ChangeSet, DecisionReceipt, Event, Project, Run, RunLog, Task, Token,
                                 utcnow)
from controlplane.store.objects import DirectoryStore
from controlplane.store.engine import aware
from controlplane.services.tenancy import Scope, check_owner, visible_change, visible_run

FORGET = 1 << 62  # an applied seq that makes an agent drop every message of a run
DROPPED_LINE = "output limit of {limit} bytes reached: later output of this run is dropped\n"


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:20]}"


def add_event(s: Session, kind: str, *, change_id: str = "", task_id: str = "", run_id: str = "",
              agent: str = "", **data: Any) -> Event:
    event = Event(kind=kind, change_id=change_id, task_id=task_id, run_id=run_id, agent=agent, data=data,
                  created_at=utcnow())
    s.add(event)
    return event


def _run_event(s: Session, kind: str, run: Run, **data: Any) -> None:
    add_event(s, kind, change_id=run.change_id, task_id=run.task_id, run_id=run.id, agent=run.agent, **data)


# --- Changes -------------------------------------------------------------------------------------

def submit_change(s: Session, spec: graph.ChangeSpec, submitted_by: str, scope: Scope = None) -> str:
    graph.validate(spec)
    if s.get(Project, spec.project) is None or (scope is not None and spec.project not in scope):
        raise NotFound(f"no project {spec.project!r}", field="project")
    change = Change(id=new_id("chg"), project=spec.project, goal=spec.goal, criteria=list(spec.criteria),
                    invariants=list(spec.invariants), budget_usd=spec.budget_usd, submitted_by=submitted_by,
                    status="open", created_at=utcnow())
    s.add(change)
    s.flush()
    add_event(s, "change.submitted", change_id=change.id, project=spec.project, tasks=len(spec.tasks))
    for position, t in enumerate(spec.tasks):
        s.add(Task(id=new_id("tsk"), change_id=change.id, position=position, key=t.key, kind=t.kind,
                   objective=t.objective, depends_on=list(t.depends_on), command=list(t.command),
                   env=dict(t.env), timeout_seconds=t.timeout_seconds, spec=dict(t.traits), status="pending"))
    s.flush()
    _advance(s, change)
    return change.id


def _tasks(s: Session, change_id: str) -> list[Task]:
    return list(s.scalars(select(Task).where(Task.change_id == change_id).order_by(Task.position)))


def _advance(s: Session, change: Change) -> None:
    """Make ready what can run, then settle the Change's status."""
    tasks = _tasks(s, change.id)
    by_key = {t.key: t for t in tasks}
    statuses = {t.key: t.status for t in tasks}
    deps = {t.key: t.depends_on for t in tasks}
    if not change.cancel_requested:
        for key in graph.ready_tasks(statuses, deps):
            task = by_key[key]
            task.status = "ready"
            add_event(s, "task.ready", change_id=change.id, task_id=task.id, key=key)
            queue_run(s, task, attempt=1)
    _settle_change(s, change, tasks)


def _settle_change(s: Session, change: Change, tasks: list[Task]) -> None:
    if change.status in graph.TERMINAL_CHANGE:
        return
    active = s.scalar(select(Run.id).where(Run.change_id == change.id, Run.state.in_(run_states.ACTIVE)).limit(1))
    started = change.status == "running" or any(t.status in ("running", "succeeded", "failed") for t in tasks)
    status = graph.change_status((t.status for t in tasks), cancel_requested=change.cancel_requested,
                                 started=started)
    if status == "failed" and any(t.status == "blocked" and t.reason.startswith("budget_stop") for t in tasks):
        status = "budget_blocked"  # a person raises the budget (or cancels): the Change can go on
    if status in graph.TERMINAL_CHANGE and active is not None:
        return  # cancelled runs still winding down; the Change ends with its last run
    if status == "succeeded" and change.candidate_state != "composed":
        if change.candidate_state == "" and s.scalar(select(ChangeSet.id).where(ChangeSet.change_id == change.id)
                                                     .limit(1)) is not None:
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
            add_event(s, "change.finished", change_id=change.id, status=status, tasks=counts,
                      **({"limit": change.reason} if status == "budget_blocked" else {}))
        else:
            add_event(s, f"change.{status}", change_id=change.id)


def finish_composition(s: Session, change_id: str, branch: str, commit: str, conflict: str) -> None:
    """Record the composed candidate branch, or the conflict that stopped it, and end the Change."""
    change = s.get(Change, change_id)
    if change is None or change.candidate_state != "pending":
        return
    if conflict:
        change.candidate_state, change.reason = "failed", conflict
        add_event(s, "change.candidate_conflict", change_id=change.id, reason=conflict)
        change.status, change.finished_at = "failed", utcnow()
        add_event(s, "change.finished", change_id=change.id, status="failed", reason=conflict)
        return
    change.candidate_state, change.candidate_branch, change.candidate_commit = "composed", branch, commit
    add_event(s, "change.candidate_composed", change_id=change.id, branch=branch, commit=commit)
    _settle_change(s, change, _tasks(s, change.id))


def cancel_change(s: Session, change_id: str, reason: str = "cancelled by user", *, scope: Scope = None,
                  by: str = "", may_manage: bool = True) -> list[Run]:
    """Cancel every open Task; answers the active runs whose agents must be told."""
    change = visible_change(s, change_id, scope)
    check_owner(change, by, may_manage, "cancelling")
    if change.status in graph.TERMINAL_CHANGE:
        return []
    change.cancel_requested = True
    add_event(s, "change.cancel_requested", change_id=change.id, reason=reason)
    to_tell: list[Run] = []
    for task in _tasks(s, change.id):
        if task.status in graph.TERMINAL_TASK:
            continue
        task.status, task.reason = "cancelled", reason
        add_event(s, "task.cancelled", change_id=change.id, task_id=task.id, key=task.key, reason=reason)
        for run in s.scalars(select(Run).where(Run.task_id == task.id, Run.state.not_in(run_states.TERMINAL))):
            if run.state == "queued":
                _finish(s, run, "cancelled", reason="cancelled")
            else:
                run.cancel_requested = True
                _run_event(s, "run.cancel_requested", run, reason=reason)
                to_tell.append(run)
    _settle_change(s, change, _tasks(s, change.id))
    return to_tell


# --- Runs ----------------------------------------------------------------------------------------

def queue_run(s: Session, task: Task, attempt: int) -> Run:
    run = Run(id=new_id("run"), change_id=task.change_id, task_id=task.id, attempt=attempt, state="queued",
              driver="command" if task.command else "harness", created_at=utcnow())
    s.add(run)
    s.flush()
    _run_event(s, "run.queued", run, key=task.key, attempt=attempt)
    return run


def _move(s: Session, run: Run, target: str) -> None:
    run_states.check_move(run.state, target)
    run.state = target


def assign(s: Session, run_id: str, agent: str) -> Run | None:
    """queued -> starting on `agent`; None when the run is no longer queued."""
    run = s.get(Run, run_id)
    if run is None or run.state != "queued":
        return None
    _move(s, run, "starting")
    run.agent = agent
    _run_event(s, "run.assigned", run)
    return run


def requeue(s: Session, run: Run, reason: str) -> None:
    _move(s, run, "queued")
    _run_event(s, "run.requeued", run, reason=reason, previous_agent=run.agent)
    run.agent = ""
    run.last_seq = 0  # the next agent numbers its messages about this run from 1


def _finish(s: Session, run: Run, status: str, *, exit_code: int = 0, reason: str = "", error: str = "") -> None:
    if run.state == "starting" and status != "failed":
        _move(s, run, "running")  # a session that ended was a session that started
    _move(s, run, status)
    run.exit_code, run.reason, run.finished_at = exit_code, reason, utcnow()
    data: dict[str, Any] = {"status": status, "exit_code": exit_code, "reason": reason}
    if error:
        data["error"] = error[:2000]
    _run_event(s, "run.finished", run, **data)
    from controlplane.services import claims  # claims uses this module's add_event and new_id
    claims.release(s, run.id, utcnow())
    task = s.get(Task, run.task_id)
    change = s.get(Change, run.change_id, with_for_update=True)  # one finisher at a time per Change
    assert task is not None and change is not None
    if task.status in ("ready", "running"):
        if status == "succeeded":
            task.status, task.reason = "succeeded", ""
            add_event(s, "task.succeeded", change_id=change.id, task_id=task.id, key=task.key)
        elif run.driver == "harness" and status == "failed" and _next_attempt(s, change, task, run):
            pass  # queued again (retry or escalation) or stopped by a budget
        else:
            task.status = "cancelled" if status == "cancelled" else "failed"
            task.reason = reason or status
            add_event(s, f"task.{task.status}", change_id=change.id, task_id=task.id, key=task.key,
                      reason=task.reason)
        if task.status in ("failed", "cancelled", "blocked"):
            _block_dependents(s, change, task)
    s.flush()
    _advance(s, change)


@dataclasses.dataclass(frozen=True)
class Policy:
    """Settings the lifecycle needs from the control plane's configuration."""
    allow_opus: bool = False


POLICY = Policy()


def set_policy(policy: Policy) -> None:
    global POLICY
    POLICY = policy


def _attempt_window(s: Session, task: Task) -> list[escalation.Attempt]:
    """The Task's failed harness runs since its attempt window opened (a raised budget opens one)."""
    since = aware(task.attempts_reset_at)
    out = []
    for r in s.scalars(select(Run).where(Run.task_id == task.id, Run.state == "failed", Run.driver == "harness")
                       .order_by(Run.finished_at, Run.id)):
        finished = aware(r.finished_at)
        if since is not None and finished is not None and finished <= since:
            continue
        outcome = r.reason if r.reason in escalation.OUTCOMES else "failed"
        out.append(escalation.Attempt(r.tier if r.tier in escalation.TIERS else "sonnet", outcome,
                                      finished or utcnow()))
    return out


def _next_attempt(s: Session, change: Change, task: Task, run: Run) -> bool:
    """After a failed harness run: retry, escalate, or stop on a budget (seed 000). Answers False when
    the Task simply fails."""
    s.flush()
    step = escalation.decide(_attempt_window(s, task), POLICY.allow_opus)
    if step.action in ("retry", "escalate"):
        task.status, task.reason = "ready", ""
        new = queue_run(s, task, attempt=run.attempt + 1)
        new.tier = step.tier
        new.not_before = utcnow() + dt.timedelta(seconds=step.delay_seconds)
        s.add(DecisionReceipt(run_id=new.id, change_id=change.id, task_id=task.id, tier=step.tier,
                              data={"escalation": escalation.receipt_reason(step) or step.reason},
                              created_at=utcnow()))
        if step.action == "escalate":
            add_event(s, "agent.escalated", change_id=change.id, task_id=task.id, run_id=new.id,
                      key=task.key, **{"from": step.escalated_from, "to": step.escalated_to, "reason": step.reason})
        else:
            add_event(s, "task.retrying", change_id=change.id, task_id=task.id, run_id=new.id, key=task.key,
                      tier=step.tier, reason=step.reason)
        return True
    if step.action in ("stop", "replan"):
        task.status, task.reason = "blocked", f"budget_stop: {step.limit}"
        add_event(s, "budget.stopped", change_id=change.id, task_id=task.id, run_id=run.id, key=task.key,
                  limit=step.limit, reason=step.reason)
        change.reason = step.limit
        return True
    return False


def raise_budget(s: Session, change_id: str, budget_usd: float, *, scope: Scope = None, by: str = "",
                 may_manage: bool = True) -> Change:
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
    meters.raise_limit(s, f"change-usd:{change.id}", int(round(budget_usd * 1_000_000)))
    tasks = _tasks(s, change.id)
    stopped = [t for t in tasks if t.status == "blocked" and t.reason.startswith("budget_stop")]
    for task in stopped:
        task.status, task.reason, task.attempts_reset_at = "ready", "", utcnow()
        last = s.scalar(select(func.max(Run.attempt)).where(Run.task_id == task.id)) or 0
        queue_run(s, task, attempt=last + 1)
        add_event(s, "task.ready", change_id=change.id, task_id=task.id, key=task.key, reason="budget raised")
    if stopped:
        reopened = {t.key for t in stopped}
        deps = {t.key: t.depends_on for t in tasks}
        for t in tasks:  # dependents blocked by a stopped Task wait again
            if t.status == "blocked" and t.reason.startswith("dependency ") and _needs_any(t.key, reopened, deps):
                t.status, t.reason = "pending", ""
        if change.status == "budget_blocked":
            change.status, change.finished_at, change.reason = "running", None, ""
            add_event(s, "change.reopened", change_id=change.id)
    s.flush()
    _advance(s, change)
    return change


def _needs_any(key: str, targets: set[str], deps: dict[str, Any]) -> bool:
    frontier, seen = list(deps[key]), set()
    while frontier:
        current = frontier.pop()
        if current in targets:
            return True
        if current not in seen:
            seen.add(current)
            frontier.extend(deps[current])
    return False


def _block_dependents(s: Session, change: Change, task: Task) -> None:
    """Pending Tasks that needed `task` (directly or through others) can no longer run."""
    tasks = _tasks(s, change.id)
    blocked = set(graph.dependents_to_block(task.key, {t.key: t.status for t in tasks},
                                            {t.key: t.depends_on for t in tasks}))
    for t in tasks:
        if t.key in blocked:
            t.status, t.reason = "blocked", f"dependency {task.key} {task.status}"
            add_event(s, "task.blocked", change_id=change.id, task_id=t.id, key=t.key, because=task.key)


def fail_unroutable(s: Session, run: Run, message: str, outcome: str = "routing_no_eligible") -> None:
    """No member can serve the run (ROUTING_NO_ELIGIBLE), or it cannot be routed or assigned at all:
    the run never starts and the Task fails."""
    task = s.get(Task, run.task_id)
    change = s.get(Change, run.change_id, with_for_update=True)
    assert task is not None and change is not None
    task.status, task.reason = "failed", message
    add_event(s, "task.failed", change_id=change.id, task_id=task.id, key=task.key, reason=message)
    _block_dependents(s, change, task)
    _finish(s, run, "cancelled", reason=outcome, error=message)


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
        _finish(s, run, "cancelled", reason="cancelled", error=reason)
    elif not run.cancel_requested:
        run.cancel_requested = True
        _run_event(s, "run.cancel_requested", run, reason=reason)
    return run


@dataclasses.dataclass(frozen=True)
class RunMessage:
    """What an agent said about a run, decoded from the wire."""
    run_id: str
    seq: int
    kind: str  # refused | started | log | finished
    stream: str = ""
    text: str = ""
    status: str = ""
    exit_code: int = 0
    reason: str = ""
    error: str = ""


def apply_run_message(s: Session, agent: str, msg: RunMessage, output_limit: int,
                      objects: DirectoryStore | None = None) -> int:
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
            _move(s, run, "running")
            run.started_at = utcnow()
            task = s.get(Task, run.task_id)
            assert task is not None
            if task.status == "ready":
                task.status = "running"
            _run_event(s, "run.started", run)
            change = s.get(Change, run.change_id, with_for_update=True)
            assert change is not None
            _settle_change(s, change, _tasks(s, change.id))
    elif msg.kind == "log" and msg.stream == "tool":
        if objects is not None:
            tool_logs.record(s, objects, run, msg.seq, msg.text)
    elif msg.kind == "log":
        _append_output(s, run, msg.seq, msg.stream, msg.text, output_limit)
    elif msg.kind == "finished":
        if run.state in run_states.ACTIVE:
            status = msg.status if msg.status in run_states.TERMINAL else "failed"
            if status == "succeeded" and run.state == "starting":
                _move(s, run, "running")
            _finish(s, run, status, exit_code=msg.exit_code, reason=msg.reason, error=msg.error)
    return run.last_seq


def _append_output(s: Session, run: Run, seq: int, stream: str, text: str, limit: int) -> None:
    if run.output_truncated:
        return
    size = len(text.encode())
    if run.output_bytes + size > limit:
        room = limit - run.output_bytes
        kept = text.encode()[:max(room, 0)].decode(errors="ignore")
        if kept:
            s.add(RunLog(run_id=run.id, seq=seq, stream=stream, text=kept, created_at=utcnow()))
            run.output_bytes += len(kept.encode())
        s.add(RunLog(run_id=run.id, seq=seq, stream="system", text=DROPPED_LINE.format(limit=limit),
                     created_at=utcnow()))
        run.output_truncated = True
        _run_event(s, "run.output_truncated", run, limit=limit)
        return
    s.add(RunLog(run_id=run.id, seq=seq, stream=stream, text=text, created_at=utcnow()))
    run.output_bytes += size


# --- Agents --------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class HelloResult:
    applied: dict[str, int]      # highest applied seq of each run the agent listed
    to_cancel: list[str]         # listed runs whose cancel the agent may not have heard


def agent_connected(s: Session, name: str, labels: dict[str, str], capacity: int, drivers: list[str],
                    version: str, listed: set[str], draining: bool, token_id: int = 0, pool: str = "") -> HelloResult:
    """Record a connected agent. A name is bound to the agent token that first registered it: another
    token may take it only once that one is revoked or expired, and only for the same pool."""
    agent = s.get(Agent, name, with_for_update=True)
    if agent is None:
        agent = Agent(name=name, draining=False)
        s.add(agent)
    elif agent.token_id is not None and token_id and agent.token_id != token_id:
        bound = s.get(Token, agent.token_id)
        if bound is not None and (bound.revoked_at is None and not _expired(bound)):
            raise PermissionDenied(f"the agent name {name!r} belongs to another agent token", field="hello.name")
        if (agent.pool or "") != pool:
            raise PermissionDenied(f"the agent name {name!r} was an agent of another pool; use a new name",
                                   field="hello.name")
        add_event(s, "agent.rebound", agent=name, pool=pool)
    if token_id:
        agent.token_id, agent.pool = token_id, pool
    agent.labels, agent.capacity, agent.drivers, agent.version = labels, capacity, drivers, version
    agent.connected, agent.connected_at, agent.disconnected_at = True, utcnow(), None
    agent.draining = draining  # a drain lasts as long as the agentd process that was told
    add_event(s, "agent.connected", agent=name, capacity=capacity, labels=labels)
    applied: dict[str, int] = {}
    to_cancel: list[str] = []
    for run in s.scalars(select(Run).where(Run.agent == name, Run.state.in_(run_states.ACTIVE))):
        if run.id in listed:
            applied[run.id] = run.last_seq
            if run.cancel_requested:
                to_cancel.append(run.id)
        elif run.state == "starting" and run.last_seq == 0:
            requeue(s, run, reason="assignment_not_received")  # never reached the agent
        else:
            _finish(s, run, "failed", exit_code=-1, reason="agent_restarted",
                    error=f"agent {name} came back without this run")
    for run_id in listed - applied.keys():
        # Ended here already (agent_lost, or a result whose ack was lost): take the rest of its output,
        # which cannot change its state, and stop its session. Not this agent's run: forget it.
        run = s.get(Run, run_id)
        applied[run_id] = run.last_seq if run is not None and run.agent == name else FORGET
        to_cancel.append(run_id)
    return HelloResult(applied=applied, to_cancel=to_cancel)


def _expired(token: Token) -> bool:
    expires = aware(token.expires_at)
    return expires is not None and utcnow() >= expires


def agent_disconnected(s: Session, name: str, last_heard_at: dt.datetime | None = None) -> None:
    """The agent's stream ended; it counts as gone since it was last heard (a hung agent is silent long
    before its stream is closed), so its runs fail as agent_lost that long after it fell silent."""
    agent = s.get(Agent, name)
    if agent is None or not agent.connected:
        return
    now = utcnow()
    agent.connected, agent.disconnected_at = False, min(last_heard_at or now, now)
    add_event(s, "agent.disconnected", agent=name, last_heard_at=agent.disconnected_at.isoformat())


def disconnect_all(s: Session) -> None:
    """At start-up no agent is connected to this process yet; their lost-window starts now."""
    s.execute(update(Agent).where(Agent.connected.is_(True)).values(connected=False, disconnected_at=utcnow()))


def fail_lost_runs(s: Session, window: dt.timedelta) -> list[str]:
    """Fail the active runs of agents disconnected for longer than `window`."""
    now = utcnow()
    failed: list[str] = []
    for agent in s.scalars(select(Agent).where(Agent.connected.is_(False))):
        since = aware(agent.disconnected_at)
        if since is None or now - since < window:
            continue
        for run in s.scalars(select(Run).where(Run.agent == agent.name, Run.state.in_(run_states.ACTIVE))):
            _finish(s, run, "failed", exit_code=-1, reason="agent_lost",
                    error=f"agent {agent.name} disconnected for more than {int(window.total_seconds())} s")
            failed.append(run.id)
    return failed


def drain_agent(s: Session, name: str) -> Agent:
    agent = s.get(Agent, name)
    if agent is None:
        raise NotFound(f"no agent {name!r}", field="name")
    if not agent.draining:
        agent.draining = True
        add_event(s, "agent.draining", agent=name)
    return agent
