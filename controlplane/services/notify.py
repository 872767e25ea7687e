"""Wakes the streams that follow the store (watch, tail) when something was written."""

from __future__ import annotations

import asyncio
import contextlib


class Notifier:
    def __init__(self) -> None:
        self._generation = 0
        self._changed = asyncio.Condition()
        self._pending = False
        self._broadcasting: set[asyncio.Task[None]] = set()  # kept, so a broadcast is not collected mid-way

    def notify(self) -> None:
        self._generation += 1
        loop = asyncio.get_running_loop()
        if not self._pending:
            self._pending = True
            task = loop.create_task(self._broadcast())
            self._broadcasting.add(task)
            task.add_done_callback(self._broadcasting.discard)

    async def _broadcast(self) -> None:
        async with self._changed:
            self._pending = False
            self._changed.notify_all()

    async def wait(self, timeout: float) -> None:
        """Return after the next write here, or after `timeout` (writes by other replicas are polled)."""
        async with self._changed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout)
