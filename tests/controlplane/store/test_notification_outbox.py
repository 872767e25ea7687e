"""The notification outbox's store part on SQLite and PostgreSQL: deliveries made once per (target, event)
from the events past the cursor; an event committed late behind a higher id is still notified; an
attempt taken over by another sender (its lease ran out) records nothing."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.domain.notifications import Target
from controlplane.services import notification_outbox as outbox
from controlplane.store.engine import Store
from controlplane.store.events import add_event
from controlplane.store.models import Event, NotificationCursor, NotificationDelivery

OPS = Target("ops", "http://127.0.0.1:9/ops", ("change.finished", "run.failed"), secret=b"k")
CHAT = Target("chat", "http://127.0.0.1:9/chat", ("change.finished",), "slack", b"k")


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Store]:
    url = f"sqlite:///{tmp_path / 'drover.db'}" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    made = Store(url)
    made.migrate()
    yield made
    made.close()


def event(store: Store, kind: str, **data: object) -> int:
    return store.transaction(lambda s: _add(s, kind, data))


def _add(s: Session, kind: str, data: dict[str, object]) -> int:
    row = add_event(s, kind, change_id="chg_1", run_id="run_1", project="web", **data)
    s.flush()
    return row.id


def rows(store: Store) -> list[tuple[str, str, int]]:
    return store.transaction(
        lambda s: [
            (d.target, d.event, d.event_id)
            for d in s.scalars(
                select(NotificationDelivery).order_by(NotificationDelivery.event_id, NotificationDelivery.target)
            )
        ]
    )


def test_each_asked_event_makes_one_delivery_per_target_once(store: Store) -> None:
    before = event(store, "change.finished", status="succeeded")  # while no target is configured: never notified
    store.transaction(outbox.make_deliveries, [])  # no target yet: the cursor only moves
    finished = event(store, "change.finished", status="failed")
    failed = event(store, "run.finished", status="failed", reason="exit_code")
    event(store, "run.finished", status="succeeded")
    event(store, "task.failed", reason="x")
    store.transaction(outbox.make_deliveries, [OPS, CHAT])
    made = rows(store)
    assert made == [
        ("chat", "change.finished", finished),
        ("ops", "change.finished", finished),
        ("ops", "run.failed", failed),
    ]
    assert before not in [r[2] for r in made]
    store.transaction(outbox.make_deliveries, [OPS, CHAT])  # again: nothing new
    assert rows(store) == made
    cursor = store.transaction(lambda s: s.get(NotificationCursor, outbox.CURSOR).event_id)
    newest = store.transaction(lambda s: s.scalar(select(Event.id).order_by(Event.id.desc()).limit(1)))
    assert cursor == newest  # past the outbox's own notification.queued events too


def test_an_attempt_whose_lease_ran_out_records_nothing(store: Store) -> None:
    store.transaction(outbox.make_deliveries, [])
    event(store, "change.finished", status="succeeded")
    store.transaction(outbox.make_deliveries, [OPS])
    (first,) = store.transaction(outbox.take_due, ["ops"], 10, 0.0)  # a lease of 0 s: due again at once
    (second,) = store.transaction(outbox.take_due, ["ops"], 10, 60.0)  # another sender takes it over
    assert (first.id, first.attempt, second.attempt) == (second.id, 1, 2)
    assert store.transaction(outbox.take_due, ["ops"], 10, 60.0) == []  # leased: not taken a third time
    assert store.transaction(outbox.record_attempt, first, 500, "") == "pending"  # stale: changes nothing
    assert store.transaction(outbox.record_attempt, second, 204, "") == "delivered"
    row = store.transaction(lambda s: s.get(NotificationDelivery, second.id))
    assert (row.state, row.attempts, row.last_status, row.last_error) == ("delivered", 2, 204, "")
    assert store.transaction(outbox.record_attempt, first, 200, "") == "delivered"  # still nothing changes


def test_a_delivery_to_a_target_no_longer_configured_fails_saying_so(store: Store) -> None:
    store.transaction(outbox.make_deliveries, [])
    event(store, "change.finished", status="succeeded")
    store.transaction(outbox.make_deliveries, [OPS, CHAT])
    (taken,) = store.transaction(outbox.take_due, ["ops"], 10, 60.0)  # chat was removed from the config
    assert taken.target == "ops"
    gone = store.transaction(
        lambda s: s.scalars(select(NotificationDelivery).where(NotificationDelivery.target == "chat")).one()
    )
    assert (gone.state, gone.last_error) == ("failed", "no [[notify]] target named 'chat' any more")


def test_an_event_committed_late_behind_a_higher_id_is_still_notified(store: Store) -> None:
    if not store.url.startswith("postgresql"):
        pytest.skip("SQLite has one writer: ids are given in commit order")
    store.transaction(outbox.make_deliveries, [])
    with Session(store.engine) as slow:  # takes an id, then commits after a later event has
        late = _add(slow, "change.finished", {"status": "failed"})
        early = event(store, "change.finished", status="succeeded")
        assert early > late
        assert store.transaction(outbox.make_deliveries, [OPS]) == 0  # moved past nothing: the loop waits
        assert rows(store) == []  # the cursor waits at the gap the uncommitted id leaves
        slow.commit()
    assert store.transaction(outbox.make_deliveries, [OPS]) == 2
    assert rows(store) == [("ops", "change.finished", late), ("ops", "change.finished", early)]
