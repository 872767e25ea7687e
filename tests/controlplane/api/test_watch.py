"""WatchChange against a real control plane: a watcher wakes for its own Change's events, not for every
write of the fleet, and watching only reads: it streams while another process holds the SQLite
database's write lock."""

from __future__ import annotations

import queue
import sqlite3
import threading
import time

from drover import Client
from drover.client import Event
from tests.conftest import ControlPlane, Fleet, python_command, task, wait_for
from tests.fleet.test_metrics import endpoint, plane_log, scrape, value

TRUE = python_command("pass")


def follow(client: Client, change_id: str, into: queue.Queue[Event]) -> threading.Thread:
    """Stream a Change's events into a queue from a thread (the stream ends when the client closes)."""

    def run() -> None:
        try:
            for event in client.watch(change_id):
                into.put(event)
        except Exception:  # the client closed under the stream at the end of the test
            pass

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def drain(events: queue.Queue[Event]) -> list[str]:
    kinds = []
    while not events.empty():
        kinds.append(events.get_nowait().kind)
    return kinds


def next_kind(events: queue.Queue[Event], timeout: float) -> str:
    return events.get(timeout=timeout).kind


def test_an_event_wakes_only_the_watcher_of_its_change(fleet: Fleet) -> None:
    plane: ControlPlane = fleet.start_plane("--metrics-listen", "127.0.0.1:0")
    plane.add_project("watched")
    url = wait_for(lambda: endpoint(plane_log(plane)), 30, what="the control plane's metrics endpoint")
    with plane.client() as client:  # no agent: the Changes stay queued, their streams open
        changes = [client.submit_change("watched", f"c{i}", [task("t", TRUE)], budget_usd=1) for i in range(6)]
        streams = [queue.Queue[Event]() for _ in changes]
        for change, events in zip(changes, streams, strict=True):
            follow(client, change.id, events)
        for events in streams:  # each watcher has read its history and sleeps
            assert next_kind(events, 30) == "change.submitted"
        watched, others = streams[0], streams[1:]
        before = scrape(url)

        raises = 5
        for i in range(raises):
            client.raise_budget(changes[0].id, 2 + i)
            assert wait_for(lambda: "change.budget_raised" in drain(watched), 30, what="the watcher of A woken")
        after = scrape(url)

        woken = value(after, "drover_watch_wakeups_total", cause="event") - value(
            before, "drover_watch_wakeups_total", cause="event"
        )
        # One wake-up per raise at most (fewer when a raise commits while A's watcher is reading);
        # one global wake-up would make it 6 per raise.
        assert 1 <= woken <= raises, woken
        assert not any("change.budget_raised" in drain(events) for events in others)


def test_watching_reads_while_another_process_holds_the_write_lock(fleet: Fleet) -> None:
    plane: ControlPlane = fleet.start_plane()
    plane.add_project("locked")
    with plane.client() as client:
        change = client.submit_change("locked", "g", [task("t", TRUE)], budget_usd=1)
        holder = sqlite3.connect(plane.data_dir / "drover.db", isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # a writer of another process (a backup, a CLI command) holds the lock
        try:
            events: queue.Queue[Event] = queue.Queue()
            started = time.monotonic()
            follow(client, change.id, events)
            # A watcher on the writer would wait for the lock (30 s busy timeout); a reader does not.
            assert next_kind(events, 10) == "change.submitted"
            assert time.monotonic() - started < 10
        finally:
            holder.rollback()
            holder.close()
        client.raise_budget(change.id, 2)  # the lock gone, the stream goes on with new events
        assert wait_for(lambda: "change.budget_raised" in drain(events), 30, what="the stream to go on")
