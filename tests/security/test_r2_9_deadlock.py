"""Issue 24, finding 9: a deadlock on PostgreSQL killed agent streams. Two group-commit transactions of
run messages locked the same two Changes in opposite order (`apply_run_message` locks a run's Change
as it starts or ends); the victim's savepoint retry met the same deadlock again (the lock held against
it was an earlier unit's of its own batch), and the `DeadlockDetected` reached `agent_stream._read`,
which ended the stream.

Provoked deterministically on real PostgreSQL: a third connection holds one run's row so the first
batch stops between its two Changes while the second batch takes them the other way round. Every
message applies and no error reaches the caller (the stream). A deadlock met by units that lock rows
no pre-lock can know of is retried by the store, whole, and counted in drover_store_retries_total.
"""

from __future__ import annotations

import asyncio
import pathlib
import sqlite3
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import sqlalchemy
from sqlalchemy import select, text
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session

from controlplane import metrics
from controlplane.api.agent_stream import AgentSessions
from controlplane.config import ServerConfig
from controlplane.domain.graph import ChangeSpec, TaskSpec
from controlplane.services import change_lifecycle, projects, run_lifecycle
from controlplane.services.notify import Notifier
from controlplane.services.run_lifecycle import RunMessage
from controlplane.store import locks
from controlplane.store.engine import Store
from controlplane.store.group_commit import GroupCommit
from controlplane.store.models import Change, Run, RunLog, Task
from controlplane.store.objects import DirectoryStore

LIMIT = 1024 * 1024


@pytest.fixture
def store(pg_url: str) -> Iterator[Store]:
    s = Store(pg_url)
    s.migrate()
    s.transaction(projects.add_project, "web", "https://example.invalid/web.git")
    yield s
    s.close()


def submit(store: Store, *keys: str) -> list[str]:
    """A Change of independent command Tasks; answers its queued runs' ids, in the order of `keys`."""
    tasks = tuple(TaskSpec(key=k, kind="test", objective=f"do {k}", command=("true",)) for k in keys)
    change_id = store.transaction(
        change_lifecycle.submit_change, ChangeSpec(project="web", goal="go", tasks=tasks), "alice"
    )

    def runs(s: Session) -> list[str]:
        by_key = dict(
            s.execute(select(Task.key, Run.id).join(Run, Run.task_id == Task.id).filter(Run.change_id == change_id))
            .tuples()
            .all()
        )
        return [by_key[k] for k in keys]

    return store.transaction(runs)


def assign(store: Store, run_id: str, agent: str) -> None:
    assert store.transaction(run_lifecycle.assign, run_id, agent) is not None


def waiting_on_locks(store: Store) -> int:
    with store.engine.connect() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE wait_event_type = 'Lock' AND datname = current_database()"
                )
            ).scalar_one()
        )


