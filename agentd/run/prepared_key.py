"""The key of a prepared workspace: what a run's setup depends on, hashed. Two runs with one key would
get the same tree from setup, so the second may start from a copy of the first's (prepared_cache.py).

The key covers the repository and branch, the setup commands, the project's env and the contents of
the files the project names in `cache_key_files` (`requirements*.txt`, `uv.lock`, ...), read from
the checked-out tree. That tree is the Task's content: only regular files inside it are read (never
a symlink, nor anything below one), each file and their number bounded."""

from __future__ import annotations

import fnmatch
import hashlib
import os
import pathlib
import stat
from collections.abc import Iterator, Mapping, Sequence

MAX_FILE_BYTES = 16 << 20
"""A key file larger than this counts by its size and a hash of its first MAX_FILE_BYTES."""
MAX_FILES = 1000
"""Files matched past this many are not read (the key says how many there were)."""
VERSION = "1"
"""Changes when what the key covers changes, so older entries stop matching."""


def cache_key(
    repo: str,
    branch: str,
    setup: Sequence[str],
    env: Mapping[str, str],
    tree: pathlib.Path,
    patterns: Sequence[str],
) -> str:
    """The hex sha256 of everything a prepared workspace depends on."""
    digest = hashlib.sha256()

    def add(*parts: str | bytes) -> None:
        for part in parts:
            data = part.encode() if isinstance(part, str) else part
            digest.update(len(data).to_bytes(8, "big") + data)  # length-prefixed: no two inputs collide

    add("drover-prepared", VERSION, repo, branch, str(len(setup)), *setup, str(len(env)))
    for name in sorted(env):
        add(name, env[name])
    add(str(len(patterns)), *patterns)
    files = list(key_files(tree, patterns))
    add(str(len(files)))
    for relative in files[:MAX_FILES]:
        add(relative, _file_digest(tree / relative))
    return digest.hexdigest()


def key_files(tree: pathlib.Path, patterns: Sequence[str]) -> Iterator[str]:
    """The regular files under `tree` (relative, sorted) that match any of `patterns`, walked without
    following symlinks: a link to /etc/shadow, or a linked directory, is never read."""
    compiled = [pattern.split("/") for pattern in patterns if _safe(pattern)]
    if not compiled:
        return
    for parent, dirs, files in os.walk(tree, followlinks=False):
        dirs.sort()
        base = pathlib.PurePosixPath(os.path.relpath(parent, tree))
        rel_parts = () if str(base) == "." else base.parts
        if ".git" in rel_parts:
            continue
        for name in sorted(files):
            parts = (*rel_parts, name)
            if any(matches(parts, pattern) for pattern in compiled):
                full = os.path.join(parent, name)
                if stat.S_ISREG(os.lstat(full).st_mode):
                    yield "/".join(parts)


def matches(parts: Sequence[str], pattern: Sequence[str]) -> bool:
    """Whether a path's components match a pattern's (fnmatch each; `**` spans any number of them)."""
    if not pattern:
        return not parts
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        return any(matches(parts[i:], rest) for i in range(len(parts) + 1))
    return bool(parts) and fnmatch.fnmatchcase(parts[0], head) and matches(parts[1:], rest)


def _safe(pattern: str) -> bool:
    parts = pattern.split("/")
    return bool(pattern) and not pattern.startswith("/") and not any(p in ("", ".", "..") for p in parts)


def _file_digest(path: pathlib.Path) -> str:
    """sha256 of the file's first MAX_FILE_BYTES and its size, opened without following a symlink
    (one swapped in since the walk fails to open, and counts as absent)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return "absent"
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            return "absent"
        digest = hashlib.sha256(f.read(MAX_FILE_BYTES))
    return f"{info.st_size}:{digest.hexdigest()}"
