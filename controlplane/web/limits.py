"""What the console admits beyond its connection limit (uvicorn's, 503): event streams in total and per
session, and form bodies being received. `Gate` only counts and decides; the app answers its refusal."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
from collections.abc import Iterator

from controlplane.config import ConsoleLimits


@dataclasses.dataclass(frozen=True)
class Refusal:
    status: int  # 503: the console is full; 429: this session has enough; 408: too slow
    message: str


class Refused(Exception):
    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


def session_key(token: str) -> str:
    """A session's name in the counters (never the token itself)."""
    return hashlib.sha256(token.encode()).hexdigest()[:32]


class Gate:
    def __init__(self, limits: ConsoleLimits) -> None:
        self.limits = limits
        self.streams: collections.Counter[str] = collections.Counter()
        self.uploads = 0

    def stream_refusal(self, session: str) -> Refusal | None:
        if sum(self.streams.values()) >= self.limits.max_streams:
            return Refusal(503, f"the console has {self.limits.max_streams} live streams open; try again later")
        if self.streams[session] >= self.limits.max_streams_per_session:
            limit = self.limits.max_streams_per_session
            return Refusal(429, f"this session has {limit} live streams open already: close a page first")
        return None

    def open_stream(self, session: str) -> Refusal | None:
        """Count a new stream of `session` (None), or say why not (nothing counted)."""
        refused = self.stream_refusal(session)
        if refused is None:
            self.streams[session] += 1
        return refused

    def close_stream(self, session: str) -> None:
        self.streams[session] -= 1
        if self.streams[session] <= 0:
            del self.streams[session]

    @contextlib.contextmanager
    def upload(self) -> Iterator[None]:
        if self.uploads >= self.limits.max_uploads:
            raise Refused(Refusal(503, f"the console is receiving {self.limits.max_uploads} forms; try again later"))
        self.uploads += 1
        try:
            yield
        finally:
            self.uploads -= 1


def too_slow(limits: ConsoleLimits) -> Refusal:
    return Refusal(408, f"the form did not arrive within {limits.body_timeout_seconds:g} s")
