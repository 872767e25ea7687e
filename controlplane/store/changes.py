"""The Tasks of a Change, and the ChangeSets they published: the queries every layer above asks."""

from __future__ import annotations

from sqlalchemy import ColumnElement, exists, func, select
from sqlalchemy.orm import Session

from controlplane.store.models import ChangeSet, Task


def tasks_of(s: Session, change_id: str) -> list[Task]:
    """A Change's Tasks in the order they were submitted."""
    return list(s.scalars(select(Task).where(Task.change_id == change_id).order_by(Task.position)))


def needs(s: Session, key: str) -> ColumnElement[bool]:
    """A Task's `depends_on` names `key`: tested in the database, on its JSON list (PostgreSQL and
    SQLite spell the list's elements differently)."""
    if s.get_bind().dialect.name == "postgresql":
        elements = func.json_array_elements_text(Task.depends_on).table_valued("value")
    else:
        elements = func.json_each(Task.depends_on).table_valued("value")
    return exists(select(1).select_from(elements).where(elements.c.value == key))


def tasks_by_key(s: Session, change_id: str) -> dict[str, Task]:
    return {t.key: t for t in tasks_of(s, change_id)}


def latest_changesets(s: Session, task_ids: list[str]) -> dict[str, ChangeSet]:
    """The newest ChangeSet of each Task (a Task that ran again published again)."""
    latest: dict[str, ChangeSet] = {}
    for cs in s.scalars(
        select(ChangeSet).where(ChangeSet.task_id.in_(task_ids)).order_by(ChangeSet.created_at, ChangeSet.id)
    ):
        latest[cs.task_id] = cs
    return latest
