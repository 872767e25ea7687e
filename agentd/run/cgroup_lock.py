"""The kernel's wait before a cgroup migration, started ahead of a run's command.

Moving a process between cgroups takes a host-wide lock (cgroup_threadgroup_rwsem) whose first writer
after an idle spell waits for an RCU grace period: 5-15 ms on the development host (cgroup v1, kernel
6.18), and the launcher's join into its run's groups (agentd/run/launcher.c) was that writer on every
run's start. A writer within about 15 ms of the last one does not wait. So the supervisor starts that
wait itself, beside the workspace's setup and bubblewrap's (`warm`).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import threading
from collections.abc import Sequence


def own_group(slot_dir: str, self_cgroup: str, unified: bool) -> pathlib.Path | None:
    """The directory of the group this process is in, in the hierarchy of `slot_dir` (a slot_dirs()
    path: <mount>/drover/<group>/slot-<i>), from `self_cgroup` (the text of /proc/self/cgroup). A v1
    hierarchy is the line listing the controllers its mount is named for ("memory", "cpu,cpuacct");
    v2's is the "0::" line. None when no line names it."""
    mount = pathlib.Path(slot_dir).parents[2]
    wanted = set(mount.name.split(","))
    for line in self_cgroup.splitlines():
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if (number == "0" and not controllers) if unified else set(controllers.split(",")) == wanted:
            inside = pathlib.PurePosixPath(path)
            return None if not inside.is_absolute() or ".." in inside.parts else mount / path.lstrip("/")
    return None


def warm(slot_dirs: Sequence[str]) -> threading.Thread | None:
    """Start, in a thread, the wait the kernel makes before a first cgroup migration, so the
    launcher's join (moments later) does not make it: this process moves itself into the group it is
    already in (a change of nothing the kernel still locks for). It writes only when its own pid is
    listed in that group; anything that fails is ignored: this only saves time. Answers the thread
    (None without cgroups)."""
    if not slot_dirs:
        return None
    thread = threading.Thread(target=_rejoin_own_group, args=(slot_dirs[0],), name="cgroup-warm", daemon=True)
    thread.start()
    return thread


def _rejoin_own_group(slot_dir: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        unified = (pathlib.Path(slot_dir).parents[2] / "cgroup.controllers").exists()
        group = own_group(slot_dir, pathlib.Path("/proc/self/cgroup").read_text(), unified)
        if group is not None and str(os.getpid()) in (group / "cgroup.procs").read_text().split():
            (group / "cgroup.procs").write_text(str(os.getpid()))
