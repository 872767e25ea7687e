"""What a control plane reads of git blobs, kept by blob id: a blob's bytes never change, so its decoded
text and the window of it a packet shows are computed once per process, whatever commit or packet asks.
Bounded by size (least recently used out) and thread-safe."""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class Lru(Generic[V]):
    """A map of at most `max_size` in total (`size_of` each value), dropping the least recently used."""

    def __init__(self, max_size: int, size_of: Callable[[V], int]) -> None:
        self.max_size, self.size_of = max_size, size_of
        self._items: collections.OrderedDict[Hashable, V] = collections.OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def get(self, key: Hashable, make: Callable[[], V]) -> V:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        value = make()  # outside the lock: two threads may make the same value, both the same
        size = self.size_of(value)
        if size > self.max_size:
            return value
        with self._lock:
            if key not in self._items:
                self._items[key] = value
                self._size += size
                while self._size > self.max_size:
                    _, old = self._items.popitem(last=False)
                    self._size -= self.size_of(old)
        return value

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._size = 0


TEXTS: Lru[str | None] = Lru(256 * 1024 * 1024, lambda text: 64 + len(text or ""))
"""Blob id -> its text (None: binary or not UTF-8)."""
WINDOWS: Lru[str] = Lru(64 * 1024 * 1024, lambda window: 64 + len(window))
"""(blob id, max chars) -> the window of it a packet item shows."""
