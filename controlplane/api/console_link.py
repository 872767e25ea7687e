"""The console process's way in: a second gRPC server of this process on a private unix socket (in a
directory of mode 0700) serving ChangeService, OperationsService, ProjectService and TokenService with
the same interceptor, so every page is an ordinary API call with the visitor's own token; plus one
method of its own, `Principal`, that tells the console who a token belongs to, and `ForgeDelivery`, a
webhook delivery the console received on `POST /hooks/github` (the raw body in, the three headers as
metadata; `controlplane.api.forge_hooks` decides). Those methods answer only the console's credential (a
random secret the control plane gives its console process on start), and exist on this socket alone."""

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
from controlplane.api.forge_hooks import Delivery, ForgeHooks
from controlplane.services.tokens import Principal
from drover.v1 import change_pb2_grpc, operations_pb2_grpc

PRINCIPAL_METHOD = "/drover.console.v1.Console/Principal"
FORGE_DELIVERY_METHOD = "/drover.console.v1.Console/ForgeDelivery"
SECRET_METADATA = "x-drover-console"
DELIVERY_HEADERS = ("x-github-event", "x-github-delivery", "x-hub-signature-256")
"""The headers of a webhook delivery the console forwards, as metadata of `ForgeDelivery`."""


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
        self,
        auth: AuthInterceptor,
        server: grpc.aio.Server,
        changes: Any,
        operations: Any,
        admin: Any,
        hooks: ForgeHooks,
    ) -> None:
        self.secret = secrets.token_urlsafe(32)
        self.folder = pathlib.Path(tempfile.mkdtemp(prefix="drover-console-"))  # mode 0700
        self.target = f"unix:{self.folder / 'api.sock'}"
        self.server = server
        self._auth, self._hooks = auth, hooks
        change_pb2_grpc.add_ChangeServiceServicer_to_server(changes, server)
        operations_pb2_grpc.add_OperationsServiceServicer_to_server(operations, server)
        add_admin_services(admin, server)
        handlers = {  # bytes in, bytes out
            name.rsplit("/", 1)[1]: grpc.unary_unary_rpc_method_handler(fn)
            for name, fn in ((PRINCIPAL_METHOD, self._principal), (FORGE_DELIVERY_METHOD, self._forge_delivery))
        }
        service = PRINCIPAL_METHOD.rsplit("/", 1)[0][1:]
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))
        if not server.add_insecure_port(self.target):
            raise SystemExit(f"controlplane: cannot listen on {self.target} for the console process")

    async def _console_only(self, context: grpc.aio.ServicerContext) -> dict[str, str]:
        """The call's metadata, once it is known to come from the console process (else PERMISSION_DENIED)."""
        metadata = {key: str(value) for key, value in context.invocation_metadata() or ()}
        if not hmac.compare_digest(metadata.get(SECRET_METADATA, "").encode(), self.secret.encode()):
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, "only the console process may ask")
        return metadata

    async def _principal(self, token: bytes, context: grpc.aio.ServicerContext) -> bytes:
        await self._console_only(context)
        text = token.decode(errors="replace")
        who = await self._auth.principal([("authorization", f"Bearer {text}")]) if text else None
        return principal_json(who)

    async def _forge_delivery(self, body: bytes, context: grpc.aio.ServicerContext) -> bytes:
        """A webhook delivery as the console received it: JSON {"status": HTTP status, "message": ...}."""
        metadata = await self._console_only(context)
        event, delivery_id, signature = (metadata.get(key, "") for key in DELIVERY_HEADERS)
        return (await self._hooks.receive(Delivery(event, delivery_id, signature, body))).json()

    async def start(self) -> None:
        await self.server.start()

    async def stop(self) -> None:
        await self.server.stop(1)
        shutil.rmtree(self.folder, ignore_errors=True)
