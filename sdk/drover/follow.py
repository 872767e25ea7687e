"""Following a Change, a run's output or the event log from a terminal, through control-plane restarts:
a lost stream is dialled again with backoff and resumes after the last event or line seen."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TypeVar

from drover.errors import DroverError
from drover.models import Event, LogLine

if TYPE_CHECKING:
    from drover.client import Client

T = TypeVar("T")
RETRIED = frozenset({"UNAVAILABLE", "CANCELLED", "UNKNOWN", "DEADLINE_EXCEEDED"})
"""How a stream ends when the control plane restarts or the network drops; everything else is final."""


def _say(text: str) -> None:
    print(f"drover: {text}", file=sys.stderr, flush=True)


class Reconnect:
    """Backoff between attempts (0.5 s doubling to 10 s); gives up after `patience` seconds without
    a successful answer, raising the last error."""

    def __init__(self, patience: float = 300.0, say: Callable[[str], None] = _say) -> None:
        self.patience, self.say = patience, say
        self.delay, self.down_since = 0.5, 0.0

    def heard(self) -> None:
        self.delay, self.down_since = 0.5, 0.0

    def lost(self, err: DroverError) -> None:
        if err.code not in RETRIED:
            raise err
        now = time.monotonic()
        self.down_since = self.down_since or now
        if now - self.down_since > self.patience:
            raise err
        self.say(f"lost the control plane ({err.code}: {err.message}); dialling again in {self.delay:.1f} s")
        time.sleep(self.delay)
        self.delay = min(self.delay * 2, 10.0)


def change_events(client: Client, change_id: str, reconnect: Reconnect | None = None) -> Iterator[Event]:
    """A Change's events until it ends, each once, across reconnects."""
    reconnect = reconnect or Reconnect()
    last = 0
    while True:
        try:
            for event in client.watch(change_id, after_event_id=last):
                reconnect.heard()
                last = event.id
                yield event
                if event.kind == "change.finished":
                    return
            if client.get_change(change_id).status not in ("open", "running"):
                return  # the stream ended because the Change did
        except DroverError as err:
            reconnect.lost(err)


def run_lines(client: Client, run_id: str, reconnect: Reconnect | None = None) -> Iterator[LogLine]:
    """A run's output until it ends, across reconnects (resuming after the last message seen)."""
    reconnect = reconnect or Reconnect()
    after = 0
    while True:
        try:
            for line in client.run_logs(run_id, follow=True, after_seq=after):
                reconnect.heard()
                after = max(after, line.seq)
                yield line
            return
        except DroverError as err:
            reconnect.lost(err)


def new_events(
    client: Client,
    after_id: int,
    *,
    change_id: str = "",
    run_id: str = "",
    kind: str = "",
    poll_seconds: float = 1.0,
    reconnect: Reconnect | None = None,
) -> Iterator[Event]:
    """Events after `after_id` as they are recorded, until the caller stops iterating."""
    reconnect = reconnect or Reconnect()
    while True:
        try:
            page = client.list_events(change_id=change_id, run_id=run_id, kind=kind, after_id=after_id, limit=500)
            reconnect.heard()
        except DroverError as err:
            reconnect.lost(err)
            continue
        yield from page
        if page:
            after_id = page[-1].id
        if len(page) < 500:
            time.sleep(poll_seconds)


class RunFollowers:
    """`watch --logs`: one thread per started run printing its lines as they come; a run's last lines
    are printed before its run.finished event."""

    def __init__(self, client: Client, show: Callable[[str, LogLine], None]) -> None:
        self.client, self.show = client, show
        self.threads: dict[str, threading.Thread] = {}

    def started(self, run_id: str, key: str) -> None:
        def follow() -> None:
            try:
                for line in run_lines(self.client, run_id):
                    self.show(key, line)
            except DroverError as err:
                _say(f"run {run_id}: {err.code}: {err.message}")

        self.threads[run_id] = threading.Thread(target=follow, name=f"logs-{run_id}", daemon=True)
        self.threads[run_id].start()

    def finished(self, run_id: str) -> None:
        thread = self.threads.pop(run_id, None)
        if thread is not None:
            thread.join(30)
