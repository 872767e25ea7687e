"""Which agent gets which queued run: a pure function over plain data."""

from __future__ import annotations

import dataclasses
import heapq
from collections import deque
from collections.abc import Mapping, Sequence
from fractions import Fraction

from drover.errors import InvalidArgument


@dataclasses.dataclass(frozen=True)
class AgentSlot:
    name: str
    labels: Mapping[str, str]
    free: int
    drivers: frozenset[str]
    draining: bool = False
    pool: str = ""
    """The pool of the agent's token ("": the default pool); its labels cannot change it."""


@dataclasses.dataclass(frozen=True)
class AgentHello:
    """What a connected agent said of itself, as its hello was recorded: its slot without the runs it holds."""

    name: str
    labels: Mapping[str, str]
    capacity: int
    drivers: frozenset[str]
    draining: bool = False
    pool: str = ""

    def slot(self, active: int) -> AgentSlot:
        """Its slot while it holds `active` runs."""
        return AgentSlot(self.name, self.labels, self.capacity - active, self.drivers, self.draining, self.pool)


@dataclasses.dataclass(frozen=True)
class QueuedRun:
    run_id: str
    pool: str  # the project's pool; "" for the default pool
    driver: str  # command | harness
    avoid: frozenset[str] = frozenset()  # agents that refused this run a moment ago


def eligible(run: QueuedRun, agent: AgentSlot) -> bool:
    """Pools are walls: an agent only ever gets runs (and their secrets) of projects in its own pool."""
    if agent.draining or run.driver not in agent.drivers or agent.name in run.avoid:
        return False
    return agent.pool == run.pool


def plan_assignments(runs: Sequence[QueuedRun], agents: Sequence[AgentSlot]) -> list[tuple[str, str]]:
    """Runs (oldest first) to agents: each to the eligible agent with the most free capacity;
    ties go to the agent listed first. A run with no eligible agent waits."""
    free = {a.name: a.free for a in agents}
    plan: list[tuple[str, str]] = []
    for run in runs:
        best: AgentSlot | None = None
        for agent in agents:
            if free[agent.name] > 0 and eligible(run, agent) and (best is None or free[agent.name] > free[best.name]):
                best = agent
        if best is not None:
            free[best.name] -= 1
            plan.append((run.run_id, best.name))
    return plan


def pool_notice(pool: str, agents: Sequence[AgentSlot]) -> str:
    """Why queued runs of `pool` cannot be assigned whatever the queue does ("" when some agent can
    take them): no connected agent serves the pool, or every one of them drains. `agents`: connected."""
    name = repr(pool) if pool else "default"
    serving = [a for a in agents if a.pool == pool]
    if not serving:
        return f"no agent of pool {name} is connected: its runs wait until one connects"
    if all(a.draining for a in serving):
        names = ", ".join(sorted(a.name for a in serving))
        return (
            f"every connected agent of pool {name} is draining ({names}): its runs wait until one is undrained "
            "(drover undrain NAME) or another connects"
        )
    return ""


RUNTIME_FLAGS = {"claude-code": "--claude-command", "opencode": "--opencode-command"}


def driver_notice(pool: str, driver: str, agents: Sequence[AgentSlot]) -> str:
    """Why queued runs of `driver` in `pool` cannot be assigned: no connected agent of the pool offers it
    ("" when one does, or when the pool itself is the reason, which pool_notice says)."""
    serving = [a for a in agents if a.pool == pool and not a.draining]
    if not serving or any(driver in a.drivers for a in serving):
        return ""
    name = repr(pool) if pool else "default"
    how = f" (agentd {RUNTIME_FLAGS[driver]})" if driver in RUNTIME_FLAGS else ""
    return f"no connected agent of pool {name} offers runtime {driver}{how}: its runs wait until one does"


DEFAULT_MAX_ACTIVE_RUNS_PER_CHANGE = 8
DEFAULT_OPEN_SANDBOXES_PER_CHANGE = 4
MAX_CHANGE_CAP = 1000


def changes_at_caps(
    active: Mapping[str, int], sandboxes: Mapping[str, int], caps: Mapping[str, tuple[int, int]]
) -> tuple[list[str], list[str]]:
    """Of the Changes with (max_active_runs_per_change, max_open_sandboxes_per_change) `caps`: those whose
    active runs fill the first (none of their runs may start), and the others whose open sandboxes fill the
    second (only their runs that open none may start)."""
    full = sorted(c for c, (cap, _) in caps.items() if active.get(c, 0) >= cap)
    boxed = sorted(c for c, (_, cap) in caps.items() if c not in full and sandboxes.get(c, 0) >= cap)
    return full, boxed


def check_change_cap(value: int, field: str = "max_active_runs_per_change") -> int:
    """A per-Change cap is 1 to 1000 (InvalidArgument naming the setting otherwise)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_CHANGE_CAP:
        raise InvalidArgument(f"must be 1 to {MAX_CHANGE_CAP}", field=field)
    return value


@dataclasses.dataclass(frozen=True)
class CappedRun:
    run_id: str
    change_id: str
    cap: int
    """The project's max_active_runs_per_change."""
    sandbox_cap: int = DEFAULT_OPEN_SANDBOXES_PER_CHANGE
    """The project's max_open_sandboxes_per_change."""
    sandbox: bool = False
    """It opens a sandbox while active (a command run, or a Task with a writable workspace): the sandbox
    cap holds it too; other runs (plan, review, ...) neither count against it nor wait on it."""


@dataclasses.dataclass(frozen=True)
class Hold:
    """Which of its Change's caps holds a ready run: the setting, its value, and the Change's count."""

    cap: str
    limit: int
    active: int


