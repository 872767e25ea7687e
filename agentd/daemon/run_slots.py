"""Run slots: agentd runs at most `capacity` runs at once, each in a slot 0..capacity-1 of its own.

As root (without a configured session_user) slot i runs as uid = gid = uid_base + i (config.py), so what the
kernel counts per user (RLIMIT_NPROC, signals, files) is per run, and its cgroup (agentd/daemon/cgroups.py)
holds the whole run. A run takes the lowest free slot when it starts; the slot, uid and gid are in
its spec, so a restarted agentd knows which slots are taken.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pathlib
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterable

from agentd.daemon import cgroups, run_disk
from agentd.daemon.config import AgentConfig
from agentd.errors import CgroupsUnavailable, RunRefused

log = logging.getLogger("agentd.runs")


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


class Places:
    """What a run slot holds besides its uid: its cgroups, and the run filesystems in the work dir."""

    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        self.hierarchy = _hierarchy(config)
        self.group = cgroups.group_name(config.name, config.instance)
        # A slot is readied when its run ends (`release`), in a thread, so the next run's start does
        # not wait for it (the /proc scan and the cgroups: 3-5 ms). Its lock orders that thread
        # against `take`: a slot a run has taken since is never readied under it.
        self._locks = [threading.Lock() for _ in range(config.capacity)]
        self._in_use: set[int] = set()
        self._fresh: set[int] = set()  # readied since their last run ended, not taken since

    def take(self, taken: Iterable[int]) -> tuple[int, list[str]]:
        """The lowest free slot, readied, and its cgroup directories; RunRefused when there is none."""
        index = lowest_free(taken, self.config.capacity)
        if index is None:
            raise RunRefused("at_capacity")
        with self._locks[index]:
            self._in_use.add(index)
            if index in self._fresh:
                self._fresh.discard(index)
                return index, self._dirs(index)
            try:
                return index, self.ready(index)
            except OSError as err:
                log.error("run slot %d: cannot make its cgroups: %s", index, err)
                raise RunRefused(f"cgroup_error: {err}") from err

    def release(self, index: int) -> threading.Thread | None:
        """Slot `index`'s run ended (its supervisor wrote the exit record: it starts no more commands):
        ready the slot for the next run now, in a thread (answered). Nothing when a run took it again
        meanwhile; a failure leaves the readying to the next run's `take`. None for no slot (-1, or
        one past a lowered capacity)."""
        if not 0 <= index < len(self._locks):
            return None
        with self._locks[index]:
            self._in_use.discard(index)
        thread = threading.Thread(target=self._ready_ahead, args=(index,), name=f"ready-slot-{index}", daemon=True)
        thread.start()
        return thread

    def _ready_ahead(self, index: int) -> None:
        with self._locks[index]:
            if index in self._in_use or index in self._fresh:
                return
            try:
                self.ready(index)
            except OSError as err:
                log.warning("run slot %d: cannot ready it ahead (the next run will): %s", index, err)
                return
            self._fresh.add(index)

    def _dirs(self, index: int) -> list[str]:
        if self.hierarchy is None:
            return []
        return [str(d) for d in cgroups.slot_dirs(self.hierarchy, self.group, index)]

    def ready(self, index: int) -> list[str]:
        """Ready slot `index` for a new run: what a previous run of it left is killed, its cgroups made
        afresh with this agent's limits. Answers the cgroup directories (none without cgroups); OSError
        when the kernel refuses them."""
        if slotted(self.config.session_user, os.geteuid()):
            uid, _ = ids(self.config.uid_base, index)
            if killed := kill_leftovers(uid):
                log.warning("run slot %d: killed %d processes a previous run left behind", index, killed)
        if self.hierarchy is None:
            return []
        limits = cgroups.Limits(self.config.run_memory_bytes, self.config.run_processes)
        return [str(d) for d in cgroups.prepare_slot(self.hierarchy, self.group, index, limits)]

    def release_disks(self, live: set[str]) -> None:
        """Unmount and delete the filesystems of runs that are over (a supervisor died, or agentd stopped
        before it cleaned up)."""
        if self.config.keep_workspaces:
            return
        for workspace_dir in run_disk.leftovers(self.config.work_dir, live):
            log.warning("run %s: releasing the workspace mounts its supervisor left behind", workspace_dir.name)
            run_disk.release(workspace_dir)
            shutil.rmtree(workspace_dir, ignore_errors=True)

    def close(self) -> None:
        """Remove this agent's (empty) cgroups: no run is live."""
        if self.hierarchy is not None:
            with contextlib.ExitStack() as held:
                for lock in self._locks:
                    held.enter_context(lock)
                self._fresh.clear()
                cgroups.remove_agent(self.hierarchy, self.group)


def _hierarchy(config: AgentConfig) -> cgroups.Hierarchy | None:
    """Where the runs' cgroups go (agentd/daemon/isolation.py checked at start that agentd can make them)."""
    if not config.cgroups or os.geteuid() != 0:
        return None
    try:
        return cgroups.detect()
    except CgroupsUnavailable as err:
        log.warning("runs get no cgroups: %s", err)
        return None
