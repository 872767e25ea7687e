"""Context warm-up, off every run's path: each project's canonical tip gets its import graph built (on every
replica: graphs live in memory) and its semantic memory index built (on the leader: the index is shared),
at start, within seconds of a project being added or changed, and within `WARM_SECONDS` of its branch
moving. A run that starts before either is ready
proceeds without it, and its packet says so."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import pathlib
import time
from collections.abc import Awaitable, Callable

from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.context.canonical_tree import open_canonical
from controlplane.context.import_graph import Graphs
from controlplane.context.recall import Recall
from controlplane.services.credentials import Sealer, git_secret
from controlplane.store.engine import Store
from controlplane.store.models import Project
from drover.core.workspace import WorkspaceError
from drover.errors import DroverError

log = logging.getLogger("drover.warmer")
WARM_SECONDS = 30.0  # how often each project's canonical branch is looked at (remote ones fetched)
POLL_SECONDS = 2.0  # how often the project table is read for new and changed projects


@dataclasses.dataclass(frozen=True)
class Canonical:
    project: str
    repo: str
    branch: str
    token: str = dataclasses.field(repr=False)
    locked: str = ""
    """Why its stored git credential does not open ("" when it does, or it has none)."""


def canonicals(s: Session, sealer: Sealer | None = None) -> list[Canonical]:
    out = []
    for p in s.scalars(select(Project).where(Project.repo != "").order_by(Project.name)):
        try:
            out.append(Canonical(p.name, p.repo, p.branch, git_secret(p, sealer)[1]))
        except DroverError as err:
            out.append(Canonical(p.name, p.repo, p.branch, "", str(err)))
    return out


class Warmer:
    def __init__(
        self,
        store: Store,
        mirrors: pathlib.Path,
        graphs: Graphs,
        recall: Recall | None,
        leading: Callable[[], Awaitable[bool]],
        interval: float = WARM_SECONDS,
        poll: float = POLL_SECONDS,
        sealer: Sealer | None = None,
    ) -> None:
        self.store, self.mirrors, self.graphs, self.recall = store, mirrors, graphs, recall
        self.sealer = sealer
        self.leading, self.interval, self.poll = leading, interval, poll
        self.seen: dict[str, tuple[str, str]] = {}
        """Project -> the (repository, branch) last looked at."""
        self.tips: dict[str, str] = {}
        """Project -> the canonical commit last warmed."""
        self.locked: dict[str, str] = {}
        """Project -> why its credential does not open, logged once (its runs fail saying so)."""

    async def run_forever(self) -> None:
        last = float("-inf")
        while True:
            everything = time.monotonic() - last >= self.interval
            last = time.monotonic() if everything else last
            try:
                await self.warm_once(everything)
            except Exception:  # a bad repository must not stop the others, nor the next pass
                log.exception("context warm-up failed; next pass in %.0f s", self.poll)
            await asyncio.sleep(self.poll)

    async def warm_once(self, everything: bool = True) -> None:
        """Every project's tip (fetching remote ones), or only those new or changed since the last look."""
        for canonical in await self.store.read(canonicals, self.sealer):
            if canonical.locked:
                if self.locked.get(canonical.project) != canonical.locked:
                    log.warning("context warm-up of %s skipped: %s", canonical.project, canonical.locked)
                self.locked[canonical.project] = canonical.locked
                continue
            self.locked.pop(canonical.project, None)
            where = (canonical.repo, canonical.branch)
            if not everything and self.seen.get(canonical.project) == where:
                continue
            self.seen[canonical.project] = where
            try:
                repo, commit = await asyncio.to_thread(
                    open_canonical, canonical.project, canonical.repo, canonical.branch, self.mirrors, canonical.token
                )
            except WorkspaceError as err:
                log.warning("context warm-up of %s: %s", canonical.project, err)
                continue
            if not commit or self.tips.get(canonical.project) == commit:
                continue
            self.tips[canonical.project] = commit
            self.graphs.ready(repo.path, commit)  # builds in its own thread
            if self.recall is not None and await self.leading():
                await self.recall.warm(canonical.project, repo.path, commit)
