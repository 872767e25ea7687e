"""Output batching: per stream, sent every 200 ms, at a stream change, or at 256 KiB.

The batcher sees records and a clock and calls `send(stream, text, end)`; it never
sees gRPC or the outbox (STYLE.md row 7). Records are never split (the supervisor
writes records of at most RECORD_BYTES), so every batch ends on a record boundary
and `end` says exactly which output it covers. Quiet output goes out within 200 ms; a flood goes
in 256 KiB messages, so the control plane pays its per-message cost (a transaction unit, an
ack) once per 256 KiB rather than per line."""

from __future__ import annotations

from collections.abc import Callable

Send = Callable[[str, str, int], None]
RECORD_BYTES = 8 * 1024


class LogBatcher:
    def __init__(self, send: Send, *, interval: float = 0.2, max_bytes: int = 256 * 1024) -> None:
        self._send = send
        self.interval = interval
        self.max_bytes = max_bytes
        self._stream = ""
        self._parts: list[str] = []
        self._size = 0
        self._since = 0.0
        self._end = 0

    def add(self, stream: str, text: str, end: int, now: float) -> None:
        """Take one record that ends at output offset `end`."""
        size = len(text.encode())
        if self._parts and (stream != self._stream or self._size + size > self.max_bytes):
            self.flush()
        if not self._parts:
            self._stream, self._since = stream, now
        self._parts.append(text)
        self._size += size
        self._end = end
        if self._size >= self.max_bytes:
            self.flush()

    def due(self, now: float) -> bool:
        return bool(self._parts) and now - self._since >= self.interval

    def flush(self) -> None:
        if self._parts:
            text = "".join(self._parts)
            self._parts, self._size = [], 0
            self._send(self._stream, text, self._end)
