"""A control group per run slot, holding a whole run's memory, processes and CPU share.

Per-process rlimits cannot stop one run from starving the others: RLIMIT_AS is per process (six
children of 4 GiB hold 24 GiB) and RLIMIT_NPROC per user. A run's command joins its slot's group
before it execs (the launcher, agentd/run/launcher.c or rlimits.py, writes itself into the
`cgroup.procs` descriptors the supervisor passes it), so everything it starts is counted together and cannot leave.

Groups live at `<hierarchy>/drover/<agent>-<instance>/slot-<i>`, where <instance> is 8 hex digits of a
hash of agentd's spool directory (AgentConfig.instance): two agentds of one name on one host (two
checkouts, two test runs) must not empty each other's slots, while a restarted agentd with the same spool
finds its own groups again. With cgroup v2 one directory in the unified
hierarchy (memory.max, memory.swap.max, pids.max, cpu.weight), with v1 one directory in each of the
memory, pids and (when mounted) cpu hierarchies (memory.limit_in_bytes and memsw, pids.max,
cpu.shares). agentd makes a slot's group afresh before each run, so its counters are the run's.
The v1 paths are what tests exercise (the development host has v1); the v2 paths follow the kernel's
documentation (Documentation/admin-guide/cgroup-v2.rst) and are not exercised here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import re
import signal
import time
from collections.abc import Iterable, Sequence

from agentd.errors import CgroupsUnavailable

ROOT = pathlib.Path("/sys/fs/cgroup")
PARENT = "drover"
V1_REQUIRED = ("memory", "pids")
V1_OPTIONAL = ("cpu",)
CPU_SHARES = 1024  # v1 default weight: every slot the same
CPU_WEIGHT = 100  # v2 default weight


@dataclasses.dataclass(frozen=True)
class Hierarchy:
    version: int
    """1 or 2."""
    mounts: dict[str, pathlib.Path]
    """v1: controller -> its hierarchy's mount; v2: {"unified": the mount}."""


@dataclasses.dataclass(frozen=True)
class Limits:
    memory_bytes: int
    processes: int


def detect(root: pathlib.Path = ROOT, mounts: str | None = None) -> Hierarchy:
    """The cgroup hierarchy of this host with memory and pids control, or CgroupsUnavailable. `mounts` is
    /proc/self/mounts (read when not given): v1 hierarchies are found by their mount options."""
    controllers = root / "cgroup.controllers"
    if controllers.exists():
        have = set(controllers.read_text().split())
        lacking = sorted({"memory", "pids"} - have)
        if lacking:
            raise CgroupsUnavailable(f"cgroup v2 at {root} lacks the {', '.join(lacking)} controller")
        return Hierarchy(2, {"unified": root})
    if mounts is None:
        try:
            mounts = pathlib.Path("/proc/self/mounts").read_text()
        except OSError as err:
            raise CgroupsUnavailable(f"cannot read the mounts: {err}") from None
    found = v1_mounts(mounts)
    missing = [name for name in V1_REQUIRED if name not in found]
    if missing:
        raise CgroupsUnavailable(f"no cgroup v2 at {root} and no v1 {', '.join(missing)} hierarchy")
    return Hierarchy(1, {name: found[name] for name in (*V1_REQUIRED, *V1_OPTIONAL) if name in found})


def v1_mounts(mounts: str) -> dict[str, pathlib.Path]:
    """controller -> mount point of each cgroup v1 hierarchy in a /proc/self/mounts text."""
    found: dict[str, pathlib.Path] = {}
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 4 or fields[2] != "cgroup":
            continue
        for option in fields[3].split(","):
            if option in (*V1_REQUIRED, *V1_OPTIONAL) and option not in found:
                found[option] = pathlib.Path(fields[1].replace("\\040", " "))
    return found


def group_name(agent: str, instance: str) -> str:
    """An agentd's directory name under drover/: its name with anything but [A-Za-z0-9._-] replaced,
    then `-` and its instance (agentd/daemon/config.py: a hash of its spool directory)."""
    return f"{re.sub(r'[^A-Za-z0-9._-]', '_', agent)[:100] or 'agent'}-{instance}"


def slot_dirs(hierarchy: Hierarchy, group: str, slot: int) -> list[pathlib.Path]:
    """The group directories of run slot `slot` of agentd group `group` (one per v1 hierarchy, one for v2)."""
    return [mount / PARENT / group / f"slot-{slot}" for mount in hierarchy.mounts.values()]


