"""A result that reaches a run already ended as agent_lost, on a real store (SQLite and PostgreSQL):
applied in one transaction with its event when nothing moved on; kept out, with an event saying why,
when the Task was re-run or the Change cancelled."""

from __future__ import annotations

import datetime as dt
import pathlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select

from controlplane.domain.graph import ChangeSpec, TaskSpec
from controlplane.services import agent_presence, change_lifecycle, projects, run_lifecycle
from controlplane.services.run_lifecycle import RunMessage
from controlplane.store.engine import Store
from controlplane.store.models import Change, Event, Run, Task

AGENT = "agent-1"


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Store]:
    url = f"sqlite:///{tmp_path / 'drover.db'}" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    store = Store(url)
    store.migrate()
    store.transaction(projects.add_project, "web", "https://example.invalid/web.git")
    yield store
    store.close()


def command(key: str, *depends_on: str) -> TaskSpec:
    return TaskSpec(key=key, kind="test", objective=f"do {key}", depends_on=depends_on, command=("true",))


def harness(key: str) -> TaskSpec:
    return TaskSpec(key=key, kind="code", objective=f"do {key}")


def submit(store: Store, *tasks: TaskSpec) -> str:
    return store.transaction(change_lifecycle.submit_change, ChangeSpec("web", "make it better", tasks), "alice")


def say(store: Store, run_id: str, seq: int, kind: str, **fields: Any) -> int:
    return store.transaction(run_lifecycle.apply_run_message, AGENT, RunMessage(run_id, seq, kind, **fields), 1 << 20)


def runs(store: Store, change_id: str) -> dict[str, list[Run]]:
    found: dict[str, list[Run]] = {}
    for run, key in store.transaction(
        lambda s: list(
            s.execute(
                select(Run, Task.key)
                .join(Task, Task.id == Run.task_id)
                .where(Run.change_id == change_id)
                .order_by(Run.attempt)
            )
        )
    ):
        found.setdefault(key, []).append(run)
    return found


def tasks(store: Store, change_id: str) -> dict[str, tuple[str, str]]:
    return {
        t.key: (t.status, t.reason)
        for t in store.transaction(lambda s: list(s.scalars(select(Task).filter_by(change_id=change_id))))
    }


def events(store: Store, kind: str) -> list[Event]:
    return store.transaction(lambda s: list(s.scalars(select(Event).filter_by(kind=kind).order_by(Event.id))))


def lose(store: Store, run_id: str) -> None:
    """The run starts on AGENT; the agent goes and is judged lost; the run's output so far came (seq 2)."""
    store.transaction(agent_presence.agent_connected, AGENT, {}, 4, ["command", "harness"], "test", set(), False)
    assert store.transaction(run_lifecycle.assign, run_id, AGENT) is not None
    say(store, run_id, 1, "started")
    say(store, run_id, 2, "log", stream="stdout", text="building\n")
    store.transaction(agent_presence.agent_disconnected, AGENT)
    time.sleep(0.01)
    assert store.transaction(agent_presence.fail_lost_runs, dt.timedelta(milliseconds=1)) == [run_id]


def test_a_late_success_of_a_run_judged_lost_is_applied_and_the_change_goes_on(store: Store) -> None:
    change_id = submit(
        store, command("build"), command("other"), command("ship", "build"), command("both", "build", "other")
    )
    build, other = runs(store, change_id)["build"][0].id, runs(store, change_id)["other"][0].id
    store.transaction(run_lifecycle.assign, other, "agent-2")
    store.transaction(run_lifecycle.apply_run_message, "agent-2", RunMessage(other, 1, "started"), 1 << 20)
    store.transaction(
        run_lifecycle.apply_run_message,
        "agent-2",
        RunMessage(other, 2, "finished", status="failed", exit_code=1),
        1 << 20,
    )
    lose(store, build)
    assert tasks(store, change_id)["ship"] == ("blocked", "dependency build failed")
    assert store.transaction(lambda s: s.get(Change, change_id)).status == "failed"

    # The agent is back: its hello lists the run, which ended here, and it sends the rest.
    hello = store.transaction(agent_presence.agent_connected, AGENT, {}, 4, ["command"], "test", {build}, False)
    assert hello.applied == {build: 2}
    say(store, build, 3, "log", stream="stdout", text="built\n")
    assert say(store, build, 4, "finished", status="succeeded", exit_code=0) == 4

    run = store.transaction(lambda s: s.get(Run, build))
    assert (run.state, run.exit_code, run.reason) == ("succeeded", 0, "")
    states = tasks(store, change_id)
    assert states["build"] == ("succeeded", "")
    assert states["ship"][0] == "ready", "the dependent waits no more: queued"
    assert states["both"] == ("blocked", "dependency other failed"), "still needs a Task that failed"
    assert [r.state for r in runs(store, change_id)["ship"]] == ["queued"]
    assert store.transaction(lambda s: s.get(Change, change_id)).status == "running"
    [applied] = events(store, "run.late_result_applied")
    assert applied.data["judged"] == "agent_lost" and applied.data["status"] == "succeeded"
    assert len(events(store, "change.reopened")) == 1


def test_a_late_success_of_a_run_since_re_run_is_recorded_and_the_re_run_kept(store: Store) -> None:
    change_id = submit(store, harness("fix"))
    first = runs(store, change_id)["fix"][0].id
    lose(store, first)  # a harness run: agent_lost queues the next attempt
    [lost, rerun] = runs(store, change_id)["fix"]
    assert (lost.state, rerun.state) == ("failed", "queued")

    say(store, first, 3, "finished", status="succeeded", exit_code=0)

    assert store.transaction(lambda s: s.get(Run, first)).state == "failed"
    assert store.transaction(lambda s: s.get(Run, rerun.id)).state == "queued"
    assert tasks(store, change_id)["fix"][0] == "ready"
    [ignored] = events(store, "run.late_result_ignored")
    assert ignored.data["why"] == f"the Task was re-run as {rerun.id} after this run was judged lost"
    assert events(store, "run.late_result_applied") == []


def test_a_late_success_after_the_change_was_cancelled_is_recorded_only(store: Store) -> None:
    change_id = submit(store, command("build"), command("other"))
    build, other = runs(store, change_id)["build"][0].id, runs(store, change_id)["other"][0].id
    store.transaction(run_lifecycle.assign, other, "agent-2")
    store.transaction(run_lifecycle.apply_run_message, "agent-2", RunMessage(other, 1, "started"), 1 << 20)
    lose(store, build)
    store.transaction(change_lifecycle.cancel_change, change_id)  # still running: other goes on

    say(store, build, 3, "finished", status="succeeded", exit_code=0)

    assert store.transaction(lambda s: s.get(Run, build)).state == "failed"
    assert tasks(store, change_id)["build"][0] == "failed"
    [ignored] = events(store, "run.late_result_ignored")
    assert ignored.data["why"] == "the Change was cancelled after this run was judged lost"
