"""Run slots: agentd runs at most `capacity` runs at once, each in a slot 0..capacity-1 of its own.

As root (without a configured session_user) slot i runs as uid = gid = run_uid_base + i, so what the
kernel counts per user (RLIMIT_NPROC, signals, files) is per run, and its cgroup (agentd/cgroups.py)
holds the whole run. A run takes the lowest free slot when it starts; the slot, uid and gid are in
its spec, so a restarted agentd knows which slots are taken.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import time
from collections.abc import Callable, Iterable


def slotted(session_user: str, euid: int) -> bool:
    """Whether each run slot runs as a uid of its own: as root, unless one session_user is configured."""
    return euid == 0 and not session_user


def lowest_free(taken: Iterable[int], count: int) -> int | None:
    """The lowest slot of 0..count-1 not in `taken`; None when all are."""
    used = set(taken)
    return next((i for i in range(count) if i not in used), None)


def ids(base: int, slot: int) -> tuple[int, int]:
    """The uid and gid of a slot."""
    return base + slot, base + slot


def owned_ids(base: int, count: int, user_of: Callable[[int], str], group_of: Callable[[int], str]) -> list[str]:
    """The slot ids an existing user or group already has, described ("uid 2000000001 is user x");
    `user_of`/`group_of` answer a name or "" for an id."""
    found = []
    for slot in range(count):
        uid, gid = ids(base, slot)
        if user := user_of(uid):
            found.append(f"uid {uid} is user {user!r}")
        if group := group_of(gid):
            found.append(f"gid {gid} is group {group!r}")
    return found


def processes_of(uid: int, proc: pathlib.Path = pathlib.Path("/proc")) -> list[int]:
    """The pids of live processes any of whose uids (real, effective, saved) is `uid`."""
    found = []
    for entry in proc.glob("[0-9]*"):
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("Uid:"):
                if str(uid) in line.split()[1:4]:
                    found.append(int(entry.name))
                break
    return found


def kill_leftovers(uid: int, timeout: float = 5.0) -> int:
    """SIGKILL what a previous run of this slot left behind (outside a sandbox's PID namespace nothing
    else ends it); answers how many there were."""
    deadline = time.monotonic() + timeout
    first = left = processes_of(uid)
    while left and time.monotonic() < deadline:
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)
        left = processes_of(uid)
    return len(first)
