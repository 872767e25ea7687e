"""Several control-plane replicas on one PostgreSQL database: who leads the fleet-wide loops, and how
replicas tell each other what only the holder of an agent's stream can do.

- Leadership: one replica at a time runs the fleet-wide loops (routing, the lost-agent sweep,
  composing candidates). It is the holder of a session-level advisory lock on a dedicated
  connection; when that replica dies its connection closes, PostgreSQL releases the lock and
  another replica takes it within a second.
- The bus: `LISTEN/NOTIFY` on one channel. A notification is sent after the state change it tells
  about has committed, carries only names (never a secret, never a session's text: the receiver
  reads those from the database), and is at most a wake-up: a replica that misses one still finds
  the work at its next poll.

On SQLite (one process by design) this replica always leads and the bus carries nothing.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy.engine import make_url

log = logging.getLogger("drover.replicas")

CHANNEL = "drover"
LEADER_LOCK = 0x44524F56  # "DROV": the advisory lock key of the fleet-wide loops


def libpq_url(url: str) -> str:
    """A SQLAlchemy PostgreSQL URL as psycopg's own connection string."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def shared(url: str) -> bool:
    """Whether several replicas may share this database (PostgreSQL)."""
    return url.startswith("postgresql")


class Leadership:
    """`leading()` says whether this replica runs the fleet-wide loops now."""

    def __init__(self, url: str) -> None:
        self.url = url if shared(url) else ""
        self._conn: Any = None
        self._held = False
        self._lock = threading.Lock()

    def leading(self) -> bool:
        """Holds or takes the lock; blocking I/O (call it from a worker thread)."""
        if not self.url:
            return True
        import psycopg

        with self._lock:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = psycopg.connect(libpq_url(self.url), autocommit=True, connect_timeout=5)
                    self._held = False
                if self._held:  # still held while this session lives: prove it does
                    self._conn.execute("SELECT 1")
                    return True
                row = self._conn.execute("SELECT pg_try_advisory_lock(%s)", (LEADER_LOCK,)).fetchone()
                self._held = bool(row and row[0])
                if self._held:
                    log.info("this replica now leads routing, sweeps and composing")
                return self._held
            except Exception as err:  # the connection broke: whatever we held is gone with it
                log.warning("leadership check failed (%s); not leading until it succeeds", err)
                self._close()
                return False

    def _close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
        self._conn, self._held = None, False

    def close(self) -> None:
        with self._lock:
            self._close()


class Bus:
    """Publish small JSON notes to the other replicas; `on_note(note)` is called for theirs (in the
    listener thread: hand them to the event loop)."""

    def __init__(self, url: str, replica: str, on_note: Callable[[dict[str, Any]], None]) -> None:
        self.url = url if shared(url) else ""
        self.replica, self.on_note = replica, on_note
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._out: Any = None
        self._out_lock = threading.Lock()

    @property
    def active(self) -> bool:
        return bool(self.url)

    def start(self) -> None:
        if self.url:
            self._thread = threading.Thread(target=self._listen_forever, name="bus-listen", daemon=True)
            self._thread.start()

    def publish(self, note: dict[str, Any]) -> None:
        """Blocking I/O (call it from a worker thread). A failed publish is logged, not raised: the
        other replicas' polls find the work anyway."""
        if not self.url:
            return
        import psycopg

        payload = json.dumps({**note, "from": self.replica}, separators=(",", ":"))
        with self._out_lock:
            try:
                if self._out is None or self._out.closed:
                    self._out = psycopg.connect(libpq_url(self.url), autocommit=True, connect_timeout=5)
                self._out.execute("SELECT pg_notify(%s, %s)", (CHANNEL, payload))
            except Exception as err:
                log.warning("could not notify the other replicas (%s)", err)
                self._out = None

    def _listen_forever(self) -> None:
        import psycopg

        while not self._stop.is_set():
            try:
                with psycopg.connect(libpq_url(self.url), autocommit=True, connect_timeout=5) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    self.on_note({"kind": "relisten"})  # notes may have been missed while not listening
                    while not self._stop.is_set():
                        for notify in conn.notifies(timeout=0.5):
                            self._deliver(notify.payload)
            except Exception as err:
                if not self._stop.is_set():
                    log.warning("listening to the other replicas failed (%s); listening again", err)
                    self._stop.wait(1.0)

    def _deliver(self, payload: str) -> None:
        try:
            note = json.loads(payload)
        except ValueError:
            return
        if isinstance(note, dict) and note.get("from") != self.replica:
            self.on_note(note)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
        with self._out_lock:
            if self._out is not None:
                self._out.close()
