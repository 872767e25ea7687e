"""Events, the append-only record of every state change, written in the transaction of the change
they record; and the ids of new rows."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy.orm import Session

from controlplane.store.metric_hooks import metrics
from controlplane.store.models import Event, Run, utcnow
from controlplane.store.wakeups import note_change


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:20]}"


def add_event(
    s: Session, kind: str, *, change_id: str = "", task_id: str = "", run_id: str = "", agent: str = "", **data: Any
) -> Event:
    event = Event(
        kind=kind, change_id=change_id, task_id=task_id, run_id=run_id, agent=agent, data=data, created_at=utcnow()
    )
    s.add(event)
    note_change(s, change_id)
    metrics.on_event(s, kind, data)
    return event


def run_event(s: Session, kind: str, run: Run, **data: Any) -> None:
    add_event(s, kind, change_id=run.change_id, task_id=run.task_id, run_id=run.id, agent=run.agent, **data)
    metrics.on_run(s, kind, run.created_at, run.started_at, utcnow())
