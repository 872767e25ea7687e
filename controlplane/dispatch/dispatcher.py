"""The dispatch loop: route the queued harness runs, then give queued runs to connected agents (in the
fair order: by weight between a pool's projects, round-robin between a project's Changes, oldest first
within one; each to the agent of the run's pool with the most free capacity). Every run is assigned in
a savepoint of its own; one that cannot be assigned fails alone, in its own transaction, and the batch goes on."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from controlplane.config import HarnessConfig, ServerConfig
from controlplane.dispatch import assignments
from controlplane.dispatch.admission import admit, change_load, held_at_caps, mark_held
from controlplane.dispatch.assignments import Assignment, opens_sandbox_clause
from controlplane.dispatch.roster import read_hellos
from controlplane.dispatch.router import Router
from controlplane.domain import run_states
from controlplane.domain.claims import task_resources
from controlplane.domain.error_ids import error_id
from controlplane.domain.scheduling import (
    AgentHello,
    AgentSlot,
    FairRun,
    QueuedRun,
    changes_at_caps,
    fair_order,
    plan_assignments,
)
from controlplane.services import claims, run_lifecycle
from controlplane.services.credentials import Sealer
from controlplane.services.notify import Notifier
from controlplane.store import events, locks
from controlplane.store.engine import Store
from controlplane.store.models import Change, DecisionReceipt, Project, Run, Task, utcnow
from controlplane.store.objects import ObjectStore
from drover.errors import DroverError

log = logging.getLogger("drover.dispatch")
T = TypeVar("T")
REFUSAL_BACKOFF_SECONDS = 30.0
"""An agent that refused a run is not offered it again this soon."""


class Agents(Protocol):
    """The connected agents, as the dispatcher sees them (the api layer's agent streams)."""

    def connected(self) -> list[str]: ...

    def hellos(self) -> list[AgentHello]:
        """The connected agents' recorded hellos (the replica's roster), by name."""
        ...

    def send(self, agent: str, assignment: Assignment) -> None: ...


@dataclasses.dataclass(frozen=True)
class Dispatched:
    assigned: list[tuple[str, Assignment]]
    failed: list[tuple[str, str]]  # (run id, why it cannot be assigned): each is failed in its own transaction


class Dispatcher:
    def __init__(
        self,
        store: Store,
        config: ServerConfig,
        notifier: Notifier,
        objects: ObjectStore,
        router: Router,
        agents: Agents,
        leading: Callable[[], Awaitable[bool]] | None = None,
        tell_others: Callable[[dict[str, Any]], None] = lambda note: None,
        sealer: Sealer | None = None,
    ) -> None:
        self.store, self.config, self.notifier, self.objects = store, config, notifier, objects
        self.sealer = sealer
        """Opens the projects' git credentials for their runs' secret_env."""
        self.router, self.agents = router, agents
        self.leading, self.tell_others = leading or _always, tell_others
        """Only the leading replica routes; every replica dispatches to the agents connected to it."""
        self._wake = asyncio.Event()
        self._assigning = asyncio.Lock()
        """One assignment transaction at a time on this replica: two at once would both count an agent's
        free slots before either wrote its runs, and overfill it. (Replicas hold different agents.)"""
        # run id -> {agent: monotonic time until which it is not offered the run again}
        self._refusals: dict[str, dict[str, float]] = {}

    def wake(self) -> None:
        """There may be work: here, and on the other replicas (routing is the leader's, and their agents
        may be free)."""
        self._wake.set()
        self.tell_others({"kind": "wake"})

    def wake_here(self) -> None:
        self._wake.set()

    def refused(self, run_id: str, agent: str) -> None:
        self._refusals.setdefault(run_id, {})[agent] = time.monotonic() + REFUSAL_BACKOFF_SECONDS
        self.wake()

    async def run_forever(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self.config.dispatch_interval)
            self._wake.clear()
            try:
                if await self.leading() and await self.router.route_pending():
                    self.wake()  # routed runs can be dispatched at once, here and on the other replicas
                if await self.dispatch_once():
                    self.tell_others({"kind": "wake"})  # what this replica could not take, another may
            except Exception:
                log.exception("dispatch failed; retrying")
                await asyncio.sleep(1)

    async def run_and_assign(self, fn: Callable[..., T], *args: Any) -> T:
        """fn(session, *args) and then, in the same transaction, an assignment pass: a submit's command
        runs (no routing decision to wait for) go to this replica's free agents without waiting for the
        dispatcher's wake-up and a transaction of their own. Assignments are sent once it has committed."""
        if not self.agents.hellos():
            return await self.store.run(fn, *args)
        async with self._assigning:
            answer, done = await self.store.run(_then_assign, fn, args, self._pass_args())
        for agent, assignment in done.assigned:
            self.agents.send(agent, assignment)
        await self._after(done)
        return answer

    async def dispatch_once(self) -> int:
        async with self._assigning:
            args = self._pass_args()
            if not args[0]:
                return 0
            done = await self.store.run(assign_queued, *args)
        for agent, assignment in done.assigned:
            self.agents.send(agent, assignment)
        await self._after(done)
        return len(done.assigned)

    def _pass_args(self) -> tuple[Any, ...]:
        """`assign_queued`'s arguments after the session, for a pass now (no agent: an empty first)."""
        hellos = self.agents.hellos()
        now = time.monotonic()
        self._refusals = {
            run: fresh
            for run, by in self._refusals.items()
            if (fresh := {a: until for a, until in by.items() if until > now})
        }
        avoid = {run: frozenset(by) for run, by in self._refusals.items()}
        harness, limit = self.config.harness, self.config.output_limit_bytes
        return [hello.name for hello in hellos], avoid, harness, self.objects, limit, self.sealer, hellos

    async def _after(self, done: Dispatched) -> None:
        """After the pass committed and its assignments were sent: the runs that cannot be assigned
        fail, each in its own transaction."""
        for run_id, reason in done.failed:
            log.warning("run %s cannot be assigned: %s", run_id, reason)
            await self.store.run(run_lifecycle.fail_unassignable, run_id, reason)
        if done.assigned or done.failed:
            self.notifier.notify()


def _then_assign(
    s: Session, fn: Callable[..., T], args: tuple[Any, ...], pass_args: tuple[Any, ...]
) -> tuple[T, Dispatched]:
    """fn's transaction, then an assignment pass in it (`Dispatcher.run_and_assign`)."""
    answer = fn(s, *args)
    s.flush()
    return answer, assign_queued(s, *pass_args) if pass_args[0] else Dispatched([], [])


def assign_queued(
    s: Session,
    connected: list[str],
    avoid: dict[str, frozenset[str]],
    harness: HarnessConfig,
    objects: ObjectStore,
    output_limit: int = 0,
    sealer: Sealer | None = None,
    hellos: list[AgentHello] | None = None,
) -> Dispatched:
    """In one transaction: plan and record the assignment of queued runs to connected agents, each
    run in a savepoint of its own. `hellos`: the connected agents' recorded hellos when the caller
    keeps them (the roster); else they are read."""
    if s.scalar(select(Run.id).where(Run.state == "queued").limit(1)) is None:
        return Dispatched([], [])  # the common case on a busy fleet: cheap, whatever its size
    slots = agent_slots(s, connected, hellos)
    free = [slot for slot in slots if slot.free > 0 and not slot.draining]
    if not free:
        return Dispatched([], [])
    drivers = set().union(*(slot.drivers for slot in free))
    active, sandboxes, caps = change_load(s)
    full, boxed = changes_at_caps(active, sandboxes, caps)
    held = held_at_caps(s, full, boxed, active, sandboxes) if full or boxed else []
    rows = ready_window(s, free, drivers, full, boxed)
    queued = {run.id: (run, task, project) for run, task, project in rows}
    admitted, held_now = admit(queued, active, sandboxes)
    plan = plan_assignments(
        [
            QueuedRun(run.id, project.pool, run.driver, avoid.get(run.id, frozenset()))
            for run, task, project in (queued[run_id] for run_id in fair_share(s, queued, admitted, active))
        ],
        slots,
    )
    # Every Change this pass writes a run of, locked sorted before the first run is written (lock order):
    # writing a run takes a key-share lock on its Change, and taking those one run at a time, in the
    # plan's order, met a run-message batch's sorted Change locks in a circle on PostgreSQL.
    held = [(run, hold) for run, hold in held + held_now if not run.blocked_limit]  # said once: no write
    locks.lock_changes(s, [run.change_id for run, _ in held] + [queued[run_id][0].change_id for run_id, _ in plan])
    for run, hold in held:
        mark_held(s, run, hold)
    out: list[tuple[str, Assignment]] = []
    failed: list[tuple[str, str]] = []
    for run_id, agent in plan:
        run, task, project = queued[run_id]
        try:
            with s.begin_nested():  # one run that cannot be assigned never takes the batch down with it
                assignment = _assign_one(s, run, task, project, agent, harness, objects, output_limit, sealer)
        except Exception as err:
            if locks.retry_reason(err) is not None:
                raise  # a deadlock is not the run's failure: the store runs the whole pass again
            failed.append((run_id, _unassignable(run_id, err)))
            continue
        if assignment is not None:
            out.append((agent, assignment))
    return Dispatched(out, failed)


def ready_window(s: Session, free: list[AgentSlot], drivers: set[str], full: list[str], boxed: list[str]) -> list[Any]:
    """The ready runs (with their Task and project) this pass chooses from, oldest first: each Change's
    oldest runs, as many as the free slots, so a young Change is in the window however many runs older
    Changes queue. The window function ranks in a subquery: PostgreSQL refuses FOR UPDATE at the query
    level that has one, so the outer query locks."""
    slots = max(1, sum(slot.free for slot in free))
    rank = func.row_number().over(partition_by=Run.change_id, order_by=(Run.created_at, Run.id)).label("change_rank")
    ranked = (
        select(Run.id, rank)
        .join(Task, Run.task_id == Task.id)
        .join(Change, Change.id == Run.change_id)
        .join(Project, Project.name == Change.project)
        .where(Run.state == "queued")
        .where(or_(Run.not_before.is_(None), Run.not_before <= utcnow()))
        .where(or_(Run.driver == "command", (Run.member != "") & (Run.context_hash != "")))  # routed, packet ready
        .where(Project.pool.in_({slot.pool for slot in free}), Run.driver.in_(drivers))
        .where(Run.change_id.not_in(full))  # a Change at its cap never fills the window others' runs need
        .where(~(Run.change_id.in_(boxed) & opens_sandbox_clause()))  # nor one at its sandbox cap
        .subquery()
    )
    rows = s.execute(
        select(Run, Task, Project)
        .join(ranked, ranked.c.id == Run.id)
        .join(Task, Run.task_id == Task.id)
        .join(Change, Change.id == Run.change_id)
        .join(Project, Project.name == Change.project)
        .where(ranked.c.change_rank <= slots)
        .order_by(ranked.c.change_rank, Run.created_at, Run.id)  # past the limit: every Change's first runs first
        .limit(min(2000, max(50, 4 * slots)))
        # Several replicas: each takes the queued runs no other replica is assigning right now.
        .with_for_update(of=Run, skip_locked=True)
    ).all()
    return sorted(rows, key=lambda row: (row[0].created_at, row[0].id))


def fair_share(
    s: Session, queued: dict[str, tuple[Run, Task, Project]], admitted: list[str], active: dict[str, int]
) -> list[str]:
    """The admitted runs in the order the pools' slots go to them (`scheduling.fair_order`): by weight
    between projects, round-robin between a project's Changes, counting the runs already active."""
    names = {queued[run_id][2].name for run_id in admitted}
    by_project = dict(
        s.execute(
            select(Change.project, func.count())
            .select_from(Run)
            .join(Change, Change.id == Run.change_id)
            .where(Run.state.in_(run_states.ACTIVE), Change.project.in_(names))
            .group_by(Change.project)
        ).all()
    )
    runs = [queued[run_id] for run_id in admitted]
    return fair_order(
        [FairRun(run.id, run.change_id, project.name, project.weight) for run, _, project in runs], active, by_project
    )


def agent_slots(s: Session, connected: list[str], hellos: list[AgentHello] | None = None) -> list[AgentSlot]:
    """The connected agents with their free capacity: their recorded hellos (given, from the roster, or
    read as rows: a fleet has thousands) less the active runs each holds, counted here (the truth)."""
    if hellos is None:
        hellos = read_hellos(s, connected)
    names = [hello.name for hello in hellos]
    active = dict(
        s.execute(
            select(Run.agent, func.count())
            .where(Run.agent.in_(names), Run.state.in_(run_states.ACTIVE))
            .group_by(Run.agent)
        ).all()
    )
    return [hello.slot(active.get(hello.name, 0)) for hello in hellos]


def _assign_one(
    s: Session,
    run: Run,
    task: Task,
    project: Project,
    agent: str,
    harness: HarnessConfig,
    objects: ObjectStore,
    output_limit: int,
    sealer: Sealer | None,
) -> Assignment | None:
    if run_lifecycle.assign(s, run.id, agent) is None:
        return None
    receipt = s.get(DecisionReceipt, run.id)
    if receipt is not None:
        receipt.data = {**(receipt.data or {}), "agent": agent}
    resources = task_resources(task.spec or {})
    if resources:  # advisory: a claim another run holds is recorded as contended, never blocks
        claims.acquire(s, run.id, resources, utcnow())
    assignment = assignments.build(s, run, task, project, harness, objects, output_limit, sealer)
    run.branch = assignment.preparation.task_branch  # the run records where its ChangeSet goes
    return assignment


def _unassignable(run_id: str, err: Exception) -> str:
    """The reason a run could not be assigned, safe to show its users: a DroverError says what is wrong
    with the run; anything else is logged with an id and named by it."""
    if isinstance(err, DroverError):
        return f"assignment_failed: {err}"
    eid = error_id()
    log.error("run %s cannot be assigned (error id %s)", run_id, eid, exc_info=err)
    return f"assignment_failed: {type(err).__name__} (error id {eid} in the control plane's log)"


def resume_assignments(
    s: Session,
    agent: str,
    run_ids: list[str],
    harness: HarnessConfig,
    objects: ObjectStore,
    output_limit: int = 0,
    sealer: Sealer | None = None,
) -> list[Assignment]:
    """Assignments sent again (secrets included) so harness runs whose supervisor died resume."""
    out = []
    for run_id in run_ids:
        run = s.get(Run, run_id)
        if run is None or run.agent != agent or run.state not in run_states.ACTIVE or run.driver != "harness":
            continue
        task = s.get(Task, run.task_id)
        change = s.get(Change, run.change_id)
        assert task is not None and change is not None
        project = s.get(Project, change.project)
        assert project is not None
        try:
            assignment = assignments.build(s, run, task, project, harness, objects, output_limit, sealer)
        except DroverError as err:  # its git credential does not open: the run is not resumed, nor the agent refused
            log.warning("run %s cannot be resumed: %s", run.id, err)
            continue
        events.add_event(s, "run.resumed", change_id=run.change_id, task_id=run.task_id, run_id=run.id, agent=agent)
        out.append(dataclasses.replace(assignment, resume=True))
    return out


async def _always() -> bool:
    return True