def wait_until(check: Any, what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def retries(reason: str) -> float:
    return metrics.REGISTRY.get_sample_value("drover_store_retries_total", {"reason": reason}) or 0.0


def test_two_batches_of_run_messages_taking_two_changes_in_opposite_order_both_apply(
    store: Store, pg_url: str, tmp_path: pathlib.Path
) -> None:
    a1, b1 = submit(store, "a", "b")  # Change 1
    a2, b2 = submit(store, "a", "b")  # Change 2
    (x,) = submit(store, "x")  # Change 3: its run is the one held
    for run in (a1, a2, x):
        assign(store, run, "agent-a")
    for run in (b1, b2):
        assign(store, run, "agent-b")
    assert store.transaction(run_lifecycle.apply_run_message, "agent-a", RunMessage(x, 1, "started"), LIMIT) == 1

    # The messages go through the agent streams' own group commit, as `_read` applies them.
    config = ServerConfig(data_dir=tmp_path, database_url=pg_url)
    sessions = AgentSessions(store, config, Notifier(), DirectoryStore(tmp_path / "objects"))
    blocker = sqlalchemy.create_engine(pg_url)
    held = blocker.connect()
    held.begin()
    held.execute(select(Run.id).where(Run.id == x).with_for_update()).all()

    async def main() -> list[Any]:
        def say(agent: str, run_id: str, seq: int, kind: str, **fields: Any) -> Any:
            return sessions.messages.apply(agent, RunMessage(run_id, seq, kind, **fields), LIMIT, None, None)

        # Batch A: Change 1, then stops at the held run, then Change 2.
        first = asyncio.gather(
            say("agent-a", a1, 1, "started"),
            say("agent-a", x, 2, "log", stream="stdout", text="line\n"),
            say("agent-a", a2, 1, "started"),
            return_exceptions=True,
        )
        await asyncio.to_thread(wait_until, lambda: waiting_on_locks(store) >= 1, "batch A to wait on the held run")
        # Batch B: Change 2, then Change 1 (held by A).
        second = asyncio.gather(
            say("agent-b", b2, 1, "started"), say("agent-b", b1, 1, "started"), return_exceptions=True
        )
        await asyncio.to_thread(wait_until, lambda: waiting_on_locks(store) >= 2, "batch B to wait for batch A")
        held.rollback()  # A goes on: it takes Change 2, which B held on main (a deadlock)
        return [*(await first), *(await second)]

    try:
        answers = asyncio.run(main())
    finally:
        held.close()
        blocker.dispose()
    errors = [a for a in answers if isinstance(a, BaseException)]
    assert errors == [], f"an error reached the agent stream: {errors[0]!r}"
    assert answers == [1, 2, 1, 1, 1]

    def states(s: Session) -> dict[str, str]:
        return dict(s.execute(select(Run.id, Run.state).where(Run.id.in_([a1, a2, b1, b2]))).all())

    assert set(store.transaction(states).values()) == {"running"}
    assert store.transaction(lambda s: s.scalar(select(RunLog.text).where(RunLog.run_id == x))) == "line\n"


def lock_change(s: Session, change_id: str, before: threading.Event | None, after: threading.Event | None) -> str:
    """A unit that locks one Change; waits for `before` first, sets `after` once it holds the lock."""
    if before is not None:
        assert before.wait(20)
    s.get(Change, change_id, with_for_update=True)
    if after is not None:
        after.set()
    return change_id


def test_a_deadlock_between_two_batches_is_retried_whole_and_counted(store: Store) -> None:
    (r1,) = submit(store, "a")
    (r2,) = submit(store, "a")
    c1, c2 = store.transaction(lambda s: [s.get(Run, r).change_id for r in (r1, r2)])
    commits = GroupCommit(store, lock_change)
    b_holds_c2 = threading.Event()
    counted = retries("deadlock")

    async def main() -> list[Any]:
        # Batch A: Change 1, then (once B holds it) Change 2. Batch B: Change 2, then Change 1.
        first = asyncio.gather(
            commits.apply(c1, None, None), commits.apply(c2, b_holds_c2, None), return_exceptions=True
        )
        await asyncio.sleep(0.2)
        second = asyncio.gather(
            commits.apply(c2, None, b_holds_c2), commits.apply(c1, None, None), return_exceptions=True
        )
        return [*(await first), *(await second)]

    answers = asyncio.run(main())
    errors = [a for a in answers if isinstance(a, BaseException)]
    assert errors == [], f"the deadlock reached a caller: {errors[0]!r}"
    assert answers == [c1, c2, c2, c1]
    assert commits.batches == 2  # the victim went again whole: no unit was split off
    assert retries("deadlock") >= counted + 1


def test_a_transaction_that_deadlocks_is_run_again_by_the_store(store: Store) -> None:
    (r1,) = submit(store, "a")
    (r2,) = submit(store, "a")
    c1, c2 = store.transaction(lambda s: [s.get(Run, r).change_id for r in (r1, r2)])
    holds = [threading.Event(), threading.Event()]
    runs: list[int] = []

    def both(s: Session, first: str, second: str, mine: threading.Event, theirs: threading.Event) -> None:
        runs.append(1)
        s.get(Change, first, with_for_update=True)
        mine.set()
        assert theirs.wait(20)
        s.get(Change, second, with_for_update=True)

    counted = retries("deadlock")
    failed: list[BaseException] = []

    def other() -> None:
        try:
            store.transaction(both, c1, c2, holds[0], holds[1])
        except BaseException as err:
            failed.append(err)

    one = threading.Thread(target=other)
    one.start()
    try:
        store.transaction(both, c2, c1, holds[1], holds[0])  # raised DeadlockDetected in one of the two on main
    except BaseException as err:
        failed.append(err)
    one.join(30)
    assert not one.is_alive()
    assert failed == []
    assert len(runs) == 3  # the victim ran again
    assert retries("deadlock") == counted + 1


def test_what_the_store_runs_again() -> None:
    def wrapped(err: Exception) -> OperationalError:
        return OperationalError("UPDATE ...", {}, err)

    assert locks.retry_reason(wrapped(psycopg.errors.DeadlockDetected("deadlock detected"))) == "deadlock"
    assert locks.retry_reason(wrapped(psycopg.errors.SerializationFailure("could not serialize"))) == "serialization"
    assert locks.retry_reason(wrapped(sqlite3.OperationalError("database is locked"))) == "sqlite_locked"
    assert locks.retry_reason(wrapped(psycopg.errors.QueryCanceled("canceling statement"))) is None
    assert locks.retry_reason(IntegrityError("INSERT ...", {}, sqlite3.IntegrityError("UNIQUE"))) is None
    assert locks.retry_reason(ValueError("database is locked")) is None
