"""Starting a sandboxed asyncio subprocess: the harness's commands and a runtime's session alike."""

from __future__ import annotations

import asyncio
import pathlib
import subprocess
from collections.abc import Sequence

from agentd.run.sandbox import Bind, Sandbox


async def start(
    sandbox: Sandbox,
    argv: list[str],
    cwd: pathlib.Path,
    env: dict[str, str],
    *,
    writable: Sequence[pathlib.Path],
    binds: Sequence[Bind] = (),
    ready_fd: int | None = None,
    stdin: int = subprocess.DEVNULL,
    stderr: int = subprocess.PIPE,
    limit: int = 64 << 10,
) -> asyncio.subprocess.Process:
    """`argv` started in `sandbox` as an asyncio subprocess, stdout piped (the harness's commands, a
    runtime's session). ValueError or OSError when it cannot start."""
    with sandbox.wrap(argv, cwd, env, writable=writable, ready_fd=ready_fd, binds=binds) as launch:
        return await asyncio.create_subprocess_exec(
            *launch.argv, stdin=stdin, stdout=subprocess.PIPE, stderr=stderr, limit=limit, **launch.spawn_kwargs()
        )
