"""A submit whose command Tasks need no routing decision is assigned in the submit's own transaction
(`Dispatcher.run_and_assign`), on a real store (SQLite and PostgreSQL): the runs are starting when the
submit answers, and concurrent submits never give an agent more runs than its capacity (one
assignment transaction at a time per replica)."""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import Iterator

import pytest
from sqlalchemy import select

from controlplane.config import ServerConfig
from controlplane.dispatch.assignments import Assignment
from controlplane.dispatch.dispatcher import Dispatcher
from controlplane.dispatch.roster import Roster
from controlplane.dispatch.router import Router
from controlplane.domain.graph import ChangeSpec, TaskSpec
from controlplane.domain.scheduling import AgentHello
from controlplane.services import agent_presence, change_lifecycle, projects
from controlplane.services.notify import Notifier
from controlplane.store.engine import Store
from controlplane.store.models import Run
from controlplane.store.objects import DirectoryStore


class Agents:
    """This replica's connected agents (the Protocol the dispatcher takes), recording what is sent."""

    def __init__(self) -> None:
        self.roster = Roster()
        self.sent: list[tuple[str, Assignment]] = []

    def connected(self) -> list[str]:
        return [hello.name for hello in self.hellos()]

    def hellos(self) -> list[AgentHello]:
        return self.roster.of(["agent-1"])

    def send(self, agent: str, assignment: Assignment) -> None:
        self.sent.append((agent, assignment))


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Store]:
    url = f"sqlite:///{tmp_path / 'drover.db'}" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    store = Store(url)
    store.migrate()
    store.transaction(lambda s: projects.add_project(s, "web", ""))
    yield store
    store.close()


def dispatcher(store: Store, tmp_path: pathlib.Path, agents: Agents) -> Dispatcher:
    config = ServerConfig(data_dir=tmp_path, database_url=str(store.engine.url))
    objects = DirectoryStore(tmp_path / "objects")
    router = Router(store, config.harness, Notifier(), objects, tmp_path / "mirrors")
    return Dispatcher(store, config, Notifier(), objects, router, agents)


def spec(n: int) -> ChangeSpec:
    tasks = tuple(TaskSpec(key=f"t{i}", kind="test", objective="sleep", command=("sleep", "1")) for i in range(n))
    return ChangeSpec("web", f"{n} sleeps", tasks)


def connect(store: Store, agents: Agents, capacity: int) -> None:
    result = store.transaction(agent_presence.agent_connected, "agent-1", {}, capacity, ["command"], "t", set(), False)
    agents.roster.connected(result.hello)


def states(store: Store, change_id: str) -> list[str]:
    return store.transaction(lambda s: sorted(s.scalars(select(Run.state).where(Run.change_id == change_id))))


async def test_a_submit_answers_with_its_command_runs_assigned(store: Store, tmp_path: pathlib.Path) -> None:
    agents = Agents()
    connect(store, agents, 2)
    change_id = await dispatcher(store, tmp_path, agents).run_and_assign(change_lifecycle.submit_change, spec(3), "a")
    assert states(store, change_id) == ["queued", "starting", "starting"]
    assert len(agents.sent) == 2 and {a.change_id for _, a in agents.sent} == {change_id}


async def test_without_an_agent_here_the_submit_is_only_a_submit(store: Store, tmp_path: pathlib.Path) -> None:
    agents = Agents()
    change_id = await dispatcher(store, tmp_path, agents).run_and_assign(change_lifecycle.submit_change, spec(1), "a")
    assert states(store, change_id) == ["queued"] and agents.sent == []


async def test_concurrent_submits_never_overfill_an_agent(store: Store, tmp_path: pathlib.Path) -> None:
    agents = Agents()
    connect(store, agents, 3)
    plane = dispatcher(store, tmp_path, agents)
    submits = [plane.run_and_assign(change_lifecycle.submit_change, spec(2), "a") for _ in range(5)]
    await asyncio.gather(*submits, plane.dispatch_once(), plane.dispatch_once())
    assert len(agents.sent) == 3
    assert len({a.run_id for _, a in agents.sent}) == 3
