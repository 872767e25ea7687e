"""The console process's own parts: its gate (streams in total and per session, form uploads) and the
sharing of one API stream among every console stream asking the same."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from controlplane.config import ConsoleLimits
from controlplane.web import shared_streams
from controlplane.web.limits import Gate, Refused
from controlplane.web.shared_streams import SharedStreams


def test_the_gate_refuses_a_full_session_with_429_and_a_full_console_with_503() -> None:
    gate = Gate(ConsoleLimits(max_streams=3, max_streams_per_session=2, max_uploads=1))
    assert gate.open_stream("a") is None and gate.open_stream("a") is None
    assert getattr(gate.open_stream("a"), "status", None) == 429
    assert gate.open_stream("b") is None
    assert getattr(gate.open_stream("c"), "status", None) == 503
    gate.close_stream("a")
    assert gate.open_stream("c") is None and gate.streams == {"a": 1, "b": 1, "c": 1}
    with gate.upload():
        with pytest.raises(Refused) as refused, gate.upload():
            pass
        assert refused.value.refusal.status == 503
    assert gate.uploads == 0


class Upstream:
    """API streams as a test drives them: each opened one gets every item put from its opening on."""

    def __init__(self) -> None:
        self.queues: list[asyncio.Queue[int]] = []
        self.closed = 0

    @property
    def opened(self) -> int:
        return len(self.queues)

    def put(self, item: int) -> None:
        for queue in self.queues:
            queue.put_nowait(item)

    def __call__(self) -> AsyncIterator[int]:
        queue: asyncio.Queue[int] = asyncio.Queue()
        self.queues.append(queue)
        return self._items(queue)

    async def _items(self, queue: asyncio.Queue[int]) -> AsyncIterator[int]:
        try:
            while True:
                yield await queue.get()
        finally:
            self.closed += 1


async def test_followers_of_one_key_share_one_upstream_and_each_gets_every_item() -> None:
    upstream, shared = Upstream(), SharedStreams()
    first = shared.stream("k", upstream)
    upstream.put(1)
    assert await anext(first) == 1
    late = shared.stream("k", upstream)
    upstream.put(2)
    assert [await anext(late), await anext(late), await anext(first)] == [1, 2, 2]
    other = shared.stream("other", upstream)
    upstream.put(3)
    assert await anext(other) == 3
    assert upstream.opened == 2
    await first.aclose()
    assert upstream.closed == 0  # `late` still follows
    await late.aclose()
    await other.aclose()
    assert upstream.closed == 2 and shared.hubs == {}


async def test_a_long_stream_takes_no_new_followers_and_keeps_only_what_its_slowest_has_not_had(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(shared_streams, "MAX_KEPT", 3)
    upstream, shared = Upstream(), SharedStreams()
    first = shared.stream("k", upstream)
    for item in range(5):
        upstream.put(item)
    assert [await anext(first) for _ in range(5)] == [0, 1, 2, 3, 4]
    hub = shared.hubs["k"]
    assert len(hub.items) == 0 and hub.base == 5
    second = shared.stream("k", upstream)
    upstream.put(9)
    assert await anext(second) == 9 and upstream.opened == 2
    await first.aclose()
    await second.aclose()
