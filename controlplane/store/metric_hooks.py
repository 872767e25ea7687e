"""What the store reports to the metrics above it: an event recorded, a run's step, a transaction run
again. `controlplane.metrics` points these hooks at its counters when it is imported (every server
process imports it); until then they do nothing, so the store imports nothing above it and a
short-lived command never loads prometheus."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy.orm import Session


def _nothing(*args: Any) -> None:
    return None


@dataclasses.dataclass
class MetricHooks:
    on_event: Callable[[Session, str, Mapping[str, Any]], None] = _nothing
    """An event added on the session (counted once its transaction commits)."""
    on_run: Callable[[Session, str, dt.datetime | None, dt.datetime | None, dt.datetime], None] = _nothing
    """A run's event: kind, created, started, now (latencies of its steps)."""
    on_store_retry: Callable[[str], None] = _nothing
    """A transaction rolled back by a deadlock, serialization failure or busy database, about to run again."""


metrics = MetricHooks()
"""The process's hooks (one registry of metrics per process)."""
