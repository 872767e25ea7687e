"""controlplane/scheduler.py: which agent gets which queued run."""

from __future__ import annotations

import dataclasses

import pytest

from controlplane.domain.scheduling import AgentSlot, QueuedRun, driver_notice, plan_assignments, pool_notice

BOTH = frozenset({"command", "harness"})


def agent(
    name: str, free: int = 1, *, pool: str = "", drivers: frozenset[str] = BOTH, draining: bool = False
) -> AgentSlot:
    return AgentSlot(name, {"pool": pool} if pool else {}, free, drivers, draining, pool)


def run(run_id: str, pool: str = "", driver: str = "command") -> QueuedRun:
    return QueuedRun(run_id, pool, driver)


@pytest.mark.parametrize(
    "runs, agents, plan",
    [
        pytest.param([run("r1"), run("r2")], [agent("a", 1)], [("r1", "a")], id="oldest first"),
        pytest.param(
            [run("r1")], [agent("a", 1), agent("b", 3), agent("c", 2)], [("r1", "b")], id="most free capacity wins"
        ),
        pytest.param([run("r1")], [agent("b", 2), agent("a", 2)], [("r1", "b")], id="ties go to the first agent"),
        pytest.param(
            [run("r1")], [agent("a", 5, draining=True), agent("b", 1)], [("r1", "b")], id="draining agents are skipped"
        ),
        pytest.param([run("r1")], [agent("a", 5, draining=True)], [], id="only a draining agent"),
        pytest.param(
            [run("r1", pool="gpu")],
            [agent("a", 5), agent("b", 5, pool="cpu"), agent("c", 1, pool="gpu")],
            [("r1", "c")],
            id="a pool's runs go only to agents of that pool",
        ),
        pytest.param(
            [run("r1", pool="gpu")], [agent("a", 5), agent("b", 5, pool="cpu")], [], id="no agent of the pool"
        ),
        pytest.param(
            [run("r1")],
            [agent("a", 1, pool="gpu")],
            [],
            id="a run of the default pool never goes to an agent of another pool",
        ),
        pytest.param(
            [run("r1")],
            [agent("a", 5, pool="gpu"), agent("b", 1)],
            [("r1", "b")],
            id="a run of the default pool goes to a default-pool agent",
        ),
        pytest.param(
            [run("r1", pool="gpu")],
            [AgentSlot("a", {"pool": "gpu"}, 5, BOTH, False, "")],
            [],
            id="a pool label is not a pool: the token's pool is",
        ),
        pytest.param(
            [run("r1", driver="harness")],
            [agent("a", 5, drivers=frozenset({"command"})), agent("b", 1, drivers=frozenset({"harness"}))],
            [("r1", "b")],
            id="the driver must be in the agent's drivers",
        ),
        pytest.param(
            [run("r1", driver="harness")],
            [agent("a", 5, drivers=frozenset({"command"}))],
            [],
            id="no agent with the driver",
        ),
        pytest.param(
            [run("r1", pool="gpu"), run("r2"), run("r3", pool="gpu")],
            [agent("a", 2)],
            [("r2", "a")],
            id="a run with no eligible agent waits while later runs are placed",
        ),
        pytest.param(
            [run("r1"), run("r2"), run("r3"), run("r4")],
            [agent("a", 2), agent("b", 1)],
            [("r1", "a"), ("r2", "a"), ("r3", "b")],
            id="capacity is consumed by the plan itself",
        ),
        pytest.param(
            [run("r1"), run("r2"), run("r3")],
            [agent("a", 2), agent("b", 2)],
            [("r1", "a"), ("r2", "b"), ("r3", "a")],
            id="runs spread as free capacity falls",
        ),
        pytest.param([run("r1")], [agent("a", 0), agent("b", -1)], [], id="no free capacity"),
        pytest.param([], [agent("a", 3)], [], id="nothing queued"),
    ],
)
def test_plan_assignments(runs: list[QueuedRun], agents: list[AgentSlot], plan: list[tuple[str, str]]) -> None:
    assert plan_assignments(runs, agents) == plan


@pytest.mark.parametrize(
    ("pool", "agents", "says"),
    [
        ("", [AgentSlot("a", {}, 1, frozenset({"command"}))], ""),
        ("", [], "no agent of pool default is connected"),
        ("web", [AgentSlot("a", {}, 1, frozenset({"command"}))], "no agent of pool 'web' is connected"),
        ("", [AgentSlot("a", {}, 1, frozenset({"command"}), draining=True)], "every connected agent of pool default"),
        (
            "web",
            [
                AgentSlot("b", {}, 1, frozenset({"command"}), draining=True, pool="web"),
                AgentSlot("c", {}, 1, frozenset({"command"}), pool=""),
            ],
            "is draining (b)",
        ),
    ],
)
def test_pool_notice_says_what_holds_a_pool_up(pool: str, agents: list[AgentSlot], says: str) -> None:
    notice = pool_notice(pool, agents)
    assert (says in notice) if says else notice == ""


HARNESS_ONLY = AgentSlot("a", {}, 1, frozenset({"command", "harness"}))
WITH_CLAUDE = AgentSlot("b", {}, 1, frozenset({"command", "harness", "claude-code"}))


@pytest.mark.parametrize(
    ("driver", "agents", "says"),
    [
        ("claude-code", [HARNESS_ONLY], "no connected agent of pool default offers runtime claude-code"),
        ("claude-code", [HARNESS_ONLY, WITH_CLAUDE], ""),
        ("opencode", [WITH_CLAUDE], "(agentd --opencode-command)"),
        ("harness", [HARNESS_ONLY], ""),
        ("claude-code", [], ""),  # no agent at all: pool_notice says so
        ("claude-code", [dataclasses.replace(WITH_CLAUDE, draining=True), HARNESS_ONLY], "offers runtime claude-code"),
    ],
)
def test_driver_notice_says_when_no_agent_offers_a_runtime(driver: str, agents: list[AgentSlot], says: str) -> None:
    notice = driver_notice("", driver, agents)
    assert (says in notice) if says else notice == ""
