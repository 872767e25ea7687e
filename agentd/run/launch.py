"""How a command is started: what the process agentd spawns gets, and what only the command gets.

The process agentd spawns (bubblewrap, or the launcher itself without a sandbox) runs as root
before any namespace exists, so nothing a Task controls may reach it: it starts with FIXED_ENV
in "/" (never the workspace, whose files the Task wrote), and the Task's environment travels in a
sealed memory file (`--env-fd N` of agentd/run/launcher.c or rlimits.py) that only the launcher
reads, inside the sandbox, after the limits are set and just before it execs the command with exactly that
environment. `LD_PRELOAD=./evil.so` in a Task's env therefore reaches the command alone, as the
run's own user. A memory file, not `--setenv` or the launcher's argv: another user of the host can
read a process's argv (/proc/PID/cmdline), never its descriptors.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
from collections.abc import Mapping
from typing import Any

FIXED_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
"""The whole environment of the process agentd spawns: bubblewrap needs nothing else."""
OUTSIDE_CWD = "/"
"""Its working directory: not the workspace (a relative path there would be the Task's file)."""


def env_file(env: Mapping[str, str]) -> int:
    """A sealed, read-only memory file holding `env` as NUL-separated NAME=VALUE entries, at offset 0.
    ValueError for a name or value the kernel could not pass to exec (empty, '=' or NUL in a name,
    NUL in a value)."""
    body = bytearray()
    for name, value in env.items():
        if not name or "=" in name or "\0" in name or "\0" in value:
            raise ValueError(f"environment variable {name!r} cannot be passed to a command")
        body += os.fsencode(name) + b"=" + os.fsencode(value) + b"\0"
    return sealed_file("drover-env", bytes(body))


def sealed_file(name: str, data: bytes) -> int:
    """A memory file holding `data` at offset 0, sealed: nobody can change it once made."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        seals = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


@dataclasses.dataclass
class Launch:
    """The process to spawn: `argv` with exactly FIXED_ENV in OUTSIDE_CWD, inheriting `pass_fds`.
    `owned` are descriptors made for this launch only (the env file, a seccomp program): the
    spawned process holds its own copies, so `close()` them once it started (or failed to)."""

    argv: list[str]
    pass_fds: tuple[int, ...] = ()
    owned: tuple[int, ...] = ()
    env: dict[str, str] = dataclasses.field(default_factory=lambda: dict(FIXED_ENV))
    cwd: str = OUTSIDE_CWD

    def spawn_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of subprocess.Popen / asyncio.create_subprocess_exec that start it."""
        return {"cwd": self.cwd, "env": dict(self.env), "pass_fds": self.pass_fds, "start_new_session": True}

    def close(self) -> None:
        for fd in self.owned:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.owned = ()

    def __enter__(self) -> Launch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
