"""Reading what a run's sandbox could have written, as root, without trusting it.

A Task's files (its workspace, its $HOME) are hostile to agentd: any component of a path may be a
symlink to a host file (`~/.claude/projects/x -> /etc`), a FIFO that blocks a reader forever, or a
file of any size. `read_regular` walks the path one component at a time from a directory agentd
made, never following a symlink, and reads only a regular file, only up to a limit.
"""

from __future__ import annotations

import os
import pathlib
import stat

LIMIT = 64 * 1024 * 1024


def read_regular(base: pathlib.Path, relative: str, limit: int = LIMIT) -> bytes | None:
    """The bytes of base/relative when every component below `base` is a real directory and the last
    a regular file of at most `limit` bytes; None otherwise (missing, a symlink, a FIFO, too big)."""
    parts = [part for part in pathlib.PurePosixPath(relative).parts if part not in ("", ".")]
    if not parts or ".." in parts or parts[0] == "/":
        return None
    try:
        fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        for part in parts[:-1]:
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = inner
        leaf = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
    except OSError:
        os.close(fd)
        return None
    os.close(fd)
    try:
        info = os.fstat(leaf)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        chunks, left = [], limit + 1
        while left > 0 and (chunk := os.read(leaf, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        return data if len(data) <= limit else None
    except OSError:
        return None
    finally:
        os.close(leaf)


def list_dir(base: pathlib.Path, relative: str) -> list[str]:
    """The names in base/relative when every component is a real directory (no symlink followed)."""
    parts = [part for part in pathlib.PurePosixPath(relative).parts if part not in ("", ".")]
    if ".." in parts:
        return []
    try:
        fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return []
    try:
        for part in parts:
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = inner
        return sorted(os.listdir(fd))
    except OSError:
        return []
    finally:
        os.close(fd)
