"""The console's HTTP server, in a child process of its own (controlplane.web.child) so it can never slow
the API: the control plane binds `--http-listen HOST:PORT` (with the gRPC port's TLS certificate when it
has one, and in plaintext only on loopback unless `--allow-plaintext`), hands the socket down, and
restarts the child should it die. Connections wait in the socket's backlog while a child starts."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import socket
import sys
import time

from controlplane.config import ConsoleLimits

log = logging.getLogger("drover.console")
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
START_SECONDS = 60.0
"""How long a console process may take to serve before the control plane gives up on it."""
RESTART_SECONDS = (1.0, 30.0)
"""The wait before restarting a console process that died: the first, doubling up to the second."""
NICE = 10
"""The console process runs this much below the control plane's CPU priority."""


class Console:
    def __init__(self, listen: str, tls_cert: str, tls_key: str, allow_plaintext: bool, limits: ConsoleLimits) -> None:
        host, _, port = listen.rpartition(":")
        self.host = host.strip("[]")
        if not port.isdigit():
            raise SystemExit(f"controlplane: --http-listen {listen!r} is not HOST:PORT")
        secure = bool(tls_cert and tls_key)
        if not secure and self.host not in LOOPBACK and not allow_plaintext:
            raise SystemExit(
                f"controlplane: refusing a plaintext console on {listen} (not loopback): give --tls-cert and "
                "--tls-key, or --allow-plaintext on a private network"
            )
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.socket.bind((self.host, int(port)))
        except OSError as err:
            raise SystemExit(f"controlplane: cannot listen on {listen} for the console: {err}") from None
        self.socket.listen(1024)  # connections wait in the backlog until the console process accepts them
        self.port = self.socket.getsockname()[1]
        self.scheme = "https" if secure else "http"
        self.settings = {
            "fd": self.socket.fileno(),
            "tls_cert": tls_cert if secure else "",
            "tls_key": tls_key if secure else "",
            "limits": dataclasses.asdict(limits),
            "parent": os.getpid(),
            "nice": NICE,
        }
        self.process: asyncio.subprocess.Process | None = None
        self.task: asyncio.Task[None] | None = None
        self.stopped = asyncio.Event()

    async def start(self, target: str, secret: str) -> None:
        """Start the console process and return once it serves (its TLS certificate loaded)."""
        self.settings.update(target=target, secret=secret)
        self.process = await self._spawn()
        self.task = asyncio.create_task(self._supervise(), name="console")
        log.info("console on %s://%s:%d/", self.scheme, self.host, self.port)

    async def _spawn(self) -> asyncio.subprocess.Process:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "controlplane.web.child",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            pass_fds=(self.socket.fileno(),),
            start_new_session=True,  # a terminal's Ctrl-C stops the control plane, which stops its console
        )
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(json.dumps(self.settings).encode() + b"\n")  # stdin stays open: its end stops it
        await process.stdin.drain()
        try:
            ready = await asyncio.wait_for(process.stdout.readline(), START_SECONDS)
        except TimeoutError:
            ready = b""
        if ready != b"ready\n":
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            code = await process.wait()
            raise SystemExit(f"controlplane: the console process stopped while starting (exit status {code})")
        log.info("console process %d serving", process.pid)
        return process

    async def _supervise(self) -> None:
        """Restart the console process whenever it dies, until the control plane stops."""
        wait = RESTART_SECONDS[0]
        while not self.stopped.is_set() and self.process is not None:
            started = time.monotonic()
            code = await self.process.wait()
            if self.stopped.is_set():
                return
            if time.monotonic() - started > 60:
                wait = RESTART_SECONDS[0]
            pid = self.process.pid
            log.error("the console process %d died (exit status %s); restarting in %.0f s", pid, code, wait)
            await asyncio.sleep(wait)
            wait = min(wait * 2, RESTART_SECONDS[1])
            try:
                self.process = await self._spawn()
            except SystemExit as err:
                log.error("%s", err)

    async def stop(self) -> None:
        self.stopped.set()
        process = self.process
        if process is not None and process.returncode is None:
            assert process.stdin is not None
            process.stdin.close()  # end of file: it finishes its answers and exits
            try:
                await asyncio.wait_for(process.wait(), 5)
            except TimeoutError:
                process.kill()
                await process.wait()
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        self.socket.close()
