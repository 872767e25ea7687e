"""How a project's runs get their pool's slots and how much of them one of its Changes may hold, the
columns of `projects` that say it: mixed into `controlplane.store.models.Project`
(`controlplane.domain.scheduling` decides with them)."""

from __future__ import annotations

from sqlalchemy import Integer
from sqlalchemy.orm import Mapped, mapped_column


class ProjectAdmission:
    max_active_runs_per_change: Mapped[int] = mapped_column(Integer, default=8, server_default="8")
    """At most this many runs of one Change active at once; the rest stay queued (blocked_limit)."""
    weight: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    """The project's share of its pool's slots against the pool's other projects while their runs queue."""
    max_open_sandboxes_per_change: Mapped[int] = mapped_column(Integer, default=4, server_default="4")
    """At most this many of a Change's active runs hold an open sandbox (command runs, and write Tasks of a
    project with a repository); its other runs that would open one stay queued (blocked_limit)."""
