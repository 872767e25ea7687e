"""The columns of a run that say how it is going and how it went, beyond its state: its last progress
(the run check), its session's result, and whether its Change's cap holds it. Mixed into
`controlplane.store.models.Run`."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import BigInteger, Boolean, Text
from sqlalchemy import false as sa_false
from sqlalchemy.orm import Mapped, mapped_column


class RunOutcomeColumns:
    last_activity_at: Mapped[dt.datetime | None] = mapped_column(nullable=True)
    """Its last output, model or tool call as flushed once per run check (None: none yet; started_at counts)."""
    # a model-driven session's result as its agent reported it (result_success None: none reported);
    # result_text is Task-written: shown escaped, never logged
    result_text: Mapped[str] = mapped_column(Text, default="")
    result_turns: Mapped[int] = mapped_column(default=0)
    result_cost_micros: Mapped[int] = mapped_column(BigInteger, default=0)
    result_success: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    compactions: Mapped[int] = mapped_column(default=0)
    blocked_limit: Mapped[bool] = mapped_column(Boolean, default=False, server_default=sa_false())
    """Held queued by a cap of its Change (max_active_runs_per_change or max_open_sandboxes_per_change), and
    said so once (run.blocked_limit)."""
