"""The agents' slots a dispatch pass plans with: their recorded hellos come from the replica's roster
(kept in memory, corrected as agents connect, drain and go), the runs each holds from the database.
The roster agrees with the database, the truth, at every step; and over a real stream a control plane
offers an agent as many runs as its latest hello's capacity, none while it drains."""

from __future__ import annotations

import pathlib
import time
from collections.abc import Iterator

import pytest
from sqlalchemy.orm import Session

from controlplane.dispatch.dispatcher import agent_slots
from controlplane.dispatch.roster import Roster, read_hellos
from controlplane.domain.graph import ChangeSpec, TaskSpec
from controlplane.domain.scheduling import AgentHello, AgentSlot
from controlplane.services import agent_presence, change_lifecycle, projects, run_lifecycle
from controlplane.store.engine import Store
from controlplane.store.models import Run
from drover.v1 import agent_pb2
from tests.conftest import Fleet, task, wait_for
from tests.controlplane.api.test_agent_protocol import RawAgent

A = AgentHello("a", {"zone": "x"}, 2, frozenset({"command"}))
B = AgentHello("b", {}, 4, frozenset({"command", "harness"}), pool="gpu")


@pytest.mark.parametrize(
    "steps, names, expected",
    [
        ([("connected", A), ("connected", B)], ["b", "a"], [A, B]),  # by name
        ([("connected", A)], ["a", "b"], [A]),  # b's stream is still in its hello: not offered runs
        ([("connected", A), ("disconnected", "a")], ["a"], []),
        ([("connected", A), ("draining", ("a", True))], ["a"], [AgentHello("a", {"zone": "x"}, 2, A.drivers, True)]),
        ([("connected", A), ("draining", ("a", True)), ("draining", ("a", False))], ["a"], [A]),
        ([("draining", ("a", True))], ["a"], []),  # a drain of an agent not here changes nothing
        (
            [("connected", A), ("connected", AgentHello("a", {}, 8, A.drivers))],
            ["a"],
            [AgentHello("a", {}, 8, A.drivers)],
        ),
    ],
)
def test_the_roster_follows_connects_drains_and_ends(
    steps: list[tuple[str, object]], names: list[str], expected: list[AgentHello]
) -> None:
    roster = Roster()
    for step, arg in steps:
        if step == "connected":
            assert isinstance(arg, AgentHello)
            roster.connected(arg)
        elif step == "disconnected":
            roster.disconnected(str(arg))
        else:
            name, draining = arg  # type: ignore[misc]
            roster.draining(name, draining)
    assert roster.of(names) == expected


def test_a_slot_is_the_hello_less_the_runs_held() -> None:
    assert B.slot(3) == AgentSlot("b", {}, 1, frozenset({"command", "harness"}), False, "gpu")


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Store]:
    url = f"sqlite:///{tmp_path / 'drover.db'}" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    store = Store(url)
    store.migrate()
    store.transaction(lambda s: projects.add_project(s, "web", ""))
    yield store
    store.close()


def connect(store: Store, roster: Roster, name: str, capacity: int, draining: bool = False) -> None:
    labels = {"zone": name}
    result = store.transaction(
        agent_presence.agent_connected, name, labels, capacity, ["command"], "test", set(), draining
    )
    roster.connected(result.hello)


def slots_both_ways(store: Store, roster: Roster, names: list[str]) -> tuple[list[AgentSlot], list[AgentSlot]]:
    """(from the roster, read from the database) in one transaction."""

    def both(s: Session) -> tuple[list[AgentSlot], list[AgentSlot]]:
        return agent_slots(s, names, roster.of(names)), agent_slots(s, names)

    return store.transaction(both)


def test_the_roster_gives_the_slots_the_database_gives(store: Store) -> None:
    roster = Roster()
    connect(store, roster, "a", 2)
    connect(store, roster, "b", 3, draining=True)
    specs = (TaskSpec(key="t", kind="test", objective="sleep", command=("sleep", "1")),)
    change_id = store.transaction(change_lifecycle.submit_change, ChangeSpec("web", "one", specs), "alice")
    run_id = store.transaction(lambda s: s.query(Run.id).filter(Run.change_id == change_id).scalar())
    store.transaction(run_lifecycle.assign, run_id, "a")

    from_roster, from_rows = slots_both_ways(store, roster, ["a", "b"])
    assert from_roster == from_rows
    assert [(x.name, x.free, x.draining) for x in from_roster] == [("a", 1, False), ("b", 3, True)]

    store.transaction(agent_presence.drain_agent, "a", True)
    roster.draining("a", True)
    connect(store, roster, "b", 5)  # b came back with more capacity, not draining
    from_roster, from_rows = slots_both_ways(store, roster, ["a", "b"])
    assert from_roster == from_rows
    assert [(x.name, x.free, x.draining) for x in from_roster] == [("a", 1, True), ("b", 5, False)]

    rebuilt = Roster()  # a replica starting: from the database alone
    rebuilt.rebuild(store.transaction(read_hellos, ["a", "b"]))
    assert rebuilt.of(["a", "b"]) == roster.of(["a", "b"])


def test_a_plane_offers_an_agent_its_latest_capacity_and_nothing_while_it_drains(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    plane.add_project("slots")
    raw = RawAgent(plane, "roster", capacity=2)
    raw.next("welcome")
    with plane.client() as client:
        client.submit_change("slots", "three", [task(f"t{i}", ["true"]) for i in range(3)])
        first = [raw.next("assign").assign.run_id for _ in range(2)]  # its capacity: 2 of the 3
        client.drain_agent("roster")
        assert raw.next("drain").drain.undrain is False
        raw.run_message(first[0], 1, finished=agent_pb2.RunFinished(status="succeeded"))
        assert raw.next("ack").ack.seq == 1
        # A slot is free, but the agent drains: the third run and a later one stay queued, pass after pass.
        client.submit_change("slots", "later", [task("later", ["true"])])
        time.sleep(1.0)
        assert len(client.list_runs(state="queued")) == 2
        client.undrain_agent("roster")
        assert raw.next("drain").drain.undrain is True
        assert raw.next("assign").assign.run_id not in first
        raw.close()
        wait_for(lambda: not any(a.connected for a in client.list_agents()), 10, what="the disconnect")
        bigger = RawAgent(plane, "roster", capacity=3, active_runs=(first[1],))
        bigger.next("welcome")
        # Its new hello says 3: beside the run it still holds, two more (the one left queued and "later"'s).
        again = {bigger.next("assign").assign.run_id for _ in range(2)}
        assert first[1] not in again
        bigger.close()
