"""Finished deliveries past the retention are pruned on SQLite and PostgreSQL, a bounded batch per
transaction with one event; pending ones and recent ones stay; a retention of 0 keeps everything."""

from __future__ import annotations

import datetime as dt
import itertools
import os
import pathlib
import subprocess
import sys
from collections.abc import Iterator

import pytest
from sqlalchemy import select

from controlplane.services import delivery_retention
from controlplane.store.engine import Store
from controlplane.store.models import Event, ForgeDelivery, NotificationDelivery, utcnow
from tests.conftest import ControlPlane, holds, wait_for

NOW = utcnow()
OLD = NOW - dt.timedelta(days=40)
EVENT_IDS = itertools.count(1)  # one delivery per (target, event)


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Store]:
    url = f"sqlite:///{tmp_path / 'drover.db'}" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    made = Store(url)
    made.migrate()
    yield made
    made.close()


def forge(id_: str, state: str, at: dt.datetime) -> ForgeDelivery:
    return ForgeDelivery(delivery_id=id_, project="web", event="issues", state=state, received_at=at)


def note(id_: str, state: str, at: dt.datetime) -> NotificationDelivery:
    return NotificationDelivery(
        id=id_,
        target="ops",
        event_id=next(EVENT_IDS),
        event="change.finished",
        state=state,
        next_attempt_at=at,
        created_at=at,
    )


def kept(store: Store) -> tuple[list[str], list[str]]:
    return store.transaction(
        lambda s: (
            sorted(s.scalars(select(ForgeDelivery.delivery_id))),
            sorted(s.scalars(select(NotificationDelivery.id))),
        )
    )


def pruned_events(store: Store) -> list[dict[str, object]]:
    return store.transaction(
        lambda s: [e.data for e in s.scalars(select(Event).where(Event.kind == "retention.pruned"))]
    )


def test_finished_deliveries_past_the_retention_go_and_the_rest_stay(store: Store) -> None:
    store.transaction(
        lambda s: s.add_all(
            [
                forge("old-done", "done", OLD),
                forge("old-failed", "failed", OLD),
                forge("old-received", "received", OLD),  # never processed: kept, the loop still owes it
                forge("new-done", "done", NOW),
                note("n-old-delivered", "delivered", OLD),
                note("n-old-failed", "failed", OLD),
                note("n-old-pending", "pending", OLD),
                note("n-new", "delivered", NOW),
            ]
        )
    )
    assert store.transaction(delivery_retention.prune_all, 0, NOW) == (0, 0)  # 0 days: kept forever
    assert pruned_events(store) == []

    assert store.transaction(delivery_retention.prune_all, 30, NOW) == (2, 2)
    assert kept(store) == (["new-done", "old-received"], ["n-new", "n-old-pending"])
    (said,) = pruned_events(store)
    assert (said["forge_deliveries"], said["notification_deliveries"]) == (2, 2)

    assert store.transaction(delivery_retention.prune_all, 30, NOW) == (0, 0)  # nothing left: no event
    assert len(pruned_events(store)) == 1


def test_a_backlog_goes_in_batches(store: Store) -> None:
    count = delivery_retention.BATCH + 5
    store.transaction(lambda s: s.add_all([forge(f"d{i:05}", "done", OLD) for i in range(count)]))
    assert store.transaction(delivery_retention.prune_all, 30, NOW) == (delivery_retention.BATCH, 0)
    assert store.transaction(delivery_retention.prune_all, 30, NOW) == (5, 0)
    assert kept(store) == ([], [])


def test_a_retention_shorter_than_a_day_or_not_a_number_stops_the_start(tmp_path: pathlib.Path) -> None:
    serve = [sys.executable, "-m", "controlplane.cli", "serve", "--data-dir", str(tmp_path / "cp")]
    for bad, why in [("0.5", "must be 0 (keep forever) or from 1 to 36500 days"), ("soon", "is not a number")]:
        done = subprocess.run([*serve, "--delivery-retention-days", bad], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and "--delivery-retention-days" in done.stderr and why in done.stderr
    env = {**os.environ, "DROVER_DELIVERY_RETENTION_DAYS": "-3"}
    done = subprocess.run(serve, capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 2 and "must be 0 (keep forever)" in done.stderr


@pytest.mark.parametrize(("days", "pruned"), [("30", True), ("0", False)])
def test_the_leader_prunes_when_it_starts_unless_told_to_keep(tmp_path: pathlib.Path, days: str, pruned: bool) -> None:
    """A real control plane on a database holding month-old deliveries: its first pass prunes the finished
    ones (the event says how many); one started with `--delivery-retention-days 0` prunes nothing."""
    url = f"sqlite:///{tmp_path / 'drover.db'}"
    store = Store(url)
    store.migrate()
    store.transaction(lambda s: s.add_all([forge("old-done", "done", OLD), note("n-old", "failed", OLD)]))
    plane = ControlPlane(tmp_path, args=("--delivery-retention-days", days)).start()
    try:
        if pruned:
            wait_for(lambda: pruned_events(store), 30, what="the prune at start")
            assert kept(store) == ([], [])
        else:
            holds(lambda: kept(store) == (["old-done"], ["n-old"]), 3, what="nothing pruned")
            assert pruned_events(store) == []
    finally:
        plane.stop()
        store.close()
