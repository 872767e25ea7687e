"""Builds and runs the gRPC server: services, auth, health, reflection, keepalive policy."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import pathlib
import signal

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from controlplane.api import fleet_metrics, validation
from controlplane.api.agent_service import AgentService
from controlplane.api.agent_stream import AgentSessions
from controlplane.api.auth import AuthInterceptor
from controlplane.api.change_service import ChangeService
from controlplane.api.console_link import ConsoleLink
from controlplane.api.decoding import RequestDecoding
from controlplane.api.operations_service import OperationsService
from controlplane.api.permissions import PERMISSIONS
from controlplane.api.replica import Replica
from controlplane.config import ServerConfig, load_harness
from controlplane.context.recall import Recall
from controlplane.context.warmer import Warmer
from controlplane.dispatch import packet_pipeline, quota
from controlplane.dispatch.assign import Dispatcher
from controlplane.dispatch.composer import Composer
from controlplane.dispatch.liveness import Liveness
from controlplane.dispatch.router import Router
from controlplane.services import agent_presence, token_files, tokens
from controlplane.services.notify import Notifier
from controlplane.store import coordination
from controlplane.store.engine import SCHEMA_LOCK, Store
from controlplane.store.models import Token
from controlplane.store.objects import DatabaseStore, DirectoryStore, ObjectStore
from controlplane.web.serve import Console
from drover.v1 import (
    agent_pb2,
    agent_pb2_grpc,
    change_pb2,
    change_pb2_grpc,
    operations_pb2,
    operations_pb2_grpc,
)

log = logging.getLogger("drover.server")

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
SERVICE_NAMES = (
    agent_pb2.DESCRIPTOR.services_by_name["AgentService"].full_name,
    change_pb2.DESCRIPTOR.services_by_name["ChangeService"].full_name,
    operations_pb2.DESCRIPTOR.services_by_name["OperationsService"].full_name,
)


def object_store(config: ServerConfig, store: Store) -> ObjectStore:
    """A directory when one is configured or the database is SQLite; else the database (PostgreSQL),
    which every replica reads."""
    if config.object_store_dir is None and coordination.shared(store.url):
        return DatabaseStore(store.engine)
    return DirectoryStore(config.objects)


def bootstrap_tokens(store: Store, tokens_dir: pathlib.Path, database: str) -> dict[str, pathlib.Path]:
    """On first start (no token stored yet) write an admin and an agent token, mode 0600; their files by
    name. A file already there (another database's token: this one has none) is kept, and the new token
    goes beside it, named after `database` (`token_files.candidates`)."""

    def create(s: Session) -> dict[str, str]:
        if s.get_bind().dialect.name == "postgresql":  # replicas starting together: one makes them
            s.execute(text(f"SELECT pg_advisory_xact_lock({SCHEMA_LOCK})"))
        if s.scalar(select(func.count()).select_from(Token)):
            return {}
        return {
            "admin": tokens.create_token(s, "user", "admin", "admin"),
            "agent": tokens.create_token(s, "agent", "agent"),
        }

    label = token_files.database_label(database)
    return {
        name: token_files.write_beside(tokens_dir, name, label, token)
        for name, token in store.transaction(create).items()
    }


def grpc_server(config: ServerConfig, auth: AuthInterceptor) -> grpc.aio.Server:
    return grpc.aio.server(
        # Auth first: a caller without a valid token is UNAUTHENTICATED whatever bytes it sent.
        interceptors=[auth, RequestDecoding()],
        options=[
            # No SO_REUSEPORT: a second control plane on the same port must fail to bind, not share it.
            ("grpc.so_reuseport", 0),
            ("grpc.max_receive_message_length", config.max_message_bytes),
            ("grpc.max_send_message_length", 16 * 1024 * 1024),
            # Accept agentd's keepalive pings (every 10 s, also without calls in flight).
            ("grpc.http2.min_recv_ping_interval_without_data_ms", config.keepalive_min_ping_seconds * 1000),
            ("grpc.http2.min_ping_interval_without_data_ms", config.keepalive_min_ping_seconds * 1000),
            ("grpc.http2.max_ping_strikes", 0),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.keepalive_time_ms", 30_000),
            ("grpc.keepalive_timeout_ms", 10_000),
            # Calls that arrived but that the server has not taken up yet: past 1,000 gRPC refuses a
            # growing share of new ones and past 3,000 all (random early detection), so thousands of
            # agents connecting at once (a replica's agents failing over) had streams refused at
            # their first write with INTERNAL. Room for a fleet's burst.
            ("grpc.server.max_pending_requests", 10_000),
            ("grpc.server.max_pending_requests_hard_limit", 20_000),
        ],
    )


class ControlPlane:
    """One control-plane process: the store, the loops (dispatch, liveness, composer), the agents' streams
    and the gRPC server, each given exactly the collaborators it uses."""

    def __init__(self, config: ServerConfig, store: Store) -> None:
        self.config = config
        self.store = store
        self.notifier = Notifier()
        for warning in config.harness.warnings:
            log.warning("%s", warning)
        self.replica = Replica(store.url)
        self.objects = object_store(config, store)
        self.recall = Recall(store, config.data_dir, config.memory)
        self.router = Router(
            store, config.harness, self.notifier, self.objects, config.data_dir / "mirrors", self.recall
        )
        self.agents = AgentSessions(store, config, self.notifier, self.objects)
        self.agents.replica, self.agents.tell_others = self.replica.id, self.replica.tell
        leading = self.replica.leading
        self.dispatcher = Dispatcher(
            store, config, self.notifier, self.objects, self.router, self.agents, leading, self.replica.tell
        )
        self.agents.on_change, self.agents.on_refused = self.dispatcher.wake, self.dispatcher.refused
        self.liveness = Liveness(
            store, config, self.notifier, self.agents, self.dispatcher.wake, leading=leading, replica=self.replica.id
        )
        self.composer = Composer(store, self.notifier, config.data_dir / "compose", leading)
        self.warmer = Warmer(store, config.data_dir / "mirrors", packet_pipeline.GRAPHS, self.recall, leading)
        self.replica.handlers += [self._on_note, self.agents.on_note]
        self.auth = AuthInterceptor(
            PERMISSIONS,
            lambda digest: store.read(tokens.lookup, digest),
            lambda token_id: store.run(tokens.touch, token_id),
        )
        self.health = health.aio.HealthServicer()
        self.server = grpc_server(config, self.auth)
        self._add_services(config, store)
        try:
            self.port = self._bind(config)
        except RuntimeError as err:  # grpc raises when the address cannot be bound
            raise SystemExit(
                f"controlplane: cannot listen on {config.listen}: {err} (is another control plane listening there?)"
            ) from None
        if self.port == 0:
            raise SystemExit(
                f"controlplane: cannot listen on {config.listen} (is another control plane listening there?)"
            )
        self.console = self._console(config) if config.http_listen else None

    def _console(self, config: ServerConfig) -> Console:
        """The console's process-to-be: its socket bound now (a bad address fails the start), and the
        private gRPC socket it will call the API through."""
        console = Console(config.http_listen, config.tls_cert, config.tls_key, config.allow_plaintext, config.console)
        self.link = ConsoleLink(self.auth, grpc_server(config, self.auth), self.changes, self.operations)
        return console

    def _add_services(self, config: ServerConfig, store: Store) -> None:
        agent_pb2_grpc.add_AgentServiceServicer_to_server(
            AgentService(store, self.notifier, self.objects, self.agents, self.router, lambda: self.config), self.server
        )
        self.limits = validation.Limits(config.max_budget_usd)
        self.changes = ChangeService(
            store,
            self.notifier,
            self.objects,
            self.agents,
            self.dispatcher.wake,
            self.limits,
            lambda: self.config.harness,
        )
        change_pb2_grpc.add_ChangeServiceServicer_to_server(self.changes, self.server)
        self.operations = OperationsService(store, self.notifier, self.objects, self.agents, self.dispatcher.wake)
        operations_pb2_grpc.add_OperationsServiceServicer_to_server(self.operations, self.server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection((*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), self.server)

    def _bind(self, config: ServerConfig) -> int:
        """TLS (mTLS with a client CA) when configured; plaintext only on loopback unless allowed."""
        if config.tls_cert or config.tls_key:
            if not (config.tls_cert and config.tls_key):
                raise SystemExit("controlplane: --tls-cert and --tls-key go together")
            ca = pathlib.Path(config.tls_client_ca).read_bytes() if config.tls_client_ca else None
            credentials = grpc.ssl_server_credentials(
                [(pathlib.Path(config.tls_key).read_bytes(), pathlib.Path(config.tls_cert).read_bytes())],
                root_certificates=ca,
                require_client_auth=ca is not None,
            )
            return self.server.add_secure_port(config.listen, credentials)
        host = config.listen.rsplit(":", 1)[0].strip("[]")
        if host not in LOOPBACK and not config.allow_plaintext:
            raise SystemExit(
                f"controlplane: refusing plaintext on {config.listen} (not loopback): give "
                "--tls-cert and --tls-key, or --allow-plaintext on a private network"
            )
        return self.server.add_insecure_port(config.listen)

    async def _on_note(self, note: dict[str, object]) -> None:
        """Another replica changed something: dispatch may have work, and watchers here may see it."""
        self.dispatcher.wake_here()
        self.notifier.notify()

    async def start(self) -> None:
        if not self.replica.shared:  # a single node: none is connected to this process yet
            await self.store.run(agent_presence.disconnect_all)
        self.replica.start()
        self._loops = [
            asyncio.create_task(self.dispatcher.run_forever(), name="dispatch"),
            asyncio.create_task(self.liveness.run_forever(), name="liveness"),
            asyncio.create_task(self.composer.run_forever(), name="composer"),
            asyncio.create_task(self.warmer.run_forever(), name="context-warmer"),
        ]
        await self.server.start()
        if self.console is not None:
            await self.link.start()
            await self.console.start(self.link.target, self.link.secret)
        for name in ("", *SERVICE_NAMES):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)

    def reload(self, path: pathlib.Path) -> bool:
        """SIGHUP: read the TOML file again; an invalid one is refused and the running config kept."""
        try:
            harness = load_harness(path, os.environ)
        except (ValueError, OSError) as err:
            log.error("config reload refused, keeping the running config: %s", err)
            return False
        for warning in harness.warnings:
            log.warning("%s", warning)
        self.config = dataclasses.replace(self.config, harness=harness)
        self.agents.config = self.dispatcher.config = self.liveness.config = self.config
        self.router.reconfigure(harness)
        log.info("config reloaded from %s", path)
        return True

    async def stop(self) -> None:
        """Stop accepting, let calls in flight finish within the grace period, then close."""
        await self.health.enter_graceful_shutdown()
        for loop in self._loops:
            loop.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)
        if self.console is not None:
            await self.console.stop()
            await self.link.stop()
        await self.agents.stop()
        await self.server.stop(self.config.grace_seconds)
        self.replica.stop()
        self.store.close()


async def serve(config: ServerConfig, store: Store, config_file: pathlib.Path | None = None) -> None:
    plane = ControlPlane(config, store)
    await plane.start()
    host = config.listen.rsplit(":", 1)[0]
    log.info("control plane listening on %s:%d (database %s)", host, plane.port, _safe_url(store.url))
    print(f"drover control plane listening on {host}:{plane.port}", flush=True)
    if plane.console is not None:
        print(f"drover console on {plane.console.scheme}://{plane.console.host}:{plane.console.port}/", flush=True)
    if config.metrics_listen:
        port = fleet_metrics.serve_metrics(config.metrics_listen, store)
        log.info("metrics on http://%s:%d/metrics", config.metrics_listen.rpartition(":")[0], port)
    if not quota.has_model_key(config.harness, os.environ):
        log.warning("%s; until then such Tasks are refused at submit (FAILED_PRECONDITION)", quota.NO_MODEL_KEY)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if config_file is not None:
        loop.add_signal_handler(signal.SIGHUP, plane.reload, config_file)
    await stop.wait()
    log.info("shutting down: draining calls for up to %.0f s", config.grace_seconds)
    await plane.stop()


def _safe_url(url: str) -> str:
    """A database URL without its password, for logs."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)
