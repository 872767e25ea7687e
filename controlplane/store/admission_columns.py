"""How a project's runs get their pool's slots, the columns of `projects` that say it: mixed into
`controlplane.store.models.Project` (`controlplane.domain.scheduling` decides with them)."""

from __future__ import annotations

from sqlalchemy import Integer
from sqlalchemy.orm import Mapped, mapped_column


class ProjectAdmission:
    max_active_runs_per_change: Mapped[int] = mapped_column(Integer, default=8, server_default="8")
    """At most this many runs of one Change active at once; the rest stay queued (blocked_limit)."""
    weight: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    """The project's share of its pool's slots against the pool's other projects while their runs queue."""
