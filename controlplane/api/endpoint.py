"""The gRPC side of a control plane: the server with its keepalive and queue policy, the five services,
health and reflection, and the port it binds (TLS, mTLS, or plaintext on loopback only)."""

from __future__ import annotations

import pathlib

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from controlplane.api.agent_service import AgentService
from controlplane.api.auth import AuthInterceptor
from controlplane.api.change_service import ChangeService
from controlplane.api.decoding import RequestDecoding
from controlplane.api.operations_service import OperationsService
from controlplane.api.project_service import ProjectService
from controlplane.api.token_service import TokenService
from controlplane.config import ServerConfig
from drover.v1 import (
    agent_pb2,
    agent_pb2_grpc,
    change_pb2,
    change_pb2_grpc,
    operations_pb2,
    operations_pb2_grpc,
    project_pb2,
    project_pb2_grpc,
    token_pb2,
    token_pb2_grpc,
)

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
SERVICE_NAMES = (
    agent_pb2.DESCRIPTOR.services_by_name["AgentService"].full_name,
    change_pb2.DESCRIPTOR.services_by_name["ChangeService"].full_name,
    operations_pb2.DESCRIPTOR.services_by_name["OperationsService"].full_name,
    project_pb2.DESCRIPTOR.services_by_name["ProjectService"].full_name,
    token_pb2.DESCRIPTOR.services_by_name["TokenService"].full_name,
)


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


def add_admin_services(admin: tuple[ProjectService, TokenService], server: grpc.aio.Server) -> None:
    """ProjectService and TokenService (the console's private socket serves them too)."""
    project_pb2_grpc.add_ProjectServiceServicer_to_server(admin[0], server)
    token_pb2_grpc.add_TokenServiceServicer_to_server(admin[1], server)


class Endpoint:
    """The public gRPC server: the services, health and reflection on it, bound when built."""

    def __init__(
        self,
        config: ServerConfig,
        auth: AuthInterceptor,
        agents: AgentService,
        changes: ChangeService,
        operations: OperationsService,
        admin: tuple[ProjectService, TokenService],
    ) -> None:
        self.health = health.aio.HealthServicer()
        self.server = grpc_server(config, auth)
        agent_pb2_grpc.add_AgentServiceServicer_to_server(agents, self.server)
        change_pb2_grpc.add_ChangeServiceServicer_to_server(changes, self.server)
        operations_pb2_grpc.add_OperationsServiceServicer_to_server(operations, self.server)
        add_admin_services(admin, self.server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection((*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), self.server)
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

    async def start(self) -> None:
        await self.server.start()

    async def report_serving(self) -> None:
        """Health answers SERVING for the server and each service (once everything behind them runs)."""
        for name in ("", *SERVICE_NAMES):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)

    async def drain(self) -> None:
        """Health answers NOT_SERVING from now on: load balancers stop sending new calls."""
        await self.health.enter_graceful_shutdown()

    async def stop(self, grace: float) -> None:
        await self.server.stop(grace)
