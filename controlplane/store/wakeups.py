"""Per-Change wake-ups: a stream that follows a Change's events (WatchChange) sleeps until a transaction
that appended an event of that Change commits in this process, not on every write of the fleet.

`events.add_event` notes the Change in its session; `Store.run` tells `ChangeWakeups.committed` once
that transaction has committed. Writes by other replicas (or by another process on the same SQLite
file) are not seen here: a watcher still reads again after its poll interval."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Iterator

from sqlalchemy.orm import Session

CHANGED = "drover.changed"
"""The session.info key under which a transaction collects the Changes it appended events to."""


def note_change(s: Session, change_id: str) -> None:
    """Remember, in the transaction, that it appended an event of `change_id`."""
    if change_id:
        s.info.setdefault(CHANGED, set()).add(change_id)


class ChangeWatch:
    """One Change's watchers in this process: a version that moves on each commit touching it."""

    def __init__(self) -> None:
        self.version = 0
        self.watchers = 0
        self._moved = asyncio.Event()

    def moved(self) -> None:
        self.version += 1
        self._moved.set()
        self._moved = asyncio.Event()

    async def wait(self, since: int, timeout: float) -> bool:
        """True once the version has moved past `since` (at once if it already has); False after `timeout`."""
        if self.version != since:
            return True
        try:
            await asyncio.wait_for(self._moved.wait(), timeout)
        except TimeoutError:
            return False
        return True


class ChangeWakeups:
    """Used on the event loop only. Keeps state only for the Changes someone is watching now."""

    def __init__(self) -> None:
        self._watched: dict[str, ChangeWatch] = {}

    @contextlib.contextmanager
    def watching(self, change_id: str) -> Iterator[ChangeWatch]:
        watch = self._watched.setdefault(change_id, ChangeWatch())
        watch.watchers += 1
        try:
            yield watch
        finally:
            watch.watchers -= 1
            if not watch.watchers:
                del self._watched[change_id]

    def committed(self, change_ids: Iterable[str]) -> None:
        for change_id in change_ids:
            watch = self._watched.get(change_id)
            if watch is not None:
                watch.moved()
