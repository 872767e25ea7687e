"""The console's way into the API: each page and action calls a gRPC servicer method in process, after the
same checks a gRPC call gets (the token looked up on every request, the method's role, the request's
validation, the principal's project scope inside the service). No second query layer: a page shows what
the API answers, and an action changes what the API changes, events included."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

from controlplane.api import auth, validation
from controlplane.api.auth import AuthInterceptor, Permission
from controlplane.services.tokens import Principal
from drover.errors import DroverError

SERVICES = ("ChangeService", "OperationsService")


@dataclasses.dataclass
class Gateway:
    interceptor: AuthInterceptor
    permissions: dict[str, Permission]
    servicers: dict[str, Any]
    """Service name -> the servicer the gRPC server runs."""
    limits: validation.Limits

    async def principal(self, token: str) -> Principal | None:
        """The user behind a token, looked up now (revoked and expired tokens are None)."""
        who = await self.interceptor.principal([("authorization", f"Bearer {token}")]) if token else None
        return who if who is not None and who.kind == "user" else None

    def allowed(self, who: Principal, method: str) -> bool:
        """Whether `who` may call `Service/Method` (a page shows only the actions it may take)."""
        return auth.refusal(who, self._needed(method), method) is None

    async def call(self, who: Principal | None, method: str, request: Any) -> Any:
        """`Service/Method` (for example "ChangeService/GetChange") as `who`; its DroverError as raised."""
        servicer, name = self._enter(who, method, request)
        return await getattr(servicer, name).__wrapped__(servicer, request, None)

    async def stream(self, who: Principal | None, method: str, request: Any) -> AsyncIterator[Any]:
        servicer, name = self._enter(who, method, request)
        async for item in getattr(servicer, name).__wrapped__(servicer, request, None):
            yield item

    def _enter(self, who: Principal | None, method: str, request: Any) -> tuple[Any, str]:
        service, name = method.split("/")
        refused = auth.refusal(who, self._needed(method), f"/drover.v1.{method}")
        if refused is not None:
            raise refused
        assert who is not None
        auth.acting_as(who)
        validation.check(request, self.limits)
        return self.servicers[service], name

    def _needed(self, method: str) -> Permission:
        return self.permissions[f"/drover.v1.{method}"]  # KeyError: a console bug, never a visitor's input


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
