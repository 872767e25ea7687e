"""The console's way into the API: each page and action is a gRPC call to the control plane, over its
private socket, with the visitor's own token, so it gets exactly the checks any gRPC call gets (the token
looked up on every request, the method's role, the request's validation, the principal's project scope).
No second query layer: a page shows what the API answers, and an action changes what the API changes,
events included. The console runs in its own process; this is all it shares with the control plane."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Any

import grpc

from controlplane.api import auth
from controlplane.api.console_link import FORGE_DELIVERY_METHOD, PRINCIPAL_METHOD, SECRET_METADATA, principal_from_json
from controlplane.api.permissions import PERMISSIONS
from controlplane.services.tokens import Principal
from controlplane.web.shared_streams import SharedStreams
from drover.errors import DroverError, from_rpc_error
from drover.v1 import change_pb2_grpc, operations_pb2_grpc, project_pb2_grpc, token_pb2_grpc

CALL_SECONDS = 60.0
"""The longest a page's unary call may take (streams have no deadline)."""


@dataclasses.dataclass
class Gateway:
    channel: grpc.aio.Channel
    secret: str
    """The console process's own credential, for `Principal` alone."""

    def __post_init__(self) -> None:
        self.stubs = {
            "ChangeService": change_pb2_grpc.ChangeServiceStub(self.channel),
            "OperationsService": operations_pb2_grpc.OperationsServiceStub(self.channel),
            "ProjectService": project_pb2_grpc.ProjectServiceStub(self.channel),
            "TokenService": token_pb2_grpc.TokenServiceStub(self.channel),
        }
        self._principal = self.channel.unary_unary(PRINCIPAL_METHOD)
        self._forge_delivery = self.channel.unary_unary(FORGE_DELIVERY_METHOD)
        self.shared = SharedStreams()

    @classmethod
    def connect(cls, target: str, secret: str) -> Gateway:
        options = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]
        return cls(grpc.aio.insecure_channel(target, options=options), secret)

    async def principal(self, token: str) -> Principal | None:
        """The user behind a token, looked up now (revoked and expired tokens are None)."""
        if not token or len(token) > 512:
            return None
        try:
            answer = await self._principal(
                token.encode(), metadata=((SECRET_METADATA, self.secret),), timeout=CALL_SECONDS
            )
        except grpc.aio.AioRpcError as err:
            raise from_rpc_error(err) from None
        return principal_from_json(answer)

    async def forge_delivery(self, headers: dict[str, str], body: bytes) -> tuple[int, str]:
        """A webhook delivery handed to the control plane as received (the raw body, its three headers as
        metadata); its answer: the HTTP status and a message."""
        metadata = ((SECRET_METADATA, self.secret), *((k, v) for k, v in headers.items() if v))
        try:
            answer = await self._forge_delivery(body, metadata=metadata, timeout=CALL_SECONDS)
        except grpc.aio.AioRpcError as err:
            raise from_rpc_error(err) from None
        fields = json.loads(answer)
        return int(fields["status"]), str(fields["message"])

    def allowed(self, who: Principal, method: str) -> bool:
        """Whether `who` may call `Service/Method` (a page shows only the actions it may take)."""
        return auth.refusal(who, PERMISSIONS[f"/drover.v1.{method}"], method) is None

    async def call(self, token: str, method: str, request: Any) -> Any:
        """`Service/Method` (for example "ChangeService/GetChange") with `token`; its DroverError as raised."""
        try:
            return await self._method(method)(request, metadata=_bearer(token), timeout=CALL_SECONDS)
        except grpc.aio.AioRpcError as err:
            raise from_rpc_error(err) from None

    def stream(self, token: str, method: str, request: Any) -> AsyncIterator[Any]:
        """`Service/Method`'s items with `token`, one API stream for every console stream asking the same."""
        key = (token, method, request.SerializeToString(deterministic=True))
        return self.shared.stream(key, lambda: self._stream(token, method, request))

    async def _stream(self, token: str, method: str, request: Any) -> AsyncIterator[Any]:
        call = self._method(method)(request, metadata=_bearer(token))
        try:
            async for item in call:
                yield item
        except grpc.aio.AioRpcError as err:
            raise from_rpc_error(err) from None
        finally:
            call.cancel()  # the visitor left: the control plane stops serving the stream at once

    async def close(self) -> None:
        await self.channel.close()

    def _method(self, method: str) -> Any:
        service, name = method.split("/")
        return getattr(self.stubs[service], name)


def _bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


HTTP_STATUS = {
    "INVALID_ARGUMENT": 400,
    "FAILED_PRECONDITION": 409,
    "ALREADY_EXISTS": 409,
    "NOT_FOUND": 404,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "RESOURCE_EXHAUSTED": 429,
    "UNAVAILABLE": 503,
}


def http_status(err: DroverError) -> int:
    return HTTP_STATUS.get(err.code, 500)
