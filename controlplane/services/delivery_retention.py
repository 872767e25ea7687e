"""Forge webhook deliveries and notification deliveries are kept while they may matter, then pruned
(issue 28): a finished delivery (done or failed; delivered or failed) older than the retention is deleted
by the leader, a bounded batch per transaction, with one `retention.pruned` event saying how many went.

A pruned forge delivery cannot come back as new: GitHub redelivers a delivery for at most a few days,
far inside any retention this accepts (at least one day). Pending deliveries are never pruned."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from controlplane.store.events import add_event
from controlplane.store.models import ForgeDelivery, NotificationDelivery, utcnow

BATCH = 1000
"""Rows of each table deleted per transaction: a long backlog goes in several short transactions."""

FINISHED_FORGE = ("done", "failed")
FINISHED_NOTIFICATIONS = ("delivered", "failed")


def cutoff(days: float, now: dt.datetime) -> dt.datetime | None:
    """Rows finished before this are pruned; None: keep everything (a retention of 0 days)."""
    return now - dt.timedelta(days=days) if days > 0 else None


def prune(s: Session, before: dt.datetime) -> tuple[int, int]:
    """Delete up to BATCH finished forge deliveries received and BATCH finished notification deliveries made
    before `before`; answers how many of each went (an event when any did)."""
    forge_ids = list(
        s.scalars(
            select(ForgeDelivery.delivery_id)
            .where(ForgeDelivery.state.in_(FINISHED_FORGE), ForgeDelivery.received_at < before)
            .limit(BATCH)
        )
    )
    notification_ids = list(
        s.scalars(
            select(NotificationDelivery.id)
            .where(NotificationDelivery.state.in_(FINISHED_NOTIFICATIONS), NotificationDelivery.created_at < before)
            .limit(BATCH)
        )
    )
    if forge_ids:
        s.execute(delete(ForgeDelivery).where(ForgeDelivery.delivery_id.in_(forge_ids)))
    if notification_ids:
        s.execute(delete(NotificationDelivery).where(NotificationDelivery.id.in_(notification_ids)))
    if forge_ids or notification_ids:
        add_event(
            s,
            "retention.pruned",
            forge_deliveries=len(forge_ids),
            notification_deliveries=len(notification_ids),
            before=before.isoformat(timespec="seconds"),
        )
    return len(forge_ids), len(notification_ids)


def prune_all(s: Session, days: float, now: dt.datetime | None = None) -> tuple[int, int]:
    """One batch of `prune` at the retention of `days` (0: nothing)."""
    before = cutoff(days, now or utcnow())
    return (0, 0) if before is None else prune(s, before)
