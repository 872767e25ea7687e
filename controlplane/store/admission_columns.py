"""A project's admission settings, the columns of `projects` that say how much of the fleet one of its
Changes may hold at once: mixed into `controlplane.store.models.Project`."""

from __future__ import annotations

from sqlalchemy import Integer
from sqlalchemy.orm import Mapped, mapped_column


class ProjectAdmission:
    """The per-Change caps (controlplane/domain/scheduling.py admits by them)."""

    max_active_runs_per_change: Mapped[int] = mapped_column(Integer, default=8, server_default="8")
    """At most this many runs of one Change are active (starting/running) at once."""
    max_open_sandboxes_per_change: Mapped[int] = mapped_column(Integer, default=4, server_default="4")
    """At most this many of them hold an open sandbox (command runs, and write Tasks of a repository)."""
