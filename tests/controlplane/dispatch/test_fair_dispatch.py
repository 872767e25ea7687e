"""The dispatcher's fair sharing on a real store (SQLite and PostgreSQL): the selection window holds
every Change's oldest ready runs however many an older Change queues, and the slots of a pass go
round-robin between a project's Changes and by weight between projects (`scheduling.fair_order`),
counting the runs already active. Through the migrated schema, the submit function the API uses and
`assign_queued` as the dispatcher calls it."""

from __future__ import annotations

import pathlib
from collections import Counter
from collections.abc import Iterator

import pytest
from sqlalchemy import select

from controlplane.config import HarnessConfig
from controlplane.dispatch.dispatcher import Dispatched, assign_queued
from controlplane.domain.graph import ChangeSpec, TaskSpec
from controlplane.services import agent_presence, change_lifecycle, projects
from controlplane.store.engine import Store
from controlplane.store.models import Run
from controlplane.store.objects import DirectoryStore


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Store]:
    url = f"sqlite:///{tmp_path / 'drover.db'}" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    store = Store(url)
    store.migrate()
    yield store
    store.close()


def project(store: Store, name: str, weight: int = 1) -> None:
    store.transaction(lambda s: projects.add_project(s, name, "", weight=weight))


def submit(store: Store, name: str, tasks: int) -> str:
    """A Change of `tasks` independent command Tasks: each has a ready (queued) run at once."""
    specs = tuple(TaskSpec(key=f"t{i}", kind="test", objective="sleep", command=("sleep", "1")) for i in range(tasks))
    return store.transaction(change_lifecycle.submit_change, ChangeSpec(name, f"{tasks} sleeps", specs), "alice")


def dispatch(store: Store, capacity: int, tmp_path: pathlib.Path, agent: str = "agent-1") -> Dispatched:
    """One dispatch pass to a newly connected agent with `capacity` free slots."""
    store.transaction(agent_presence.agent_connected, agent, {}, capacity, ["command"], "test", set(), False)
    return store.transaction(assign_queued, [agent], {}, HarnessConfig(), DirectoryStore(tmp_path / "objects"))


def changes_of(store: Store, done: Dispatched) -> Counter[str]:
    ids = [assignment.run_id for _, assignment in done.assigned]
    return Counter(store.transaction(lambda s: list(s.scalars(select(Run.change_id).where(Run.id.in_(ids))))))


def test_a_young_two_run_change_gets_slots_beside_an_old_forty_run_one(store: Store, tmp_path: pathlib.Path) -> None:
    """Oldest-first over a window of the 20 oldest ready runs gave the big Change all 4 slots."""
    project(store, "web")
    big, small = submit(store, "web", 40), submit(store, "web", 2)
    done = dispatch(store, 4, tmp_path)
    assert not done.failed
    assert changes_of(store, done) == {big: 2, small: 2}
    queued = store.transaction(lambda s: s.scalars(select(Run.change_id).where(Run.state == "queued")).all())
    assert Counter(queued) == {big: 38}


def test_active_runs_count_the_next_slots_go_to_the_change_with_fewer(store: Store, tmp_path: pathlib.Path) -> None:
    project(store, "web")
    big = submit(store, "web", 40)
    first = dispatch(store, 3, tmp_path)
    assert changes_of(store, first) == {big: 3}
    store.transaction(  # those three run: active
        lambda s: [setattr(run, "state", "running") for run in s.scalars(select(Run).where(Run.state == "starting"))]
    )
    small = submit(store, "web", 3)
    # 4 slots on another agent: the small Change's 3 (0, 1, 2 active against 3), then the older Change's
    assert changes_of(store, dispatch(store, 4, tmp_path, "agent-2")) == {small: 3, big: 1}


def test_weights_share_the_slots_between_projects(store: Store, tmp_path: pathlib.Path) -> None:
    project(store, "heavy", weight=2)
    project(store, "light")
    heavy, light = submit(store, "heavy", 10), submit(store, "light", 10)
    assert changes_of(store, dispatch(store, 6, tmp_path)) == {heavy: 4, light: 2}
