"""A Change moves on when its runs end, on a real store (SQLite and PostgreSQL): a diamond of Tasks
advances one level at a time, a failed dependency blocks what needed it, and the end of a run reads the
finished Task's dependents and a count of the Change's Tasks, never every Task: its statements and the
Task rows it reads stay the same whatever the Change's size."""

from __future__ import annotations

import contextlib
import dataclasses
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event, select
from sqlalchemy.orm import ORMExecuteState

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
    store.transaction(agent_presence.agent_connected, AGENT, {}, 4, ["command"], "test", set(), False)
    yield store
    store.close()


def command(key: str, *depends_on: str) -> TaskSpec:
    return TaskSpec(key=key, kind="test", objective=f"do {key}", depends_on=depends_on, command=("true",))


def submit(store: Store, *tasks: TaskSpec) -> str:
    return store.transaction(change_lifecycle.submit_change, ChangeSpec("web", "make it better", tasks), "alice")


def queued_run(store: Store, change_id: str, key: str) -> str:
    q = select(Run.id).join(Task, Task.id == Run.task_id).where(Task.change_id == change_id, Task.key == key)
    run_id = store.transaction(lambda s: s.scalar(q.where(Run.state == "queued")))
    assert run_id is not None, f"no queued run of {key}"
    return run_id


def start(store: Store, change_id: str, key: str) -> str:
    run_id = queued_run(store, change_id, key)
    assert store.transaction(run_lifecycle.assign, run_id, AGENT) is not None
    store.transaction(run_lifecycle.apply_run_message, AGENT, RunMessage(run_id, 1, "started"), 1 << 20)
    return run_id


def finish(store: Store, run_id: str, status: str = "succeeded", exit_code: int = 0) -> None:
    message = RunMessage(run_id, 2, "finished", status=status, exit_code=exit_code)
    store.transaction(run_lifecycle.apply_run_message, AGENT, message, 1 << 20)


def statuses(store: Store, change_id: str) -> dict[str, tuple[str, str]]:
    q = select(Task.key, Task.status, Task.reason).where(Task.change_id == change_id)
    return {key: (status, reason) for key, status, reason in store.transaction(lambda s: list(s.execute(q)))}


def change_status(store: Store, change_id: str) -> str:
    return store.transaction(lambda s: s.get(Change, change_id)).status


def kinds(store: Store, change_id: str) -> list[tuple[str, Any]]:
    q = select(Event.kind, Event.data).where(Event.change_id == change_id).order_by(Event.id)
    return [(kind, data.get("key")) for kind, data in store.transaction(lambda s: list(s.execute(q)))]


DIAMOND = (command("r"), command("a", "r"), command("b", "r"), command("d", "a", "b"))


def test_a_diamond_advances_one_level_at_a_time(store: Store) -> None:
    change_id = submit(store, *DIAMOND)
    assert {k: s for k, (s, _) in statuses(store, change_id).items()} == {
        "r": "ready",
        "a": "pending",
        "b": "pending",
        "d": "pending",
    }

    finish(store, start(store, change_id, "r"))
    assert {k: s for k, (s, _) in statuses(store, change_id).items()} == {
        "r": "succeeded",
        "a": "ready",
        "b": "ready",
        "d": "pending",
    }
    assert kinds(store, change_id)[-5:] == [
        ("task.succeeded", "r"),
        ("task.ready", "a"),
        ("run.queued", "a"),
        ("task.ready", "b"),
        ("run.queued", "b"),
    ]
    assert change_status(store, change_id) == "running"

    finish(store, start(store, change_id, "a"))
    assert statuses(store, change_id)["d"] == ("pending", ""), "d still waits for b"
    finish(store, start(store, change_id, "b"))
    assert statuses(store, change_id)["d"] == ("ready", "")
    assert change_status(store, change_id) == "running"

    finish(store, start(store, change_id, "d"))
    assert {s for s, _ in statuses(store, change_id).values()} == {"succeeded"}
    assert change_status(store, change_id) == "succeeded"
    data = store.transaction(lambda s: s.scalar(select(Event.data).where(Event.kind == "change.finished")))
    assert data == {"status": "succeeded", "tasks": {"succeeded": 4}}


def test_a_failed_dependency_blocks_its_dependents_and_fails_the_change(store: Store) -> None:
    change_id = submit(store, *DIAMOND, command("e", "d"))
    finish(store, start(store, change_id, "r"))
    finish(store, start(store, change_id, "a"), status="failed", exit_code=1)
    assert statuses(store, change_id) == {
        "r": ("succeeded", ""),
        "a": ("failed", "failed"),
        "b": ("ready", ""),
        "d": ("blocked", "dependency a failed"),
        "e": ("blocked", "dependency a failed"),
    }
    assert change_status(store, change_id) == "running", "b still runs"

    finish(store, start(store, change_id, "b"))
    assert statuses(store, change_id)["d"] == ("blocked", "dependency a failed"), "b alone does not unblock d"
    assert change_status(store, change_id) == "failed"
    data = store.transaction(lambda s: s.scalar(select(Event.data).where(Event.kind == "change.finished")))
    assert data == {"status": "failed", "tasks": {"succeeded": 2, "failed": 1, "blocked": 2}}


@dataclasses.dataclass
class Reads:
    statements: int = 0
    task_rows: int = 0
    """Rows read by SELECTs from the tasks table."""


@contextlib.contextmanager
def reads(store: Store) -> Iterator[Reads]:
    """What the store's sessions send while the block runs: every statement (the engine's cursor), and
    the rows each SELECT from the tasks table answers (the session's executions, their results kept)."""
    seen = Reads()

    def on_cursor(*_: Any) -> None:
        seen.statements += 1

    def on_orm(state: ORMExecuteState) -> Any:
        if not state.is_select or "tasks" not in {t.name for t in state.statement.get_final_froms()}:  # type: ignore[attr-defined]
            return None
        frozen = state.invoke_statement().freeze()
        seen.task_rows += len(frozen().all())
        return frozen()

    event.listen(store.engine, "before_cursor_execute", on_cursor)
    event.listen(store.sessions, "do_orm_execute", on_orm)
    try:
        yield seen
    finally:
        event.remove(store.sessions, "do_orm_execute", on_orm)
        event.remove(store.engine, "before_cursor_execute", on_cursor)


def reads_of_a_finish(store: Store, waiting: int) -> Reads:
    """What finishing the root of r -> x reads, with `waiting` more Tasks after x."""
    change_id = submit(store, command("r"), command("x", "r"), *(command(f"w{i}", "x") for i in range(waiting)))
    run_id = start(store, change_id, "r")
    with reads(store) as seen:
        finish(store, run_id)
    assert statuses(store, change_id)["x"] == ("ready", "")
    return seen


def test_a_finish_reads_the_same_whatever_the_size_of_the_change(store: Store) -> None:
    small, large = reads_of_a_finish(store, 2), reads_of_a_finish(store, 300)
    assert large.statements == small.statements
    assert large.task_rows == small.task_rows
    assert large.task_rows <= 4, "x (the one dependent) and a count of each of 3 statuses, not every Task"
