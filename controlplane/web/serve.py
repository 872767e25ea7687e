"""The console's HTTP server: uvicorn on the control plane's own event loop (the pages call the servicers
in process), on `--http-listen HOST:PORT`, with the gRPC port's TLS certificate when it has one, and in
plaintext only on loopback unless `--allow-plaintext`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator

import uvicorn

from controlplane.web.app import console
from controlplane.web.gateway import Gateway

log = logging.getLogger("drover.console")
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # the control plane owns SIGTERM, SIGINT and SIGHUP


class Console:
    def __init__(self, listen: str, gateway: Gateway, tls_cert: str, tls_key: str, allow_plaintext: bool) -> None:
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
        self.socket.listen(1024)  # connections wait in the backlog until uvicorn accepts them
        self.port = self.socket.getsockname()[1]
        self.scheme = "https" if secure else "http"
        config = uvicorn.Config(
            console(gateway, secure),
            log_level="warning",
            access_log=False,
            ssl_certfile=tls_cert or None,
            ssl_keyfile=tls_key or None,
            timeout_graceful_shutdown=2,
        )
        self.server = _Server(config)
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Serve, and return once uvicorn has started (its TLS certificate loaded)."""
        self.task = asyncio.create_task(self.server.serve(sockets=[self.socket]), name="console")
        while not self.server.started:
            if self.task.done():
                self.task.result()  # the error that stopped it
                raise SystemExit("controlplane: the console stopped while starting")
            await asyncio.sleep(0.01)
        log.info("console on %s://%s:%d/", self.scheme, self.host, self.port)

    async def stop(self) -> None:
        self.server.should_exit = True
        if self.task is not None:
            await asyncio.gather(self.task, return_exceptions=True)
        self.socket.close()
