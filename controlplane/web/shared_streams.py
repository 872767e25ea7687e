"""One API stream for every console stream asking the same thing: the same token, method and request
(a session's tabs on one Change, a crowd reloading one transcript) share one gRPC stream, so the API
serves a watcher per distinct question, not per browser. Each subscriber gets every item from the
first, in order, then the stream's end or its error; the API stream ends when the last subscriber
leaves. A stream with more items than `MAX_KEPT` kept stops taking new subscribers (they get their own)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Callable, Hashable
from typing import Any

MAX_KEPT = 1000
"""Items a shared stream keeps for subscribers that join late; past this many it takes no new subscribers
(they open their own) and keeps only what its slowest subscriber has not yet had."""

_SUBSCRIBERS = itertools.count()


class _Hub:
    def __init__(self, upstream: AsyncIterator[Any]) -> None:
        self.items: list[Any] = []
        self.base = 0
        """The number of items dropped from the front of `items` (everyone had them)."""
        self.positions: dict[int, int] = {}
        """Subscriber -> how many items it has had."""
        self.error: BaseException | None = None
        self.ended = False
        self.changed = asyncio.Condition()
        self.gone: Callable[[], None] = lambda: None
        self.task = asyncio.get_running_loop().create_task(self._pump(upstream))

    @property
    def open_to_joiners(self) -> bool:
        return not self.ended and self.base + len(self.items) <= MAX_KEPT

    async def _pump(self, upstream: AsyncIterator[Any]) -> None:
        try:
            async for item in upstream:
                async with self.changed:
                    self.items.append(item)
                    self.changed.notify_all()
        except Exception as err:  # handed to every subscriber (a DroverError from the API)
            self.error = err
        finally:
            async with self.changed:
                self.ended = True
                self.changed.notify_all()

    async def follow(self) -> AsyncIterator[Any]:
        me = next(_SUBSCRIBERS)
        self.positions[me] = 0
        try:
            while True:
                async with self.changed:
                    await self.changed.wait_for(lambda: self.positions[me] < self.base + len(self.items) or self.ended)
                    fresh = self.items[self.positions[me] - self.base :]
                    self.positions[me] = self.base + len(self.items)
                    self._trim()
                if not fresh and self.ended:
                    if self.error is not None:
                        raise self.error
                    return
                for item in fresh:
                    yield item
        finally:
            del self.positions[me]
            if not self.positions:
                self.gone()
                self.task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await self.task

    def _trim(self) -> None:
        if not self.open_to_joiners and self.positions:
            slowest = min(self.positions.values())
            del self.items[: slowest - self.base]
            self.base = slowest


class SharedStreams:
    def __init__(self) -> None:
        self.hubs: dict[Hashable, _Hub] = {}

    def stream(self, key: Hashable, open_upstream: Callable[[], AsyncIterator[Any]]) -> AsyncIterator[Any]:
        """The items of the API stream `open_upstream()` opens, shared with every follower of `key`."""
        hub = self.hubs.get(key)
        if hub is None or not hub.open_to_joiners:
            hub = _Hub(open_upstream())
            self.hubs[key] = hub
            hub.gone = lambda: self._forget(key, hub)
        return hub.follow()

    def _forget(self, key: Hashable, hub: _Hub) -> None:
        if self.hubs.get(key) is hub:
            del self.hubs[key]
