"""The notification outbox (issue 28), the store's part: deliveries made from `events` past the cursor (the
cursor moved in the same transaction, so nothing is skipped or made twice across restarts and replicas),
due deliveries taken for an attempt (their next attempt pushed past the attempt's time, so a sender that
dies mid-way leaves them to be taken again), and an attempt's outcome recorded with its event."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from controlplane.domain import notifications as rules
from controlplane.store.engine import aware
from controlplane.store.events import add_event, new_id
from controlplane.store.models import Change, Event, NotificationCursor, NotificationDelivery, utcnow

EVENTS_PER_PASS = 500
"""Events looked at in one transaction (the cursor moves at most this far)."""
CURSOR = "events"


@dataclasses.dataclass(frozen=True)
class Attempt:
    """A delivery taken for one attempt: what to send and the attempt's number."""

    id: str
    target: str
    event: str
    payload: dict[str, Any]
    attempt: int


def make_deliveries(s: Session, targets: Sequence[rules.Target], now: dt.datetime | None = None) -> int:
    """Deliveries for the events past the cursor that some target asks for; the cursor moved past them in
    this transaction (with no target, it just moves). How many events it moved past (EVENTS_PER_PASS:
    there may be more; fewer: it is at the newest event or waiting at a gap)."""
    now = now or utcnow()
    cursor = s.get(NotificationCursor, CURSOR, with_for_update=True)  # one maker at a time
    if cursor is None:  # a database migrated before this table: start at its newest event
        cursor = NotificationCursor(name=CURSOR, event_id=s.scalar(select(Event.id).order_by(Event.id.desc())) or 0)
        s.add(cursor)
    rows = s.execute(
        select(Event.id, Event.created_at).where(Event.id > cursor.event_id).order_by(Event.id).limit(EVENTS_PER_PASS)
    ).all()
    until = rules.advance_cursor(cursor.event_id, ((i, aware(t) or now) for i, t in rows), now)
    passed = sum(1 for event_id, _ in rows if event_id <= until)
    if not passed:
        return 0
    if targets:
        found = s.execute(
            select(Event, Change.project)
            .outerjoin(Change, Change.id == Event.change_id)
            .where(Event.id > cursor.event_id, Event.id <= until, Event.kind.in_(rules.SOURCE_KINDS))
            .order_by(Event.id)
        ).all()
        for event, project in found:
            _deliveries_of(s, event, project or str((event.data or {}).get("project", "")), targets, now)
    cursor.event_id = until
    return passed


def _deliveries_of(s: Session, event: Event, project: str, targets: Sequence[rules.Target], now: dt.datetime) -> None:
    name = rules.notification_event(event.kind, event.data or {})
    if name is None:
        return
    stored = rules.StoredEvent(
        event.id, event.kind, event.change_id, event.task_id, event.run_id, project, event.data or {},
        aware(event.created_at) or now,
    )  # fmt: skip
    upsert = postgresql.insert if s.get_bind().dialect.name == "postgresql" else sqlite.insert
    for target in targets:
        if name not in target.events:
            continue
        row = {
            "id": new_id("ntf"),
            "target": target.name,
            "event_id": event.id,
            "event": name,
            "change_id": event.change_id,
            "project": project,
            "payload": rules.payload(name, stored, target.console_url),
            "state": "pending",
            "attempts": 0,
            "next_attempt_at": now,
            "last_status": 0,
            "last_error": "",
            "created_at": now,
        }
        insert = upsert(NotificationDelivery).values(row).on_conflict_do_nothing(index_elements=["target", "event_id"])
        if s.execute(insert.returning(NotificationDelivery.id)).first() is None:
            continue  # made already (the cursor cannot pass an event twice; the key says so too)
        add_event(
            s, "notification.queued", change_id=event.change_id, delivery_id=row["id"], target=target.name, event=name
        )


def take_due(s: Session, targets: Sequence[str], limit: int, lease_seconds: float) -> list[Attempt]:
    """Up to `limit` pending deliveries due now, each counted as attempted and not due again for
    `lease_seconds` (the attempt's result replaces that). A delivery whose target is no longer configured
    fails, saying so."""
    now = utcnow()
    q = (
        select(NotificationDelivery)
        .where(NotificationDelivery.state == "pending", NotificationDelivery.next_attempt_at <= now)
        .order_by(NotificationDelivery.next_attempt_at, NotificationDelivery.id)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    taken = []
    for row in s.scalars(q):
        if row.target not in targets:
            row.state, row.last_error = "failed", f"no [[notify]] target named {row.target!r} any more"
            add_event(s, "notification.failed", change_id=row.change_id, delivery_id=row.id, reason=row.last_error)
            continue
        row.attempts += 1
        row.next_attempt_at = now + dt.timedelta(seconds=lease_seconds)
        taken.append(Attempt(row.id, row.target, row.event, dict(row.payload), row.attempts))
    return taken


def record_attempt(s: Session, attempt: Attempt, status: int, error: str) -> str:
    """The outcome of `attempt` (HTTP `status`, 0 with `error` when nothing answered), with its event; the
    delivery's state after it. An attempt another sender has since taken over changes nothing."""
    row = s.get(NotificationDelivery, attempt.id, with_for_update=True)
    if row is None or row.state != "pending" or row.attempts != attempt.attempt:
        return row.state if row is not None else ""
    outcome = rules.after_attempt(attempt.attempt, status, error)
    now = utcnow()
    row.state, row.last_status, row.last_error = outcome.state, status, outcome.error
    said: dict[str, Any] = {"delivery_id": row.id, "target": row.target, "attempts": row.attempts, "status": status}
    if outcome.state == "delivered":
        row.delivered_at = now
    elif outcome.state == "failed":
        said["reason"] = outcome.error
    else:
        row.next_attempt_at = now + dt.timedelta(seconds=outcome.retry_in)
        said |= {"reason": outcome.error, "seconds": outcome.retry_in}
    add_event(
        s,
        f"notification.{'retrying' if outcome.state == 'pending' else outcome.state}",
        change_id=row.change_id,
        **said,
    )
    return row.state
