"""agentd's prepared workspaces: per project, the tree a run's setup left (a venv, node_modules, an
editable install), kept under its key (prepared_key.py) so the next run with that key starts from a
copy and skips setup.

    <prepared_cache_dir>/<project>/<key>/entry.json   the marker: written last, names the tree's listing
    <prepared_cache_dir>/<project>/<key>/tree/        the prepared worktree (no git directory)
    <prepared_cache_dir>/<project>/.new-<key>-*/      an entry being written (never read)

An entry is written under a temporary name and renamed into place when complete, so a reader sees a
whole entry or none. Its marker holds the size, count and sha256 of the tree's listing (path, type,
size, mode, modification time, link target of every file): a lookup walks the tree and compares, so
an entry damaged or half-deleted since is never used, and is removed. Checking costs a walk, not a
read of every byte. The cache is bounded by `max_bytes` (its trees' file sizes); storing evicts the
least recently used entries first, never one a live run holds (`hold`: a shared lock on its marker,
which a run whose workspace is an overlay of the entry keeps until it ends)."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import pathlib
import re
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence

MARKER = "entry.json"
TREE = "tree"
NEW = ".new-"
STALE_SECONDS = 3600.0
"""A `.new-*` directory this old is a store that died half-way (one in progress takes seconds)."""
_PROJECT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_KEY = re.compile(r"[0-9a-f]{64}")


@dataclasses.dataclass(frozen=True)
class Listing:
    """What an entry's marker says of its tree."""

    bytes: int
    files: int
    sha256: str


@dataclasses.dataclass(frozen=True)
class Entry:
    """A complete prepared workspace."""

    path: pathlib.Path
    key: str
    commit: str
    """The commit whose checkout setup ran on."""
    tracked: tuple[str, ...]
    """The files git tracked at that commit (a run at another commit removes those it does not track)."""
    origin: str
    """Where the worktree was when setup ran: absolute paths setup wrote (a venv's scripts) name it."""
    listing: Listing

    @property
    def tree(self) -> pathlib.Path:
        return self.path / TREE


def listing(tree: pathlib.Path) -> Listing:
    """The listing of `tree`, walked without following symlinks."""
    digest, size, count = hashlib.sha256(), 0, 0
    for parent, dirs, files in os.walk(tree, followlinks=False):
        dirs.sort()
        for name in sorted(dirs + files):
            full = os.path.join(parent, name)
            info = os.lstat(full)
            link = os.readlink(full) if stat.S_ISLNK(info.st_mode) else ""
            is_dir = stat.S_ISDIR(info.st_mode)
            size += 0 if is_dir else info.st_size
            count += 1
            mtime = 0 if is_dir else info.st_mtime_ns  # a directory's time moves with what is in it
            row = f"{os.path.relpath(full, tree)}\0{info.st_mode:o}\0{info.st_size}\0{mtime}\0{link}\n"
            digest.update(row.encode(errors="surrogateescape"))
    return Listing(size, count, digest.hexdigest())


