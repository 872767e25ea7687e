"""The object store, behind a small interface (put, get, exists): a directory for a single node on
SQLite, the database itself when it is PostgreSQL, so every replica reads what any replica wrote."""

from __future__ import annotations

import os
import pathlib
import tempfile
from typing import Any, Protocol

from sqlalchemy import select
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Engine

from controlplane.store.engine import reconnecting
from controlplane.store.models import StoredObject
from drover.errors import NotFound


class ObjectStore(Protocol):
    def put(self, key: str, data: bytes) -> None: ...

    def get(self, key: str) -> bytes: ...

    def exists(self, key: str) -> bool: ...


def packet_key(project: str, change_id: str, task_id: str, context_hash: str) -> str:
    """Where a run's Context Packet is kept, by its hash."""
    return f"context/{project}/{change_id}/{task_id}/{context_hash}.json"


def tool_log_key(project: str, change_id: str, task_id: str, run_id: str) -> str:
    """Where a run's full tool inputs and outputs are kept, written when it ends (until then its
    `tool_log_entries` rows hold them)."""
    return f"context/{project}/{change_id}/{task_id}/tools-{run_id}.json"


def session_key(project: str, change_id: str, task_id: str, run_id: str) -> str:
    """A parked session's state (gzip), read when the run that resumes it starts."""
    return f"sessions/{project}/{change_id}/{task_id}/{run_id}.gz"


def patch_key(project: str, change_id: str, task_id: str, changeset_id: str) -> str:
    """Where a ChangeSet's patch is kept."""
    return f"changesets/{project}/{change_id}/{task_id}/{changeset_id}.patch"


class DirectoryStore:
    """Keys are relative posix paths (context/<project>/<change>/<task>/...); writes are atomic."""

    def __init__(self, root: pathlib.Path) -> None:
        self.root = root
        # The control plane's alone: objects are written 0600 (mkstemp) below a 0700 root.
        root.mkdir(parents=True, exist_ok=True)
        os.chmod(root, 0o700)

    def _path(self, key: str) -> pathlib.Path:
        _check(key)
        return self.root.joinpath(*pathlib.PurePosixPath(key).parts)

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            raise NotFound(f"no object {key!r}", field="key") from None

    def exists(self, key: str) -> bool:
        return self._path(key).exists()


class DatabaseStore:
    """Objects as rows of the `objects` table, each written in a transaction of its own (an object is
    written before the state change that refers to it commits, as with the directory)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def put(self, key: str, data: bytes) -> None:
        _check(key)
        upsert = postgresql.insert(StoredObject).values(key=key, data=data)

        def write() -> None:
            with self.engine.begin() as conn:
                conn.execute(upsert.on_conflict_do_update(index_elements=["key"], set_={"data": data}))

        reconnecting(write)  # each on a fresh connection when the server had dropped the pooled one

    def get(self, key: str) -> bytes:
        data = reconnecting(lambda: self._scalar(select(StoredObject.data).where(StoredObject.key == key)))
        if data is None:
            raise NotFound(f"no object {key!r}", field="key")
        return bytes(data)

    def exists(self, key: str) -> bool:
        return reconnecting(lambda: self._scalar(select(StoredObject.key).where(StoredObject.key == key))) is not None

    def _scalar(self, query: Any) -> Any:
        with self.engine.connect() as conn:
            return conn.scalar(query)


def _check(key: str) -> None:
    parts = pathlib.PurePosixPath(key).parts
    if not parts or key.startswith("/") or ".." in parts:
        raise ValueError(f"bad object key {key!r}")
