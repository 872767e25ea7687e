"""Composes a Change's ChangeSets onto drover/<change>/candidate once every Task succeeded.

Git work runs in a thread, outside any transaction; the result (or the conflict
naming its files) is recorded in one transaction: a conflict reopens the later Task
(services/conflicts.py) and the Change composes again once it succeeds, or it ends the Change."""

from __future__ import annotations

import asyncio
import logging
import pathlib
import tempfile
from collections.abc import Awaitable, Callable

from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.domain import graph
from controlplane.services import change_lifecycle
from controlplane.services.credentials import Sealer, git_secret
from controlplane.services.notify import Notifier
from controlplane.store.changes import latest_changesets, tasks_by_key
from controlplane.store.engine import Store
from controlplane.store.models import Change, Project
from drover.core import gitspace
from drover.errors import DroverError

log = logging.getLogger("drover.composer")


def pending(s: Session) -> list[str]:
    return list(s.scalars(select(Change.id).where(Change.candidate_state == "pending").order_by(Change.created_at)))


def inputs(s: Session, change_id: str, sealer: Sealer | None = None) -> tuple[str, str, list[gitspace.StackItem], str]:
    """The project repository, the Change's base branch (the project's unless it names one), the Change's
    ChangeSets in merge order and the git secret (FailedPrecondition when the project's stored credential
    does not open)."""
    change = s.get(Change, change_id)
    assert change is not None
    project = s.get(Project, change.project)
    assert project is not None
    tasks = tasks_by_key(s, change_id)
    latest = latest_changesets(s, [t.id for t in tasks.values()])
    present = [k for k, t in tasks.items() if t.id in latest]
    tie = {k: (latest[tasks[k].id].created_at.isoformat(), tasks[k].id) for k in present}
    ordered = graph.stack_order(present, {k: t.depends_on for k, t in tasks.items()}, tie)
    items = [
        gitspace.StackItem(cs.id, cs.task_id, cs.branch, cs.commit, cs.created_at.isoformat())
        for cs in (latest[tasks[k].id] for k in ordered)
    ]
    return project.repo, change.base_branch or project.branch, items, git_secret(project, sealer)[1]


class Composer:
    def __init__(
        self,
        store: Store,
        notifier: Notifier,
        work_dir: pathlib.Path | None = None,
        leading: Callable[[], Awaitable[bool]] | None = None,
        sealer: Sealer | None = None,
    ) -> None:
        self.store, self.notifier, self.sealer = store, notifier, sealer
        self.leading = leading  # with several replicas, only the leader composes
        self.composed: Callable[[], None] = lambda: None
        """Told after each composition (the forge loop opens the pull request at once, not at its next poll)."""
        self.work_dir = work_dir or pathlib.Path(tempfile.gettempdir()) / "drover-compose"

    async def compose(self, change_id: str) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        try:
            repo, branch, items, token = await self.store.run(inputs, change_id, self.sealer)
            result = await asyncio.to_thread(
                gitspace.compose_candidate, repo, branch, change_id, items, self.work_dir, token
            )
            await self.store.run(change_lifecycle.finish_composition, change_id, result.branch, result.commit, "")
        except gitspace.MergeConflict as conflict:
            await self.store.run(
                change_lifecycle.finish_composition,
                change_id,
                "",
                "",
                f"candidate_conflict: {', '.join(conflict.files)} ({conflict.changeset_id})",
                conflict.changeset_id,
                tuple(conflict.files),
            )
        except (gitspace.WorkspaceError, DroverError) as err:
            await self.store.run(change_lifecycle.finish_composition, change_id, "", "", f"candidate_failed: {err}")
        self.notifier.notify()
        self.composed()

    async def run_forever(self) -> None:
        while True:
            await self.notifier.wait(2.0)  # woken by every write; a finished run may complete a Change
            try:
                if self.leading is not None and not await self.leading():
                    continue
                for change_id in await self.store.read(pending):  # a read, after every write
                    await self.compose(change_id)
            except Exception:
                log.exception("composing candidates failed; retrying")
                await asyncio.sleep(2)
