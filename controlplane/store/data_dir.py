"""Where a control plane keeps its state, and opening it: the data directory (database, tokens, objects,
mirrors) and the database in it, SQLite unless a PostgreSQL URL is given. The token and project commands
open the store from here without importing the server."""

from __future__ import annotations

import dataclasses
import fcntl
import os
import pathlib

from controlplane.store.engine import Store, sqlite_url


@dataclasses.dataclass(frozen=True)
class DataDir:
    """What every `controlplane` command is given: `--data-dir` and `--database-url`."""

    data_dir: pathlib.Path = pathlib.Path(".drover")
    """Holds the SQLite database, the tokens and the object store."""
    database_url: str = ""
    """SQLAlchemy URL; empty: SQLite at <data_dir>/drover.db."""

    @property
    def url(self) -> str:
        return self.database_url or sqlite_url(self.data_dir)


def open_store(where: DataDir) -> Store:
    """The store, migrated. The data directory (database, tokens, objects, mirrors) is the control
    plane's alone: mode 0700, and the SQLite files 0600."""
    where.data_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(where.data_dir, 0o700)
    store = Store(where.url)
    store.migrate()
    if not where.database_url:
        for suffix in ("", "-wal", "-shm"):
            db = where.data_dir / f"drover.db{suffix}"
            if db.exists():
                os.chmod(db, 0o600)
    return store


def lock_data_dir(data_dir: pathlib.Path) -> int:
    """Hold the data directory for this process's life: a second control plane on the same directory
    (the same SQLite database, tokens and objects) refuses to start instead of serving beside it."""
    data_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(data_dir / "controlplane.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise SystemExit(
            f"controlplane: another control plane (pid {holder}) is serving from {data_dir}; "
            "stop it first, or give this one its own --data-dir"
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    return fd
