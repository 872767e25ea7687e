"""ChangeSets: record what a run published, list them, serve their patches."""

from __future__ import annotations

import dataclasses
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.services import claims
from controlplane.store.events import add_event, new_id
from controlplane.store.models import Change, ChangeSet, Run, utcnow
from controlplane.store.objects import ObjectStore, patch_key
from drover.errors import FailedPrecondition, InvalidArgument, NotFound


@dataclasses.dataclass(frozen=True)
class Published:
    """What a run publishes: the one list of a ChangeSet's fields. The API decodes PublishChangeSet into it
    field by field, and the ChangeSet row takes each field but the patch (stored as an object)."""

    run_id: str
    branch: str
    commit: str
    base_commit: str
    start_commit: str
    stacked_on: tuple[str, ...]
    files: tuple[str, ...]
    own_files: tuple[str, ...]
    patch: str
    summary: str = ""
    intent: dict[str, Any] = dataclasses.field(default_factory=dict)
    left_out: tuple[str, ...] = ()
    """Build outputs the commit left out, as the user reads them (a path, or "dir/ (N files)")."""


def publish(s: Session, objects: ObjectStore, p: Published) -> ChangeSet:
    """Idempotent by run: publishing again answers the ChangeSet recorded the first time."""
    existing = s.scalar(select(ChangeSet).where(ChangeSet.run_id == p.run_id))
    if existing is not None:
        return existing
    run = s.get(Run, p.run_id)
    if run is None:
        raise NotFound(f"no run {p.run_id!r}", field="run_id")
    if run.state not in ("starting", "running"):
        raise FailedPrecondition(f"run {run.id} is {run.state}", field="run_id")
    if run.branch and (p.branch != run.branch or not p.commit):  # the Task branch dispatch rendered for it
        raise InvalidArgument(f"must be {run.branch} with a commit", field="branch")
    if not run.branch and (not p.branch.startswith(f"drover/{run.change_id}/") or not p.commit):
        raise InvalidArgument(f"must be drover/{run.change_id}/<task> with a commit", field="branch")
    change = s.get(Change, run.change_id)
    assert change is not None
    columns = {f.name: getattr(p, f.name) for f in dataclasses.fields(p) if f.name != "patch"}
    columns["summary"] = p.summary[:4000]
    changeset = ChangeSet(
        **{name: list(value) if isinstance(value, tuple) else value for name, value in columns.items()},
        id=new_id("cs"),
        change_id=run.change_id,
        task_id=run.task_id,
        created_at=utcnow(),
        patch_ref="",
    )
    changeset.patch_ref = patch_key(change.project, change.id, run.task_id, changeset.id)
    objects.put(changeset.patch_ref, p.patch.encode())  # before the row: a row never names a missing patch
    s.add(changeset)
    add_event(
        s,
        "changeset.published",
        change_id=run.change_id,
        task_id=run.task_id,
        run_id=run.id,
        agent=run.agent,
        changeset_id=changeset.id,
        branch=p.branch,
        files=list(p.files),
    )
    s.flush()
    claims.detect_conflicts(s, run.change_id)  # overlapping ChangeSets of one Change
    return changeset