def copy_tree(source: pathlib.Path, target: pathlib.Path) -> None:
    """`source`'s contents into the existing directory `target`, owners, modes and times kept; reflinks
    where the filesystem has them (btrfs, xfs), else a copy. OSError when it fails."""
    done = subprocess.run(
        ["cp", "-a", "--reflink=auto", "--", f"{source}/.", str(target)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        raise OSError(f"cp failed: {done.stderr.strip()[-500:] or done.returncode}")


class PreparedCache:
    """One agentd's cache of prepared workspaces under `root`, at most `max_bytes` of trees."""

    def __init__(self, root: pathlib.Path, max_bytes: int) -> None:
        self.root, self.max_bytes = root, max_bytes

    def project_dir(self, project: str) -> pathlib.Path:
        """The project's directory: its name when that is a plain one, else a hash of it."""
        if _PROJECT_NAME.fullmatch(project):
            return self.root / project
        return self.root / ("~" + hashlib.sha256(project.encode()).hexdigest()[:32])

    def lookup(self, project: str, key: str) -> Entry | None:
        """The complete, intact entry of `key`, marked used now; None when there is none. An entry
        whose tree no longer matches its marker is removed."""
        if not _KEY.fullmatch(key):
            return None
        path = self.project_dir(project) / key
        entry = read_entry(path)
        if entry is None:
            if path.exists():
                _remove(path)
            return None
        with contextlib.suppress(OSError):
            os.utime(path / MARKER)  # the LRU clock
        return entry

    def store(
        self, project: str, key: str, tree: pathlib.Path, commit: str, tracked: Sequence[str], origin: str
    ) -> Entry | None:
        """Keep a copy of `tree` (a worktree just prepared) as the entry of `key`, then evict down to
        max_bytes. None when it is larger than the whole cache, or another run stored `key` first."""
        if not _KEY.fullmatch(key) or self.max_bytes <= 0:
            return None
        project_dir = self.project_dir(project)
        project_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.root.chmod(0o700)  # nothing of the cache is for a run's user
        scratch = pathlib.Path(tempfile.mkdtemp(prefix=f"{NEW}{key[:16]}-", dir=project_dir))
        try:
            (scratch / TREE).mkdir()
            copy_tree(tree, scratch / TREE)
            seen = listing(scratch / TREE)
            if seen.bytes > self.max_bytes:
                return None
            marker = {"key": key, "commit": commit, "tracked": list(tracked), "origin": origin}
            marker.update(dataclasses.asdict(seen))
            (scratch / MARKER).write_text(json.dumps(marker))
            try:
                os.rename(scratch, project_dir / key)
            except OSError:  # stored meanwhile by another run
                return None
        finally:
            if scratch.exists():
                _remove(scratch)
        self.evict(keep=project_dir / key)
        return self.lookup(project, key)

    def entries(self) -> Iterator[tuple[pathlib.Path, float, int]]:
        """Every entry's directory, its last use and its size as its marker states (unread ones: 0)."""
        for project_dir in sorted(p for p in self.root.glob("*") if p.is_dir()):
            for path in project_dir.iterdir():
                if path.name.startswith(NEW):
                    continue
                try:
                    used = (path / MARKER).stat().st_mtime
                    size = int(json.loads((path / MARKER).read_text()).get("bytes", 0))
                except (OSError, ValueError, AttributeError):
                    used, size = 0.0, 0
                yield path, used, size

    def evict(self, keep: pathlib.Path | None = None) -> list[pathlib.Path]:
        """Remove least recently used entries (never `keep`, nor one a run holds) until the rest fit."""
        if not self.root.is_dir():
            return []
        self.sweep()
        found = sorted(self.entries(), key=lambda e: e[1])
        total = sum(size for _, _, size in found)
        removed = []
        for path, _, size in found:
            if total <= self.max_bytes:
                break
            if path == keep or not _evict(path):
                continue
            removed.append(path)
            total -= size
        return removed

    def sweep(self, older_than: float = STALE_SECONDS) -> None:
        """Remove what stores that died half-way left (`.new-*` older than `older_than` seconds)."""
        now = time.time()
        for scratch in self.root.glob(f"*/{NEW}*"):
            with contextlib.suppress(OSError):
                if now - scratch.lstat().st_mtime > older_than:
                    shutil.rmtree(scratch, ignore_errors=True)

    def used_bytes(self) -> int:
        return sum(size for _, _, size in self.entries()) if self.root.is_dir() else 0


def read_entry(path: pathlib.Path) -> Entry | None:
    """The entry at `path` when its marker is whole and its tree matches it, else None."""
    try:
        marker = json.loads((path / MARKER).read_text())
        claimed = Listing(int(marker["bytes"]), int(marker["files"]), str(marker["sha256"]))
        entry = Entry(
            path,
            str(marker["key"]),
            str(marker["commit"]),
            tuple(str(p) for p in marker["tracked"]),
            str(marker["origin"]),
            claimed,
        )
        tree_info = os.lstat(path / TREE)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not stat.S_ISDIR(tree_info.st_mode) or entry.key != path.name or listing(entry.tree) != claimed:
        return None
    return entry


def hold(entry: Entry) -> int | None:
    """A descriptor holding a shared lock on the entry (eviction passes it by) until it is closed;
    None when the entry was evicted meanwhile."""
    return hold_path(entry.path)


def hold_path(path: pathlib.Path) -> int | None:
    """hold, for the entry at `path`."""
    try:
        fd = os.open(path / MARKER, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    fcntl.flock(fd, fcntl.LOCK_SH)
    try:
        still = os.stat(path / MARKER).st_ino == os.fstat(fd).st_ino
    except OSError:
        still = False
    if not still:
        os.close(fd)
        return None
    return fd


def _evict(path: pathlib.Path) -> bool:
    """Remove the entry at `path` unless a run holds it; whether it was removed."""
    try:
        fd = os.open(path / MARKER, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        _remove(path)  # no marker: not an entry anyone uses
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    try:
        _remove(path)  # renamed aside under the lock: a run that locks after finds it gone
    finally:
        os.close(fd)
    return True


def _remove(path: pathlib.Path) -> None:
    """Rename aside first, so a half-removed entry is never found under its key."""
    aside = path.with_name(f"{NEW}gone-{path.name[:16]}-{os.getpid()}-{id(path)}")
    try:
        os.rename(path, aside)
    except OSError:
        aside = path
    shutil.rmtree(aside, ignore_errors=True)