def holding_cap(run: CappedRun, active: Mapping[str, int], sandboxes: Mapping[str, int]) -> Hold | None:
    """The cap that holds `run` given its Change's active runs and open sandboxes (None: neither does);
    the active-run cap first, as it holds every run of the Change."""
    running = active.get(run.change_id, 0)
    if running >= run.cap:
        return Hold("max_active_runs_per_change", run.cap, running)
    opened = sandboxes.get(run.change_id, 0)
    if run.sandbox and opened >= run.sandbox_cap:
        return Hold("max_open_sandboxes_per_change", run.sandbox_cap, opened)
    return None


def admit_by_change(
    runs: Sequence[CappedRun], active: Mapping[str, int], sandboxes: Mapping[str, int] | None = None
) -> tuple[list[str], list[str]]:
    """Which ready runs (oldest first) may start given each Change's active (starting/running) runs, the
    open sandboxes among them, and its caps: (admitted, held). A held run stays ready (queued) and starts
    when a slot of its Change frees; each Change only holds its own runs up, never another's, and a Change
    at its sandbox cap still starts its runs that open no sandbox."""
    used, opened = dict(active), dict(sandboxes or {})
    admitted: list[str] = []
    held: list[str] = []
    for run in runs:
        if holding_cap(run, used, opened) is None:
            used[run.change_id] = used.get(run.change_id, 0) + 1
            if run.sandbox:
                opened[run.change_id] = opened.get(run.change_id, 0) + 1
            admitted.append(run.run_id)
        else:
            held.append(run.run_id)
    return admitted, held


def holds_after(
    runs: Sequence[CappedRun], admitted: Sequence[str], active: Mapping[str, int], sandboxes: Mapping[str, int]
) -> dict[str, Hold]:
    """Which cap holds each run not admitted, its Change's counts taking in the runs admitted in the same
    pass (what its run.blocked_limit event says)."""
    used, opened, chosen = dict(active), dict(sandboxes), set(admitted)
    for run in runs:
        if run.run_id in chosen:
            used[run.change_id] = used.get(run.change_id, 0) + 1
            opened[run.change_id] = opened.get(run.change_id, 0) + run.sandbox
    return {
        run.run_id: hold
        for run in runs
        if run.run_id not in chosen and (hold := holding_cap(run, used, opened)) is not None
    }


def cap_notice(queued: int, active: int, cap: int) -> str:
    """Why a Change's queued runs wait on its own cap ("" when they do not)."""
    if not queued or active < cap:
        return ""
    return (
        f"blocked_limit: {queued} queued run(s) wait: the Change has {active} active run(s), its project's "
        f"max_active_runs_per_change is {cap}; they start as its runs finish"
    )


def sandbox_notice(queued: int, opened: int, cap: int) -> str:
    """Why a Change's queued runs that open a sandbox wait on its sandbox cap ("" when they do not)."""
    if not queued or opened < cap:
        return ""
    return (
        f"blocked_limit: {queued} queued run(s) wait for a sandbox: the Change's open sandboxes: {opened} (its "
        f"active command and write runs), its project's max_open_sandboxes_per_change is {cap}; they start as "
        "those runs finish"
    )


DEFAULT_WEIGHT = 1
MAX_WEIGHT = 1000


def check_weight(value: int, field: str = "weight") -> int:
    """A project's weight is 1 to 1000 (InvalidArgument naming the setting otherwise)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WEIGHT:
        raise InvalidArgument(f"must be 1 to {MAX_WEIGHT}", field=field)
    return value


@dataclasses.dataclass(frozen=True)
class FairRun:
    run_id: str
    change_id: str
    project: str
    weight: int = DEFAULT_WEIGHT
    """The project's weight: its share of its pool's slots against the pool's other projects."""


def fair_order(
    runs: Sequence[FairRun], active_by_change: Mapping[str, int], active_by_project: Mapping[str, int]
) -> list[str]:
    """The order slots go to ready runs (given oldest first), counting the runs already active
    (starting/running): the next slot to the project with the least (active + given) / weight (ties: the
    one whose oldest ready run is older), within it to the Change with the fewest active + given (ties:
    the older oldest ready run), within the Change its oldest run. A project is in one pool and a pick
    among one pool's projects depends on them alone, so each pool's runs come in the order they would
    alone: pools never take from each other."""
    by_change: dict[str, deque[int]] = {}
    left: dict[str, list[int]] = {}  # a project's runs not ordered yet, a heap of their indices (ages)
    for i, run in enumerate(runs):
        by_change.setdefault(run.change_id, deque()).append(i)
        left.setdefault(run.project, []).append(i)  # ascending: already a heap
    weight = {run.project: max(1, run.weight) for run in runs}
    load = {p: active_by_project.get(p, 0) for p in left}  # active + given this pass
    given = {c: active_by_change.get(c, 0) for c in by_change}
    changes: dict[str, list[tuple[int, int, str]]] = {p: [] for p in left}  # (active + given, oldest, Change)
    for change_id, queue in by_change.items():
        heapq.heappush(changes[runs[queue[0]].project], (given[change_id], queue[0], change_id))
    projects = [(Fraction(load[p], weight[p]), left[p][0], p) for p in left]
    heapq.heapify(projects)
    taken: set[int] = set()
    order: list[str] = []
    while projects:
        project = heapq.heappop(projects)[2]
        change_id = heapq.heappop(changes[project])[2]
        i = by_change[change_id].popleft()
        order.append(runs[i].run_id)
        taken.add(i)
        load[project] += 1
        given[change_id] += 1
        if by_change[change_id]:
            heapq.heappush(changes[project], (given[change_id], by_change[change_id][0], change_id))
        while left[project] and left[project][0] in taken:
            heapq.heappop(left[project])
        if left[project]:
            heapq.heappush(projects, (Fraction(load[project], weight[project]), left[project][0], project))
    return order
