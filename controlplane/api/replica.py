"""This control-plane process as one replica among several on a PostgreSQL database: its id, whether
it leads the fleet-wide loops (asked at most once a second), and its notes to and from the others,
published from one worker thread (in order, off the event loop) and handed to the loop on receipt."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

from controlplane.store.coordination import Bus, Leadership

LEADERSHIP_CHECK_SECONDS = 1.0


class Replica:
    def __init__(self, url: str) -> None:
        self.id = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        self.leadership = Leadership(url)
        self.bus = Bus(url, self.id, self._received)
        self.handlers: list[Callable[[dict[str, Any]], Awaitable[None]]] = []
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="replica")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._leading, self._checked = False, float("-inf")
        self._wake_queued = False
        self._tasks: set[asyncio.Future[Any]] = set()

    @property
    def shared(self) -> bool:
        return self.bus.active

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.bus.start()

    async def leading(self) -> bool:
        if not self.shared:
            return True
        now = time.monotonic()
        if now - self._checked >= LEADERSHIP_CHECK_SECONDS:
            self._checked = now
            self._leading = await asyncio.get_running_loop().run_in_executor(self._executor, self.leadership.leading)
        return self._leading

    def tell(self, note: dict[str, Any]) -> None:
        """Publish to the other replicas, after what this replica committed (a wake is sent once per burst)."""
        if not self.shared or self._loop is None:
            return
        if note.get("kind") == "wake":
            if self._wake_queued:
                return
            self._wake_queued = True
        self._track(self._loop.run_in_executor(self._executor, self._publish, note))

    def _publish(self, note: dict[str, Any]) -> None:
        if note.get("kind") == "wake":
            self._wake_queued = False
        self.bus.publish(note)

    def _received(self, note: dict[str, Any]) -> None:  # the bus's listener thread
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._handle, note)

    def _handle(self, note: dict[str, Any]) -> None:
        for handler in self.handlers:
            self._track(asyncio.ensure_future(handler(note)))

    def _track(self, future: asyncio.Future[Any]) -> None:
        self._tasks.add(future)
        future.add_done_callback(self._tasks.discard)

    def stop(self) -> None:
        self.bus.stop()
        self._executor.shutdown(wait=True)
        self.leadership.close()
