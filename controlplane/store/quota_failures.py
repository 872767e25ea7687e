"""Observed quota failures (seed 004): a 429 or quota error a call on a member met, in `quota_failures`,
read by every replica's router while that member's quota is unknown (`unknown_policy` UseObservedFailures).
Recording one drops every row older than the retention, so the table holds at most the failures of one
retention before the latest (no sweep needed)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from controlplane.store.models import QuotaFailure

QUOTA_ERRORS = frozenset({"rate_limit_error", "RateLimited", "billing_error", "SpendLimited", "429"})
"""The errors an agent reports that count as quota failures; the stored reason is one of them, never a message."""


def record(s: Session, route_key: str, reason: str, at: dt.datetime, retention: dt.timedelta) -> bool:
    """Keep a quota failure of `route_key` (a `reason` outside QUOTA_ERRORS is not one: False), and drop the
    failures older than `retention`, in the caller's transaction."""
    if not route_key or reason not in QUOTA_ERRORS:
        return False
    prune(s, at - retention)
    s.add(QuotaFailure(route_key=route_key, at=at, reason=reason))
    return True


def recent(
    s: Session, route_keys: Iterable[str], window: dt.timedelta, now: dt.datetime
) -> dict[str, list[dt.datetime]]:
    """The failures of each route key in [now - window, now], oldest first ([] for one without)."""
    keys = sorted(set(route_keys))
    found: dict[str, list[dt.datetime]] = {key: [] for key in keys}
    rows = s.execute(
        select(QuotaFailure.route_key, QuotaFailure.at)
        .where(QuotaFailure.route_key.in_(keys), QuotaFailure.at >= now - window, QuotaFailure.at <= now)
        .order_by(QuotaFailure.at, QuotaFailure.id)
    )
    for key, at in rows:
        found[key].append(at if at.tzinfo else at.replace(tzinfo=dt.UTC))  # SQLite's are naive UTC
    return found


def prune(s: Session, before: dt.datetime) -> None:
    """Drop every failure older than `before`."""
    s.execute(delete(QuotaFailure).where(QuotaFailure.at < before))
