"""Token files: one token per file, mode 0600, created with O_EXCL. A token file that exists is never
overwritten: it may hold the only copy of a token another database still accepts."""

from __future__ import annotations

import contextlib
import itertools
import os
import pathlib
import re
from collections.abc import Callable, Iterator

import sqlalchemy

from drover.errors import AlreadyExists

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def database_label(url: str) -> str:
    """A file-name-safe name of a database, from its URL without user or password:
    `postgresql-db.internal-5432-drover`, `sqlite-drover`."""
    parsed = sqlalchemy.engine.make_url(url)
    database = parsed.database or ""
    if parsed.get_backend_name() == "sqlite":
        database = pathlib.PurePath(database).stem
    parts = (parsed.get_backend_name(), parsed.host or "", str(parsed.port or ""), database)
    return "-".join(_UNSAFE.sub("-", p).strip("-.") for p in parts if p)


def candidates(directory: pathlib.Path, name: str, label: str) -> Iterator[pathlib.Path]:
    """Where a new `name` token goes, in order: name.token, then name.LABEL.token, name.LABEL.2.token, ..."""
    yield directory / f"{name}.token"
    yield directory / f"{name}.{label}.token"
    for n in itertools.count(2):
        yield directory / f"{name}.{label}.{n}.token"


def write_beside(directory: pathlib.Path, name: str, label: str, token: str) -> pathlib.Path:
    """Write `token` to the first of `candidates` that does not exist (O_EXCL: no race with another
    writer) and return that path; the files before it are left as they are."""
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    for path in candidates(directory, name, label):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
        _write(fd, token)
        os.close(fd)
        return path
    raise AssertionError("unreachable: the candidates never end")


@contextlib.contextmanager
def token_file(path: pathlib.Path, *, replace: bool = False) -> Iterator[Callable[[str], None]]:
    """Yield `write(token)` for a new file at `path`, mode 0600. The file is created (O_EXCL) before
    the body runs, so a path that exists is refused (AlreadyExists) before a token is made for it. If
    the body raises, the file is removed. `replace` (`--force`) writes beside and renames over `path`
    once the body succeeded. `write` may be called again (a transaction run again): the last wins."""
    target = path.with_name(f".{path.name}.{os.getpid()}.new") if replace else path
    if not path.parent.exists():
        path.parent.mkdir(mode=0o700, parents=True)
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise AlreadyExists(
            f"{path} exists; a token file is never overwritten (choose another --out, or --force to replace it)",
            field="out",
        ) from None
    try:
        yield lambda token: _write(fd, token)
    except BaseException:
        os.close(fd)
        target.unlink(missing_ok=True)
        raise
    os.close(fd)
    if replace:
        os.replace(target, path)


def _write(fd: int, token: str) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, (token + "\n").encode(), 0)
    os.fsync(fd)
