"""Looking for a secret in every file under a folder, the way an attacker with the disk would.

A file is read in chunks and only where it holds data (`SEEK_DATA`/`SEEK_HOLE`): agentd keeps formatted spare
run-disk images (`<work>/.spare-disks/*.disk`, sparse, 32 GiB apparent) and a whole read of one does not fit in
memory. Nothing is skipped by name: an image is scanned like any other file, its written blocks only.
"""

from __future__ import annotations

import errno
import os
import pathlib

CHUNK = 4 << 20


def _extents(fd: int, size: int) -> list[tuple[int, int]]:
    """The (start, end) byte ranges of `fd` that hold data; the whole file where the filesystem cannot say."""
    found, offset = [], 0
    try:
        while offset < size:
            start = os.lseek(fd, offset, os.SEEK_DATA)
            end = os.lseek(fd, start, os.SEEK_HOLE)
            found.append((start, end))
            offset = end
    except OSError as err:  # ENXIO: no data after offset; EINVAL: no SEEK_DATA support here
        if err.errno != errno.ENXIO:
            return [(0, size)]
    return found


def file_holds(path: pathlib.Path, needles: list[bytes]) -> bool:
    """True when one of `needles` is in the file's data, a needle split across two chunks included."""
    overlap = max((len(n) for n in needles), default=1) - 1
    with open(path, "rb") as file:
        fd = file.fileno()
        for start, end in _extents(fd, os.fstat(fd).st_size):
            tail, offset = b"", start
            while offset < end:
                data = tail + os.pread(fd, min(CHUNK, end - offset), offset)
                if not data[len(tail) :]:
                    break
                if any(n in data for n in needles):
                    return True
                offset += len(data) - len(tail)
                tail = data[-overlap:] if overlap else b""
    return False


def files_holding(root: pathlib.Path, needles: list[bytes]) -> list[str]:
    """Every regular file under `root` that holds one of `needles` (runs' files going away meanwhile are passed)."""
    found = []
    for folder, _, names in os.walk(root):
        for name in names:
            path = pathlib.Path(folder, name)
            try:
                if path.is_file() and not path.is_symlink() and file_holds(path, needles):
                    found.append(str(path))
            except OSError:
                continue
    return found
