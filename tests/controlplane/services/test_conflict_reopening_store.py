"""A candidate conflict reopens the later Task in one transaction with its event, at most twice per Task;
the third conflict fails the Change naming the files (issue 29 "Merge conflicts"), on SQLite and PostgreSQL.
The Tasks' runs are settled in the store directly (the whole-system path:
tests/fleet/test_conflict_reopening_fleet.py)."""

from __future__ import annotations

import datetime as dt
import pathlib
from collections.abc import Iterator

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.domain.graph import ChangeSpec, TaskSpec
from controlplane.services import change_lifecycle, projects
from controlplane.store.engine import Store
from controlplane.store.events import new_id
from controlplane.store.models import Change, ChangeSet, Event, Run, Task, utcnow

FILES = {"a": "f.txt", "c": "g.txt", "d": "h.txt", "b": "f.txt"}


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Store]:
    url = f"sqlite:///{tmp_path / 'drover.db'}" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    store = Store(url)
    store.migrate()
    store.transaction(projects.add_project, "web", "https://example.invalid/web.git")
    yield store
    store.close()


def submit(store: Store) -> str:
    tasks = tuple(TaskSpec(key=k, kind="test", objective=f"do {k}", command=("true",)) for k in FILES)
    return store.transaction(change_lifecycle.submit_change, ChangeSpec(project="web", goal="g", tasks=tasks), "me")


def succeed(store: Store, change_id: str, key: str, minute: int) -> str:
    """The Task's open run succeeded and published a ChangeSet of its file; answers the ChangeSet id."""

    def settle(s: Session) -> str:
        task = s.scalars(select(Task).where(Task.change_id == change_id, Task.key == key)).one()
        run = s.scalars(select(Run).where(Run.task_id == task.id).order_by(Run.attempt.desc())).first()
        assert run is not None and run.state == "queued"
        run.state, task.status = "succeeded", "succeeded"
        changeset = ChangeSet(
            id=new_id("cs"),
            change_id=change_id,
            task_id=task.id,
            run_id=run.id,
            branch=f"drover/{change_id}/{key}",
            commit="c" * 40,
            base_commit="b" * 40,
            start_commit="b" * 40,
            files=[FILES[key]],
            own_files=[FILES[key]],
            patch_ref="",
            created_at=utcnow() + dt.timedelta(minutes=minute),
        )
        s.add(changeset)
        change = s.get(Change, change_id)
        assert change is not None
        change.candidate_state = (
            "pending"
            if all(t.status == "succeeded" for t in s.scalars(select(Task).where(Task.change_id == change_id)))
            else ""
        )
        return changeset.id

    return store.transaction(settle)


def conflict(store: Store, change_id: str, changeset_id: str, path: str) -> None:
    reason = f"candidate_conflict: {path} ({changeset_id})"
    store.transaction(change_lifecycle.finish_composition, change_id, "", "", reason, changeset_id, (path,))


def state(store: Store, change_id: str) -> tuple[Change, dict[str, Task], list[Event]]:
    def read(s: Session) -> tuple[Change, dict[str, Task], list[Event]]:
        change = s.get(Change, change_id)
        assert change is not None
        tasks = {t.key: t for t in s.scalars(select(Task).where(Task.change_id == change_id))}
        query = select(Event).where(Event.change_id == change_id, Event.kind == "task.reopened")
        reopened = list(s.scalars(query.order_by(Event.id)))
        s.expunge_all()
        return change, tasks, reopened

    return store.transaction(read)


def test_two_reopenings_then_the_third_conflict_fails_the_change_naming_the_files(store: Store) -> None:
    change_id = submit(store)
    for minute, key in enumerate("acd"):
        succeed(store, change_id, key, minute)
    b = succeed(store, change_id, "b", 10)

    conflict(store, change_id, b, "f.txt")  # with a: b runs again on a's ChangeSet
    change, tasks, reopened = state(store, change_id)
    assert (change.status, change.candidate_state, change.reason) == ("running", "", "")
    assert tasks["b"].status == "ready" and tasks["b"].depends_on == ["a"]
    assert [(e.task_id, e.data["depends_on"], e.data["files"], e.data["reopening"]) for e in reopened] == [
        (tasks["b"].id, ["a"], ["f.txt"], 1)
    ]

    b = succeed(store, change_id, "b", 11)
    conflict(store, change_id, b, "g.txt")  # now with c: a second reopening
    change, tasks, reopened = state(store, change_id)
    assert change.status == "running" and tasks["b"].depends_on == ["a", "c"]
    assert [e.data["reopening"] for e in reopened] == [1, 2]

    b = succeed(store, change_id, "b", 12)
    conflict(store, change_id, b, "h.txt")  # the bound: the Change fails, as before a conflict was reopened
    change, tasks, reopened = state(store, change_id)
    assert change.status == "failed" and change.candidate_state == "failed"
    assert change.reason == f"candidate_conflict: h.txt ({b})"
    assert tasks["b"].depends_on == ["a", "c"] and len(reopened) == 2


def test_an_unknown_changeset_fails_the_change_as_before(store: Store) -> None:
    change_id = submit(store)
    for minute, key in enumerate("acdb"):
        succeed(store, change_id, key, minute)
    conflict(store, change_id, "cs_gone", "f.txt")
    change, _, reopened = state(store, change_id)
    assert change.status == "failed" and change.reason == "candidate_conflict: f.txt (cs_gone)" and not reopened