def _write(path: pathlib.Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _enable_v2(directory: pathlib.Path) -> None:
    """Let `directory`'s children use memory, pids and cpu (v2: a parent hands controllers down)."""
    have = set((directory / "cgroup.controllers").read_text().split())
    wanted = " ".join(f"+{c}" for c in ("memory", "pids", "cpu") if c in have)
    _write(directory / "cgroup.subtree_control", wanted)


def prepare_agent(hierarchy: Hierarchy, group: str) -> None:
    """Make drover/<group>/ (group_name) in each hierarchy (CgroupsUnavailable when agentd may not)."""
    try:
        for mount in hierarchy.mounts.values():
            agent_dir = mount / PARENT / group
            agent_dir.mkdir(parents=True, exist_ok=True)
            if hierarchy.version == 2:
                _enable_v2(mount)
                _enable_v2(mount / PARENT)
                _enable_v2(agent_dir)
    except OSError as err:
        raise CgroupsUnavailable(f"cannot make cgroups under {PARENT}/ ({err})") from None


def procs(directory: pathlib.Path) -> list[int]:
    try:
        return [int(p) for p in (directory / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def empty(directories: Iterable[pathlib.Path], timeout: float = 5.0) -> None:
    """Kill whatever is left in the groups (a previous run's stragglers) and wait until they are gone."""
    deadline = time.monotonic() + timeout
    for directory in directories:
        while directory.exists() and (left := procs(directory)) and time.monotonic() < deadline:
            for pid in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)


def prepare_slot(hierarchy: Hierarchy, group: str, slot: int, limits: Limits) -> list[pathlib.Path]:
    """The slot's groups made afresh (a previous run's processes killed, its counters gone) with the
    run's limits. OSError when the kernel refuses."""
    directories = slot_dirs(hierarchy, group, slot)
    empty(directories)
    for directory in directories:
        if directory.exists():
            with contextlib.suppress(OSError):  # kept (busy): its limits are set again below
                directory.rmdir()
        directory.mkdir(parents=True, exist_ok=True)
    if hierarchy.version == 2:
        (directory,) = directories
        _write(directory / "memory.max", str(limits.memory_bytes))
        if (directory / "memory.swap.max").exists():
            _write(directory / "memory.swap.max", "0")
        _write(directory / "pids.max", str(limits.processes))
        if (directory / "cpu.weight").exists():
            _write(directory / "cpu.weight", str(CPU_WEIGHT))
        return directories
    for name, directory in zip(hierarchy.mounts, directories, strict=True):
        if name == "memory":
            _write(directory / "memory.limit_in_bytes", str(limits.memory_bytes))
            if (directory / "memory.memsw.limit_in_bytes").exists():  # no escape into swap
                _write(directory / "memory.memsw.limit_in_bytes", str(limits.memory_bytes))
        elif name == "pids":
            _write(directory / "pids.max", str(limits.processes))
        elif name == "cpu":
            _write(directory / "cpu.shares", str(CPU_SHARES))
    return directories


def remove_agent(hierarchy: Hierarchy, group: str) -> None:
    """Remove the agentd's empty slot groups (at shutdown; busy ones stay)."""
    for mount in hierarchy.mounts.values():
        agent_dir = mount / PARENT / group
        for directory in sorted(agent_dir.glob("slot-*")):
            with contextlib.suppress(OSError):
                directory.rmdir()
        with contextlib.suppress(OSError):
            agent_dir.rmdir()


def open_procs(directories: Sequence[str]) -> tuple[int, ...]:
    """Descriptors of each group's cgroup.procs, for the launcher to join them (it cannot see
    /sys/fs/cgroup inside the sandbox). The caller passes them to the launcher and closes them."""
    opened: list[int] = []
    try:
        for directory in directories:
            opened.append(os.open(os.path.join(directory, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC))
    except OSError:
        for fd in opened:
            os.close(fd)
        raise
    return tuple(opened)


def _counters(path: pathlib.Path) -> dict[str, int]:
    """`name value` lines (memory.events, pids.events, memory.oom_control) as a dict; {} when absent."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    found = {}
    for line in lines:
        name, _, value = line.partition(" ")
        with contextlib.suppress(ValueError):
            found[name] = int(value)
    return found


def limits_hit(directories: Sequence[str], memory_bytes: int, processes: int) -> list[str]:
    """What the run ran into, one sentence each: the memory limit (the kernel killed a process of it)
    and the process limit (a fork failed)."""
    said = []
    oom_kills = fork_failures = 0
    for directory in map(pathlib.Path, directories):
        oom_kills += _counters(directory / "memory.events").get("oom_kill", 0)
        oom_kills += _counters(directory / "memory.oom_control").get("oom_kill", 0)
        fork_failures += _counters(directory / "pids.events").get("max", 0)
    if oom_kills:
        said.append(
            f"the run hit its memory limit {size(memory_bytes)}: the kernel killed {oom_kills} of its processes"
        )
    if fork_failures:
        said.append(f"the run hit its process limit {processes}: {fork_failures} forks failed")
    return said


def size(n: int) -> str:
    """4 GiB, 256 MiB, 1536 KiB, 100 bytes."""
    for unit, name in ((1024**3, "GiB"), (1024**2, "MiB"), (1024, "KiB")):
        if n >= unit and n % unit == 0:
            return f"{n // unit} {name}"
    if n >= 1024**3:
        return f"{n / 1024**3:.1f} GiB"
    if n >= 1024**2:
        return f"{n / 1024**2:.1f} MiB"
    return f"{n} bytes"
