"""The store: engine, one transaction per unit of work, schema migrations.

Database work is synchronous SQLAlchemy run on a small thread pool, so the
asyncio server never blocks on the database. SQLite gets one writer thread and
`BEGIN IMMEDIATE` (pysqlite's deferred BEGIN loses updates across processes).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as dt
import functools
import logging
import pathlib
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from controlplane.store import locks
from controlplane.store.metric_hooks import metrics
from controlplane.store.wakeups import CHANGED, ChangeWakeups

T = TypeVar("T")
log = logging.getLogger("drover.store")
RETRIES = 8
"""Times a transaction is run again after a deadlock, a serialization failure or a busy SQLite database
(pauses doubling from 20 ms to 1 s between them: about 4 s in all) before its error reaches the caller."""
MIGRATIONS = pathlib.Path(__file__).parent / "migrations"
SCHEMA_LOCK = 0x44524F57
"""The advisory lock held (PostgreSQL) while the schema is migrated and the first tokens are made."""


def aware(value: dt.datetime | None) -> dt.datetime | None:
    """SQLite hands back naive datetimes; every stored time is UTC."""
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=dt.UTC)
    return value


def make_engine(url: str, *, read_only: bool = False) -> Engine:
    """An engine; on SQLite every write transaction begins IMMEDIATE, and a `read_only` engine's
    transactions begin DEFERRED so they read a snapshot beside the writer (WAL) instead of queueing."""
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Any) -> None:
            conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

        return engine
    # No ping before each use (a round trip per transaction): a connection the server dropped (a
    # PostgreSQL restart) fails its transaction's first statement, and the store runs that transaction
    # again on a fresh one (`fresh_retry`); SQLAlchemy then drops every older pooled connection.
    engine = create_engine(url, pool_size=10, max_overflow=10)

    @event.listens_for(engine, "after_cursor_execute")
    def _ran(*_args: Any) -> None:
        _statements.ran = True

    return engine


_statements = threading.local()
"""Whether this thread's current transaction has run a statement (`fresh_retry`)."""


def fresh_retry(err: BaseException) -> bool:
    """Whether a transaction that failed with `err` may run again as if new: its connection was found
    dropped before any of its statements ran, so nothing of it reached the database. (A connection lost
    later, at a commit say, is not retried: the transaction may have committed.)"""
    return isinstance(err, DBAPIError) and err.connection_invalidated and not getattr(_statements, "ran", False)


def reconnecting(work: Callable[[], T]) -> T:
    """work() (one transaction, or a read), run once more on a fresh connection when its connection was
    found dropped before any of its statements ran (`fresh_retry`)."""
    for attempt in range(2):
        _statements.ran = False
        try:
            return work()
        except DBAPIError as err:
            if attempt or not fresh_retry(err):
                raise
            metrics.on_store_retry("reconnect")
    raise AssertionError("unreachable")


def head_revision() -> str:
    """The newest migration's revision, from the file names: `versions/NNNN_what.py` holds revision "NNNN"
    (tests/controlplane/store/test_store.py holds every file to it and compares with alembic's head)."""
    return max(p.name.split("_", 1)[0] for p in (MIGRATIONS / "versions").glob("[0-9]*_*.py"))


def revision(engine: Engine) -> str:
    """The database's schema revision; "" before the first migration."""
    with engine.connect() as conn:
        try:
            return str(conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar() or "")
        except DBAPIError:  # no alembic_version table yet
            return ""


def migrate(engine: Engine) -> None:
    """Create or upgrade the schema to the newest revision. A database already there is only read:
    importing alembic would cost a short-lived command (`controlplane token create`) a few tenths of a
    second."""
    if revision(engine) == head_revision():
        return
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":  # replicas starting together migrate one after another
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({SCHEMA_LOCK})")
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


class Store:
    """Runs units of work: `await store.run(fn, *args)` calls fn(session, *args) in one transaction."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)
        workers = 1 if url.startswith("sqlite") else 8
        self._executor = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="store")
        # Reads that must not wait behind writes (checking a token on every call).
        self._read_engine = make_engine(url, read_only=True) if url.startswith("sqlite") else self.engine
        self._reads = sessionmaker(self._read_engine, expire_on_commit=False)
        self._read_executor = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="store-read")
        self.holder = uuid.uuid4().hex[:12]
        """This process's name among the holders of meter escrow slices (one per writer thread)."""
        self.wakeups = ChangeWakeups()
        """Who waits for a Change's next events; told after each `run` that appended some commits."""

    def migrate(self) -> None:
        migrate(self.engine)

    def transaction(self, fn: Callable[..., T], *args: Any, retries: int = RETRIES) -> T:
        """fn(session, *args) in one transaction. A deadlock victim, a serialization failure or a busy
        SQLite database rolled it all back: it runs again from the start, up to `retries` times
        (`controlplane.store.locks`), and only then does the error reach the caller."""
        return self._transaction(fn, *args, retries=retries)[0]

    def _transaction(self, fn: Callable[..., T], *args: Any, retries: int = RETRIES) -> tuple[T, set[str]]:
        """The transaction's answer and the Changes it appended events to (`wakeups.note_change`)."""
        for attempt in range(retries + 1):
            _statements.ran = False
            try:
                with self.sessions.begin() as session:
                    # Two transactions of one thread never overlap: a thread's escrow slices are its own.
                    session.info["holder"] = f"{self.holder}.{threading.get_ident()}"
                    result = fn(session, *args)
                return result, session.info.get(CHANGED, set())
            except DBAPIError as err:
                reason = "reconnect" if fresh_retry(err) else locks.retry_reason(err)
                if reason is None or attempt == retries:
                    raise
                metrics.on_store_retry(reason)
                log.info("%s: %s; running the transaction again", getattr(fn, "__name__", "unit"), reason)
                time.sleep(locks.pause(attempt))
        raise AssertionError("unreachable")

    async def run(self, fn: Callable[..., T], *args: Any, retries: int = RETRIES) -> T:
        """fn(session, *args) in one write transaction on the writer's threads; watchers of the Changes
        it appended events to are woken once it has committed."""
        loop = asyncio.get_running_loop()
        call = functools.partial(self._transaction, fn, *args, retries=retries)
        result, changed = await loop.run_in_executor(self._executor, call)
        if changed:
            self.wakeups.committed(changed)
        return result

    def read_now(self, fn: Callable[..., T], *args: Any) -> T:
        """fn(session, *args) in a read-only transaction, in this thread (a metrics scrape)."""
        return self._read_transaction(fn, *args)

    def _read_transaction(self, fn: Callable[..., T], *args: Any) -> T:
        def read() -> T:
            with self._reads() as session:
                try:
                    return fn(session, *args)
                finally:
                    session.rollback()

        return reconnecting(read)

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        """fn(session, *args) in a read-only transaction on its own threads: it never waits for a writer."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._read_executor, self._read_transaction, fn, *args)

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        self._read_executor.shutdown(wait=True)
        self.engine.dispose()
        if self._read_engine is not self.engine:
            self._read_engine.dispose()


def sqlite_url(data_dir: pathlib.Path) -> str:
    return f"sqlite:///{(data_dir / 'drover.db').resolve()}"


Transaction = Session
