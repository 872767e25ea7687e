"""The quota failures the members' calls met (seed 004, "observed failures"): kept in the database so
every replica sees them and they outlast a restart. Mixed into `controlplane.store.models.QuotaFailure`."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import BigInteger, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column


class QuotaFailureColumns:
    """One 429 or quota error a call on a member met; pruned after `observed_failure_retention_minutes`."""

    __tablename__ = "quota_failures"
    __table_args__ = (Index("ix_quota_failures_route_key_at", "route_key", "at"),)
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    route_key: Mapped[str] = mapped_column(String(200))  # the member's route key, e.g. "anthropic/acct-a"
    at: Mapped[dt.datetime] = mapped_column()
    reason: Mapped[str] = mapped_column(String(64), default="")  # the error's code (router.QUOTA_ERRORS), no text
