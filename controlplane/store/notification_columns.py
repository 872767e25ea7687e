"""The notification outbox's tables (issue 28): one delivery per (target, event), and the cursor over
`events` the deliveries are made from. Mixed into `controlplane.store.models`."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import JSON, BigInteger, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column


class NotificationDeliveryColumns:
    """One notification for one `[[notify]]` target: its payload (no secret, no prompt text), and how its
    delivery goes. `id` is the X-Drover-Delivery header, the same on every attempt."""

    __tablename__ = "notification_deliveries"
    __table_args__ = (
        UniqueConstraint("target", "event_id", name="uq_notification_deliveries_target_event"),
        Index("ix_notification_deliveries_due", "state", "next_attempt_at"),
    )
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    target: Mapped[str] = mapped_column(String(200))  # the [[notify]] table's name
    event_id: Mapped[int] = mapped_column(BigInteger)  # the row of `events` it tells about
    event: Mapped[str] = mapped_column(String(32))  # change.finished | question.asked | ... (X-Drover-Event)
    change_id: Mapped[str] = mapped_column(String(40), default="")
    project: Mapped[str] = mapped_column(String(200), default="")
    payload: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    state: Mapped[str] = mapped_column(String(16), default="pending")  # pending | delivered | failed
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[dt.datetime] = mapped_column()
    """Due from then; while an attempt is in flight, when it may be taken again (its sender died)."""
    last_status: Mapped[int] = mapped_column(Integer, default=0)  # the last attempt's HTTP status; 0: none
    last_error: Mapped[str] = mapped_column(Text, default="")  # bounded (domain.notifications.MAX_REASON)
    created_at: Mapped[dt.datetime] = mapped_column()
    delivered_at: Mapped[dt.datetime | None] = mapped_column(nullable=True)


class NotificationCursorColumns:
    """How far through `events` the outbox has made deliveries: moved in the transaction that inserts
    them, so a restart or another replica neither skips nor repeats an event."""

    __tablename__ = "notification_cursor"
    name: Mapped[str] = mapped_column(String(32), primary_key=True)  # "events"
    event_id: Mapped[int] = mapped_column(BigInteger, default=0)  # the last event looked at
