"""The console process's way in: a second gRPC server of this process on a private unix socket (in a
directory of mode 0700) serving ChangeService, OperationsService, ProjectService and TokenService with
the same interceptor, so every page is an ordinary API call with the visitor's own token; plus one
method of its own, `Principal`, that tells the console who a token belongs to. That method answers only
the console's credential (a random secret the control plane gives its console process on start), and
exists on this socket alone."""

from __future__ import annotations

import hmac
import json
import pathlib
import secrets
import shutil
import tempfile
from typing import Any

import grpc

from controlplane.api.auth import AuthInterceptor
from controlplane.api.endpoint import add_admin_services
from controlplane.services.tokens import Principal
from drover.v1 import change_pb2_grpc, operations_pb2_grpc

PRINCIPAL_METHOD = "/drover.console.v1.Console/Principal"
SECRET_METADATA = "x-drover-console"


def principal_json(who: Principal | None) -> bytes:
    if who is None or who.kind != "user":
        return b"{}"
    projects = sorted(who.projects) if who.projects is not None else None
    fields = {"name": who.name, "kind": who.kind, "role": who.role, "token_id": who.token_id, "projects": projects}
    return json.dumps(fields).encode()


def principal_from_json(data: bytes) -> Principal | None:
    fields = json.loads(data or b"{}")
    if not fields:
        return None
    projects = fields.pop("projects")
    return Principal(**fields, projects=frozenset(projects) if projects is not None else None)


class ConsoleLink:
    """The private socket, its server and the console's credential."""

    def __init__(
        self, auth: AuthInterceptor, server: grpc.aio.Server, changes: Any, operations: Any, admin: Any
    ) -> None:
        self.secret = secrets.token_urlsafe(32)
        self.folder = pathlib.Path(tempfile.mkdtemp(prefix="drover-console-"))  # mode 0700
        self.target = f"unix:{self.folder / 'api.sock'}"
        self.server = server
        self._auth = auth
        change_pb2_grpc.add_ChangeServiceServicer_to_server(changes, server)
        operations_pb2_grpc.add_OperationsServiceServicer_to_server(operations, server)
        add_admin_services(admin, server)
        handler = grpc.unary_unary_rpc_method_handler(self._principal)  # bytes in, bytes out
        service, method = PRINCIPAL_METHOD.rsplit("/", 1)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service[1:], {method: handler}),))
        if not server.add_insecure_port(self.target):
            raise SystemExit(f"controlplane: cannot listen on {self.target} for the console process")

    async def _principal(self, token: bytes, context: grpc.aio.ServicerContext) -> bytes:
        sent = dict(context.invocation_metadata() or ()).get(SECRET_METADATA, "")
        if not hmac.compare_digest(str(sent).encode(), self.secret.encode()):
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, "only the console process may ask")
        text = token.decode(errors="replace")
        who = await self._auth.principal([("authorization", f"Bearer {text}")]) if text else None
        return principal_json(who)

    async def start(self) -> None:
        await self.server.start()

    async def stop(self) -> None:
        await self.server.stop(1)
        shutil.rmtree(self.folder, ignore_errors=True)
