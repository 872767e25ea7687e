"""The run check on a real store (SQLite and PostgreSQL), with two replicas' checks side by side: the
activity a follower saw reaches the database within its next check, so the leader never ends a run that
another replica saw working; a run nobody saw for `run_stall_checks` checks ends as `timeout`, one
transaction with its events, and its agent is told to cancel it."""

from __future__ import annotations

import dataclasses
import datetime as dt
import pathlib
from collections.abc import Iterator

import pytest
from sqlalchemy import select

from controlplane.config import ServerConfig
from controlplane.dispatch.run_check import RunActivity, RunCheck
from controlplane.domain.graph import ChangeSpec, TaskSpec
from controlplane.services import agent_presence, change_lifecycle, projects, questions, run_lifecycle
from controlplane.services.notify import Notifier
from controlplane.services.run_lifecycle import RunMessage
from controlplane.store.engine import Store
from controlplane.store.models import Event, Question, Run, Task

AGENT = "agent-1"
T0 = dt.datetime(2026, 12, 3, 9, 0, tzinfo=dt.UTC)
CONFIG = ServerConfig(run_check_seconds=60, run_stall_checks=15)


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Store]:
    url = f"sqlite:///{tmp_path / 'drover.db'}" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    store = Store(url)
    store.migrate()
    store.transaction(projects.add_project, "web", "https://example.invalid/web.git")
    yield store
    store.close()


@dataclasses.dataclass
class Clock:
    now: dt.datetime = T0

    def __call__(self) -> dt.datetime:
        return self.now


@dataclasses.dataclass
class Agents:
    cancelled: list[tuple[list[tuple[str, str]], str]] = dataclasses.field(default_factory=list)

    def tell_cancel(self, runs: list[tuple[str, str]], reason: str) -> None:
        self.cancelled.append((runs, reason))


def running_run(store: Store, clock: Clock, session: bool = False) -> str:
    """A run started at `clock.now`: a command, or (`session`) a harness session people can talk to."""
    command = () if session else ("sleep", "3600")
    spec = TaskSpec(key="build", kind="code" if session else "test", objective="build it", command=command)
    change_id = store.transaction(change_lifecycle.submit_change, ChangeSpec("web", "build", (spec,)), "alice")
    run_id = store.transaction(lambda s: s.scalar(select(Run.id).where(Run.change_id == change_id)))
    store.transaction(agent_presence.agent_connected, AGENT, {}, 4, ["command", "harness"], "test", set(), False)
    assert store.transaction(run_lifecycle.assign, run_id, AGENT) is not None
    store.transaction(run_lifecycle.apply_run_message, AGENT, RunMessage(run_id, 1, "started"), 1 << 20)
    store.transaction(lambda s: setattr(s.get(Run, run_id), "started_at", clock.now))
    return str(run_id)


def check(store: Store, clock: Clock, activity: RunActivity, agents: Agents, leading: bool) -> RunCheck:
    async def lead() -> bool:
        return leading

    return RunCheck(store, CONFIG, activity, agents, Notifier(), lambda: None, lead, clock=clock)


async def test_the_leader_never_ends_a_run_a_follower_saw_working(store: Store) -> None:
    clock, agents = Clock(), Agents()
    run_id = running_run(store, clock)
    seen_by_follower = RunActivity(clock)
    follower = check(store, clock, seen_by_follower, agents, leading=False)
    leader = check(store, clock, RunActivity(clock), agents, leading=True)
    await leader.check()  # the leader begins checking at T0
    for minute in range(1, 31):  # output every minute for half an hour, all of it on the follower's stream
        clock.now = T0 + dt.timedelta(minutes=minute)
        seen_by_follower.seen(run_id)
        assert await follower.check() == []
        assert await leader.check() == []
    last = store.transaction(lambda s: s.get(Run, run_id).last_activity_at)
    assert last is not None and last.replace(tzinfo=dt.UTC) == T0 + dt.timedelta(minutes=30)
    assert store.transaction(lambda s: s.get(Run, run_id).state) == "running" and agents.cancelled == []

    clock.now = T0 + dt.timedelta(minutes=44, seconds=59)  # silent since 0:30: 14 checks
    assert await follower.check() == [] and await leader.check() == []
    clock.now = T0 + dt.timedelta(minutes=45)  # the 15th
    assert await follower.check() == []  # a follower never ends a run
    ended = await leader.check()

    reason = "no_progress: no output, model or tool call for 15 min"
    assert [(e.run_id, e.agent, e.reason) for e in ended] == [(run_id, AGENT, reason)]
    assert agents.cancelled == [([(run_id, AGENT)], reason)]
    run = store.transaction(lambda s: s.get(Run, run_id))
    assert (run.state, run.reason, run.exit_code) == ("failed", "timeout", -1)
    task = store.transaction(lambda s: s.scalar(select(Task).where(Task.id == run.task_id)))
    assert (task.status, task.reason) == ("failed", "timeout")
    kinds = store.transaction(
        lambda s: [(e.kind, e.data) for e in s.scalars(select(Event).where(Event.run_id == run_id).order_by(Event.id))]
    )
    stalled = [data for kind, data in kinds if kind == "run.no_progress"]
    assert stalled == [
        {
            "reason": reason,
            "checks": 15,
            "check_seconds": 60.0,
            "last_activity_at": (T0 + dt.timedelta(minutes=30)).isoformat(),
        }
    ]
    assert [k for k, _ in kinds].index("run.no_progress") < [k for k, _ in kinds].index("run.finished")
    assert await leader.check() == []  # ended once


async def test_a_new_leader_gives_every_run_a_full_window(store: Store) -> None:
    clock, agents = Clock(), Agents()
    run_id = running_run(store, clock)
    clock.now = T0 + dt.timedelta(hours=2)  # silent for two hours while no replica was checking
    leader = check(store, clock, RunActivity(clock), agents, leading=True)
    assert await leader.check() == []
    clock.now = T0 + dt.timedelta(hours=2, minutes=14, seconds=59)
    assert await leader.check() == []
    clock.now = T0 + dt.timedelta(hours=2, minutes=15)
    assert [e.run_id for e in await leader.check()] == [run_id]


async def test_a_run_waiting_for_an_answer_is_left_to_its_answer_window(store: Store) -> None:
    clock, agents = Clock(), Agents()
    run_id = running_run(store, clock, session=True)
    leader = check(store, clock, RunActivity(clock), agents, leading=True)
    await leader.check()
    question = store.transaction(lambda s: questions.ask(s, s.get(Run, run_id), "q1", "which database?", True).id)
    clock.now = T0 + dt.timedelta(hours=3)  # nobody answered for three hours: the run waited, it did not stall
    assert await leader.check() == []
    store.transaction(questions.answer, question, "PostgreSQL", "alice", True)
    store.transaction(lambda s: setattr(s.get(Question, question), "answered_at", clock.now))
    clock.now = T0 + dt.timedelta(hours=3, minutes=14, seconds=59)  # the answer started a full window
    assert await leader.check() == []
    clock.now = T0 + dt.timedelta(hours=3, minutes=15)
    assert [e.run_id for e in await leader.check()] == [run_id]
