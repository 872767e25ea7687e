"""Which agent gets which queued run: a pure function over plain data."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence


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
