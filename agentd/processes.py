"""The supervisor processes of runs: each started detached from agentd (its own session), with its secrets
on stdin, and its pid and start time written beside its run so a restarted agentd can tell whether it is
still the same live process."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import subprocess
import sys
from typing import Any


def start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot ("" when it is gone or a zombie): with the pid,
    it names one process, even after the pid is reused."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    fields = stat[stat.rindex(")") + 2 :].split()
    return "" if fields[0] == "Z" else fields[19]


def spawn(run_dir: pathlib.Path, module: str, secrets: dict[str, Any]) -> subprocess.Popen[bytes]:
    """`python -m module RUN_DIR`, detached, its secrets on stdin (they never touch the disk)."""
    with open(run_dir / "supervisor.log", "ab") as errlog:
        process = subprocess.Popen(
            [sys.executable, "-m", module, str(run_dir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=errlog,
            start_new_session=True,
            close_fds=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
        )
    assert process.stdin is not None
    process.stdin.write(json.dumps(secrets).encode())
    process.stdin.close()
    try:
        (run_dir / "supervisor.pid").write_text(f"{process.pid} {start_time(process.pid)}")
    except OSError:
        # Without its pid on disk a restarted agentd could not tell the supervisor is alive: stop it
        # now, before it starts anything (the supervisor leads its own process group).
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise
    return process


def alive(run_dir: pathlib.Path) -> bool:
    """Whether the supervisor whose pid file is in `run_dir` is still that same live process."""
    try:
        pid_text, _, started = (run_dir / "supervisor.pid").read_text().partition(" ")
    except OSError:
        return False
    return bool(started) and start_time(int(pid_text)) == started
