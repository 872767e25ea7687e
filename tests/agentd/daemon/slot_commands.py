"""A run's command in a slot's cgroups, started as the launcher starts one: shared by the slot tests."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time
from collections.abc import Sequence

import agentd.run.rlimits
from agentd.daemon import cgroups


def command_in(dirs: Sequence[str | pathlib.Path]) -> subprocess.Popen[bytes]:
    """`sleep 60` joined to the groups `dirs` through their descriptors (what the launcher does: join,
    then exec); answered once it is listed in every group, or after 10 s."""
    fds = cgroups.open_procs([str(d) for d in dirs])
    try:
        child = subprocess.Popen(
            [sys.executable, "-I", "-S", agentd.run.rlimits.__file__, "--cgroup-fds", ",".join(map(str, fds))]
            + ["--", "sleep", "60"],
            pass_fds=fds,
        )
    finally:
        for fd in fds:
            os.close(fd)
    deadline = time.monotonic() + 10
    while not all(child.pid in cgroups.procs(pathlib.Path(d)) for d in dirs) and time.monotonic() < deadline:
        time.sleep(0.02)
    return child
