"""Semantic memory for run start: keep each project's index on its canonical tree, wait for a build
in progress (6 waits of 2 s), and turn query matches into packet items. Memory is optional: when chroma
or the model cannot be loaded, runs start without semantic items and their packet says why."""

from __future__ import annotations

import asyncio
import functools
import logging
import pathlib
from collections.abc import Callable
from typing import Any

import pygit2
from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane import metrics
from controlplane.config import MemoryConfig
from controlplane.context import retrieval
from controlplane.domain import packet
from controlplane.store import meters
from controlplane.store.engine import Store
from controlplane.store.events import new_id
from controlplane.store.models import Change, ChangeSet, utcnow

log = logging.getLogger("drover.memory")
MAX_FILE_BYTES = 200_000


def take_query(s: Session, cap: int) -> bool:
    """One query embedding on the shared daily meter."""
    return meters.take_call(s, meters.daily_calls_meter(meters.MEMORY_QUERIES_DAY, utcnow(), cap), new_id("mq"))


def intents_of(s: Session, project: str) -> list[dict[str, Any]]:
    return [
        {"changeset_id": cs.id, "text": cs.summary, "files": list(cs.own_files)}
        for cs in s.scalars(
            select(ChangeSet)
            .join(Change, Change.id == ChangeSet.change_id)
            .where(Change.project == project, ChangeSet.summary != "")
            .order_by(ChangeSet.created_at)
        )
    ]


def _report_build(project: str, task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("index build of %s failed: %s", project, task.exception())


def tree_files(repo_path: str, commit: str) -> tuple[str, dict[str, tuple[str, str]]]:
    """The tree id of `commit` and its text files as path -> (blob id, text)."""
    repo = pygit2.Repository(repo_path)
    tree = retrieval.GitTree(repo_path, commit)
    files: dict[str, tuple[str, str]] = {}
    for path in tree.files():
        blob = tree.blob_id(path)
        obj = repo[blob]
        if not isinstance(obj, pygit2.Blob) or obj.size > MAX_FILE_BYTES:
            continue
        text = tree.read(path)
        if text is not None:
            files[path] = (blob, text)
    return str(repo[commit].peel(pygit2.Commit).tree_id), files


def tree_of(repo_path: str, commit: str) -> str:
    return str(pygit2.Repository(repo_path)[commit].peel(pygit2.Commit).tree_id)


class Recall:
    def __init__(self, store: Store, data_dir: pathlib.Path, config: MemoryConfig) -> None:
        self.store, self.data_dir, self.config = store, data_dir, config
        self._memory: Any = None
        self._unavailable = "" if config.enabled else "semantic memory is turned off"
        self._builds: dict[str, asyncio.Task[Any]] = {}

    async def memory(self) -> Any:
        if self._memory is None and not self._unavailable:
            try:
                from controlplane.context.memory import (
                    Memory,  # chromadb and onnxruntime load only when used
                )

                self._memory = await asyncio.to_thread(
                    Memory.open, self.data_dir, self.config.url, self.config.model_dir
                )
            except ModuleNotFoundError as err:  # the memory extra is not installed: runs go on without
                self._unavailable = f"semantic memory is not installed ({err.name}): pip install 'drover[memory]'"
                log.info("%s", self._unavailable)
            except Exception as err:  # no model: runs go on without semantic items
                self._unavailable = f"semantic memory unavailable: {type(err).__name__}: {err}"
                log.warning("%s", self._unavailable)
        return self._memory

    async def build(
        self, project: str, repo_path: str, commit: str, progress: Callable[[int, int], None] | None = None
    ) -> Any:
        """Index the project's tree at `commit` (incremental by blob id); one build per project at a time.
        Its progress (files embedded, files to embed) goes to the metric and to `progress`."""
        memory = await self.memory()
        if memory is None:
            raise RuntimeError(self._unavailable)
        tree_id, files = await asyncio.to_thread(tree_files, repo_path, commit)
        intents = await self.store.run(intents_of, project)

        def told(done: int, total: int) -> None:
            metrics.MEMORY_INDEX_FILES.labels(project, "done").set(done)
            metrics.MEMORY_INDEX_FILES.labels(project, "total").set(total)
            if progress is not None:
                progress(done, total)

        report = await asyncio.to_thread(memory.build, project, tree_id, files, intents, told)
        metrics.MEMORY_INDEX_ITEMS.labels(project).set(report.items)
        return report

    async def warm(self, project: str, repo_path: str, commit: str) -> None:
        """Start the index build of `commit` unless memory is off or the index is on its tree already."""
        memory = await self.memory()
        if memory is None:
            return
        tree_id = await asyncio.to_thread(tree_of, repo_path, commit)
        if (await asyncio.to_thread(memory.state, project)).tree != tree_id:
            self._ensure_build(project, repo_path, commit)

    def _ensure_build(self, project: str, repo_path: str, commit: str) -> None:
        running = self._builds.get(project)
        if running is None or running.done():
            task = asyncio.create_task(self.build(project, repo_path, commit))
            task.add_done_callback(functools.partial(_report_build, project))
            self._builds[project] = task

    async def items(
        self, project: str, repo_path: str, commit: str, query: str, files: set[str]
    ) -> tuple[tuple[packet.Item, ...], str]:
        """Semantic items for a run at `commit`, and a note when there are none to give."""
        memory = await self.memory()
        if memory is None:
            return (), self._unavailable
        tree_id = await asyncio.to_thread(tree_of, repo_path, commit)
        if (await asyncio.to_thread(memory.state, project)).tree != tree_id:
            self._ensure_build(project, repo_path, commit)
            await asyncio.sleep(0.05)  # let the build mark itself as running
            if not await asyncio.to_thread(memory.wait_for_index, project, tree_id):
                return (), f"the memory index of tree {tree_id[:12]} is still being built: no semantic items"
        cap = self.config.queries_per_day
        matches = await asyncio.to_thread(
            memory.query, project, tree_id, query, files, spend=lambda: self.store.transaction(take_query, cap)
        )
        items = tuple(
            packet.Item(
                item_id=f"semantic:{m.path}@{m.blob or m.changeset}",
                source="semantic",
                priority=retrieval.PRIORITY["semantic"] + rank,
                source_version=m.blob or m.changeset,
                captured_at="",
                title=f"{m.path} (similarity {m.similarity:.2f})",
                text=m.text,
                score=round(m.similarity, 4),
            )
            for rank, m in enumerate(matches)
        )
        return items, matches.reason
