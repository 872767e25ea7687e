"""A dispatch pass and a group commit of run messages never deadlock on PostgreSQL. Writing a run (or
its event) takes a key-share lock on its Change; the pass used to take those one run at a time, in
the plan's order, while a run-message batch locks its Changes FOR UPDATE sorted by id: a pass holding
the later Change and waiting for the earlier met a batch holding the earlier and wanting the later.
Under a 2,000-run burst the fleet benchmark counted several deadlock retries a run.

The pass now locks every Change it will write a run of, sorted, before writing the first. Provoked
deterministically on real PostgreSQL: a connection standing for a batch holds the earlier Change while
the pass plans a run of each Change, the later one's oldest; once the pass waits, the later Change must
still be free for the batch to take (NOWAIT), and the pass then assigns both runs without a retry.
"""

from __future__ import annotations

import datetime as dt
import pathlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy
from sqlalchemy import select, text, update

from controlplane.config import HarnessConfig
from controlplane.dispatch.dispatcher import Dispatched, assign_queued
from controlplane.domain.graph import ChangeSpec, TaskSpec
from controlplane.services import agent_presence, change_lifecycle, projects
from controlplane.store.engine import Store
from controlplane.store.models import Change, Run
from controlplane.store.objects import DirectoryStore


@pytest.fixture
def store(pg_url: str) -> Iterator[Store]:
    s = Store(pg_url)
    s.migrate()
    s.transaction(lambda x: projects.add_project(x, "web", ""))
    yield s
    s.close()


def submit(store: Store) -> str:
    task = TaskSpec(key="t", kind="test", objective="sleep", command=("sleep", "1"))
    return store.transaction(change_lifecycle.submit_change, ChangeSpec("web", "one sleep", (task,)), "alice")


def waiting_on_locks(store: Store) -> int:
    with store.engine.connect() as conn:
        sql = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
        return int(conn.execute(text(sql)).scalar_one())


def test_a_pass_waiting_for_a_change_holds_no_later_change_a_sorted_batch_takes_next(
    store: Store, pg_url: str, tmp_path: pathlib.Path
) -> None:
    lo, hi = sorted([submit(store), submit(store)])
    # The later Change's run is the oldest: the plan writes it first.
    store.transaction(
        lambda s: s.execute(
            update(Run).where(Run.change_id == hi).values(created_at=Run.created_at - dt.timedelta(hours=1))
        )
    )
    store.transaction(agent_presence.agent_connected, "agent-1", {}, 2, ["command"], "test", set(), False)

    batch = sqlalchemy.create_engine(pg_url)
    conn = batch.connect()
    conn.begin()
    conn.execute(select(Change.id).where(Change.id == lo).with_for_update()).all()  # a batch's first lock
    answer: list[Any] = []
    objects = DirectoryStore(tmp_path / "objects")

    def dispatch() -> None:
        try:  # no retry: a deadlock would reach this caller
            answer.append(store.transaction(assign_queued, ["agent-1"], {}, HarnessConfig(), objects, retries=0))
        except Exception as err:
            answer.append(err)

    pass_ = threading.Thread(target=dispatch)
    pass_.start()
    try:
        deadline = time.monotonic() + 20
        while waiting_on_locks(store) < 1:
            assert time.monotonic() < deadline, "the dispatch pass never waited for the held Change"
            time.sleep(0.05)
        # The batch's next lock, sorted: the later Change is not held by the waiting pass.
        conn.execute(select(Change.id).where(Change.id == hi).with_for_update(nowait=True)).all()
        conn.commit()
    finally:
        conn.close()
        batch.dispose()
        pass_.join(30)
    (done,) = answer
    assert isinstance(done, Dispatched), f"the dispatch pass failed: {done!r}"
    assert not done.failed
    assigned = {a.run_id for _, a in done.assigned}
    changes = store.transaction(lambda s: set(s.scalars(select(Run.change_id).where(Run.id.in_(assigned)))))
    assert changes == {lo, hi}
