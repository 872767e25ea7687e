"""The console's own process (`python -m controlplane.web.child`, started by the control plane): uvicorn
on the listening socket the control plane bound and handed down, at a lower CPU priority, calling the API
over the control plane's private socket. It shares no event loop, no GIL and no memory with the API, so
no number of browsers, streams or slow forms can slow a gRPC call beyond the CPU it takes.

It reads its settings as one JSON line on stdin and keeps stdin open: end of file (the control plane
stopping, or gone) stops it. It also asks the kernel for SIGKILL when its parent dies (PR_SET_PDEATHSIG),
so a control plane killed with -9 leaves no console behind. It writes `ready` on stdout once it serves."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import logging
import os
import signal
import socket
import sys
from typing import Any

import uvicorn

from controlplane.config import ConsoleLimits
from controlplane.web.app import console
from controlplane.web.gateway import Gateway

log = logging.getLogger("drover.console")
PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    """SIGKILL when the control plane dies, however it dies; gone already: exit now."""
    with contextlib.suppress(OSError, AttributeError):  # not Linux: the stdin pipe still ends this process
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        raise SystemExit("console: the control plane is gone")


async def serve(settings: dict[str, Any]) -> None:
    limits = ConsoleLimits(**settings["limits"])
    gateway = Gateway.connect(settings["target"], settings["secret"])
    listening = socket.socket(fileno=settings["fd"])
    config = uvicorn.Config(
        console(gateway, bool(settings["tls_cert"]), limits),
        log_level="warning",
        access_log=False,
        lifespan="off",
        ssl_certfile=settings["tls_cert"] or None,
        ssl_keyfile=settings["tls_key"] or None,
        timeout_graceful_shutdown=2,
        limit_concurrency=limits.max_connections,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[listening]))
    while not server.started:
        if task.done():
            task.result()
            raise SystemExit("console: stopped while starting")
        await asyncio.sleep(0.01)
    os.write(sys.stdout.fileno(), b"ready\n")
    loop = asyncio.get_running_loop()

    def parent_spoke() -> None:
        if not os.read(sys.stdin.fileno(), 4096):  # end of file: the control plane stops or is gone
            loop.remove_reader(sys.stdin.fileno())
            server.should_exit = True

    loop.add_reader(sys.stdin.fileno(), parent_spoke)
    await task
    await gateway.close()


def main() -> int:
    line = sys.stdin.buffer.readline()
    if not line:
        return 1
    settings = json.loads(line)
    die_with_parent(settings["parent"])
    os.nice(settings.get("nice", 10))
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s console %(levelname)s %(name)s: %(message)s")
    asyncio.run(serve(settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
