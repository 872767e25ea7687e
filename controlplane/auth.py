"""Bearer tokens: agents reach AgentService only, users the rest by role. Tokens are stored hashed."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pathlib
import secrets
import time
from typing import Any, Awaitable, Callable

import grpc
from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.errors import InvalidArgument
from controlplane.models import Token

ROLES = ("submit", "run.manage", "admin")  # each includes the ones before it
KINDS = ("agent", "user")


@dataclasses.dataclass(frozen=True)
class Principal:
    name: str
    kind: str
    role: str

    def has_role(self, role: str) -> bool:
        return self.kind == "user" and ROLES.index(self.role) >= ROLES.index(role)


@dataclasses.dataclass(frozen=True)
class Permission:
    kind: str           # agent | user
    role: str = ""      # the least user role, "" for any


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(s: Session, kind: str, name: str, role: str = "", monthly_budget_usd: float = 0.0) -> str:
    """Store a new token's hash; answers the token, which is shown once and never stored."""
    if kind not in KINDS:
        raise InvalidArgument(f"must be one of {', '.join(KINDS)}", field="kind")
    if not name.strip():
        raise InvalidArgument("must not be empty", field="name")
    if kind == "user":
        role = role or "submit"
        if role not in ROLES:
            raise InvalidArgument(f"must be one of {', '.join(ROLES)}", field="role")
    elif role:
        raise InvalidArgument("agent tokens carry no role", field="role")
    token = f"drv_{kind[0]}_{secrets.token_urlsafe(32)}"
    if monthly_budget_usd < 0:
        raise InvalidArgument("must not be negative", field="monthly_budget_usd")
    s.add(Token(name=name, kind=kind, role=role, token_hash=hash_token(token), monthly_budget_usd=monthly_budget_usd))
    return token


def lookup(s: Session, token_hash: str) -> Principal | None:
    row = s.scalar(select(Token).where(Token.token_hash == token_hash))
    return None if row is None else Principal(row.name, row.kind, row.role)


def write_token_file(path: pathlib.Path, token: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    os.chmod(path, 0o600)


def bearer(metadata: Any) -> str | None:
    for key, value in metadata or ():
        if key == "authorization" and isinstance(value, str) and value.startswith("Bearer "):
            return value[len("Bearer "):].strip()
    return None


Lookup = Callable[[str], Awaitable[Principal | None]]


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Checks the bearer token and the method's permission before any servicer runs."""

    def __init__(self, permissions: dict[str, Permission], lookup_hash: Lookup, ttl: float = 60.0) -> None:
        self._permissions = permissions
        self._lookup = lookup_hash
        self._ttl = ttl
        self._cache: dict[str, tuple[float, Principal | None]] = {}

    async def principal(self, metadata: Any) -> Principal | None:
        token = bearer(metadata)
        if not token:
            return None
        digest = hash_token(token)
        hit = self._cache.get(digest)
        if hit is not None and hit[0] > time.monotonic():
            return hit[1]
        found = await self._lookup(digest)
        self._cache[digest] = (time.monotonic() + (self._ttl if found else 2.0), found)
        return found

    async def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
        needed = self._permissions.get(details.method)
        handler = await continuation(details)
        if needed is None or handler is None:
            return handler  # health, reflection, unknown methods
        who = await self.principal(details.invocation_metadata)
        if who is None:
            return _denied(handler, grpc.StatusCode.UNAUTHENTICATED,
                           "missing or unknown bearer token (metadata 'authorization: Bearer <token>')")
        if who.kind != needed.kind:
            return _denied(handler, grpc.StatusCode.PERMISSION_DENIED,
                           f"{who.kind} tokens cannot call {details.method}")
        if needed.role and not who.has_role(needed.role):
            return _denied(handler, grpc.StatusCode.PERMISSION_DENIED,
                           f"{details.method} needs role {needed.role}; token {who.name!r} has {who.role}")
        return handler


def _denied(handler: grpc.RpcMethodHandler, code: grpc.StatusCode, message: str) -> grpc.RpcMethodHandler:
    async def deny(_request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(code, message)

    kw = dict(request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer)
    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(deny, **kw)
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(deny, **kw)
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(deny, **kw)
    return grpc.stream_stream_rpc_method_handler(deny, **kw)
