"""Bearer tokens and what they allow (DESIGN.md "Security").

Agent tokens reach AgentService only and are scoped to one pool; user tokens reach the other services
by role (`submit` < `run.manage` < `admin`) and are scoped to the projects they carry (none: all).
Tokens are stored as hashes, may expire, and a revocation holds from the next call: every call looks
its token up (on the store's read threads, so it never waits for a writer); nothing is cached.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import datetime as dt
import hashlib
import inspect
import os
import pathlib
import re
import secrets
import time
from typing import Any, Awaitable, Callable, Iterable

import grpc
from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.api import validation
from controlplane.domain.errors import InvalidArgument, NotFound
from controlplane.services.lifecycle import add_event
from controlplane.store.models import Project, Token, utcnow
from controlplane.store.engine import aware

ROLES = ("submit", "run.manage", "admin")  # each includes the ones before it
KINDS = ("agent", "user")
TOUCH_SECONDS = 60.0
"""last_used_at is written at most this often per token."""
_DURATION = re.compile(r"(\d+)([smhdw])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


@dataclasses.dataclass(frozen=True)
class Principal:
    name: str
    kind: str
    role: str
    token_id: int = 0
    pool: str = ""
    """An agent token's pool ("": the default pool)."""
    projects: frozenset[str] | None = None
    """The projects a user token may use; None: all."""

    def has_role(self, role: str) -> bool:
        return self.kind == "user" and ROLES.index(self.role) >= ROLES.index(role)

    def may_use(self, project: str) -> bool:
        return self.projects is None or project in self.projects


@dataclasses.dataclass(frozen=True)
class Permission:
    kind: str           # agent | user
    role: str = ""      # the least user role, "" for any


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def parse_duration(text: str) -> dt.timedelta:
    """`30d`, `12h`, `90m`, `2w`, `3600s`, or a sum of them (`1d12h`)."""
    text = text.strip()
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise InvalidArgument(f"{text!r} is not a duration like 30d, 12h, 90m or 1d12h", field="expires_in")
    seconds = sum(int(n) * _UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise InvalidArgument("must be longer than 0 s", field="expires_in")
    return dt.timedelta(seconds=seconds)


def create_token(s: Session, kind: str, name: str, role: str = "", monthly_budget_usd: float = 0.0, *,
                 pool: str = "", projects: Iterable[str] = (), expires_in: dt.timedelta | None = None) -> str:
    """Store a new token's hash; answers the token, which is shown once and never stored."""
    if kind not in KINDS:
        raise InvalidArgument(f"must be one of {', '.join(KINDS)}", field="kind")
    if not validation.AGENT_NAME.fullmatch(name):
        raise InvalidArgument(f"{name!r} is not a name: letters, digits, '.', '_', ':', '@', '-'", field="name")
    projects = sorted(set(projects))
    if kind == "user":
        role = role or "submit"
        if role not in ROLES:
            raise InvalidArgument(f"must be one of {', '.join(ROLES)}", field="role")
        if pool:
            raise InvalidArgument("user tokens have no pool (agent tokens do)", field="pool")
        for project in projects:
            if s.get(Project, project) is None:
                raise NotFound(f"no project {project!r}", field="project")
    else:
        if role:
            raise InvalidArgument("agent tokens carry no role", field="role")
        if projects:
            raise InvalidArgument("agent tokens carry a pool, not projects", field="project")
        if pool and not validation.NAME.fullmatch(pool):
            raise InvalidArgument(f"{pool!r} is not a pool name", field="pool")
    if not (monthly_budget_usd >= 0) or monthly_budget_usd > 1e9:  # also refuses NaN
        raise InvalidArgument("must be a number from 0 to 1e9", field="monthly_budget_usd")
    token = f"drv_{kind[0]}_{secrets.token_urlsafe(32)}"
    now = utcnow()
    s.add(Token(name=name, kind=kind, role=role, token_hash=hash_token(token), monthly_budget_usd=monthly_budget_usd,
                pool=pool, projects=projects, created_at=now, expires_at=now + expires_in if expires_in else None))
    return token


def principal_of(row: Token) -> Principal:
    return Principal(row.name, row.kind, row.role, row.id, row.pool or "",
                     frozenset(row.projects) if row.kind == "user" and row.projects else None)


def usable(row: Token | None, now: dt.datetime) -> bool:
    if row is None or row.revoked_at is not None:
        return False
    expires = aware(row.expires_at)
    return expires is None or now < expires


def lookup(s: Session, token_hash: str) -> Principal | None:
    """The principal of a token that is neither unknown, revoked nor expired."""
    row = s.scalar(select(Token).where(Token.token_hash == token_hash))
    return principal_of(row) if row is not None and usable(row, utcnow()) else None


def still_valid(s: Session, token_id: int) -> bool:
    return usable(s.get(Token, token_id), utcnow())


def touch(s: Session, token_id: int) -> None:
    row = s.get(Token, token_id)
    if row is not None:
        row.last_used_at = utcnow()


def list_tokens(s: Session) -> list[Token]:
    return list(s.scalars(select(Token).order_by(Token.kind, Token.name, Token.id)))


def revoke(s: Session, name: str, kind: str = "") -> int:
    """Revoke every live token named `name` (of `kind` when given); answers how many."""
    q = select(Token).where(Token.name == name, Token.revoked_at.is_(None))
    if kind:
        q = q.where(Token.kind == kind)
    rows = list(s.scalars(q))
    if not rows:
        raise NotFound(f"no live token named {name!r}", field="name")
    now = utcnow()
    for row in rows:
        row.revoked_at = now
    add_event(s, "token.revoked", name=name, token_kind=rows[0].kind, count=len(rows))
    return len(rows)


def write_token_file(path: pathlib.Path, token: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
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
Touch = Callable[[int], Awaitable[None]]
_CURRENT: contextvars.ContextVar[Principal | None] = contextvars.ContextVar("drover_principal", default=None)


def current() -> Principal:
    """The principal of the call being served (set by AuthInterceptor before the servicer runs)."""
    who = _CURRENT.get()
    if who is None:
        raise RuntimeError("no authenticated principal for this call")
    return who


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Checks the bearer token and the method's permission before any servicer runs, and hands the
    principal to the servicer (`auth.current()`)."""

    def __init__(self, permissions: dict[str, Permission], lookup_hash: Lookup, touch_token: Touch | None = None,
                 ) -> None:
        self._permissions = permissions
        self._lookup = lookup_hash
        self._touch = touch_token
        self._touched: dict[int, float] = {}
        self._touching: set[asyncio.Task[None]] = set()

    async def principal(self, metadata: Any) -> Principal | None:
        token = bearer(metadata)
        if not token or len(token) > 512:
            return None
        found = await self._lookup(hash_token(token))
        if found is not None and self._touch is not None:
            now = time.monotonic()
            if now - self._touched.get(found.token_id, -TOUCH_SECONDS) >= TOUCH_SECONDS:
                self._touched[found.token_id] = now
                # In the background: the call never waits for the writer to record its last use.
                touching = asyncio.create_task(self._touch_quietly(found.token_id))
                self._touching.add(touching)
                touching.add_done_callback(self._touching.discard)
        return found

    async def _touch_quietly(self, token_id: int) -> None:
        try:
            await self._touch(token_id)  # type: ignore[misc]
        except Exception:  # last use is a convenience; never fail anything for it
            pass

    async def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
        needed = self._permissions.get(details.method)
        handler = await continuation(details)
        if needed is None or handler is None:
            return handler  # health, reflection, unknown methods
        who = await self.principal(details.invocation_metadata)
        if who is None:
            return _denied(handler, grpc.StatusCode.UNAUTHENTICATED,
                           "missing, unknown, expired or revoked bearer token "
                           "(metadata 'authorization: Bearer <token>')")
        if who.kind != needed.kind:
            return _denied(handler, grpc.StatusCode.PERMISSION_DENIED,
                           f"{who.kind} tokens cannot call {details.method}")
        if needed.role and not who.has_role(needed.role):
            return _denied(handler, grpc.StatusCode.PERMISSION_DENIED,
                           f"{details.method} needs role {needed.role}; token {who.name!r} has {who.role}")
        return _as(handler, who)


def _kw(handler: grpc.RpcMethodHandler) -> dict[str, Any]:
    return dict(request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer)


def _as(handler: grpc.RpcMethodHandler, who: Principal) -> grpc.RpcMethodHandler:
    """The same handler, run with `who` as the current principal."""
    if handler.unary_unary:
        inner_uu = handler.unary_unary

        async def unary_unary(request: Any, context: Any) -> Any:
            _CURRENT.set(who)
            return await inner_uu(request, context)
        return grpc.unary_unary_rpc_method_handler(unary_unary, **_kw(handler))
    if handler.unary_stream:
        inner_us = handler.unary_stream

        async def unary_stream(request: Any, context: Any) -> Any:
            _CURRENT.set(who)
            async for item in inner_us(request, context):
                yield item
        return grpc.unary_stream_rpc_method_handler(unary_stream, **_kw(handler))
    if handler.stream_unary:
        inner_su = handler.stream_unary

        async def stream_unary(requests: Any, context: Any) -> Any:
            _CURRENT.set(who)
            return await inner_su(requests, context)
        return grpc.stream_unary_rpc_method_handler(stream_unary, **_kw(handler))
    inner_ss = handler.stream_stream
    if inspect.isasyncgenfunction(inner_ss):
        async def stream_stream_gen(requests: Any, context: Any) -> Any:
            _CURRENT.set(who)
            async for item in inner_ss(requests, context):
                yield item
        return grpc.stream_stream_rpc_method_handler(stream_stream_gen, **_kw(handler))

    async def stream_stream(requests: Any, context: Any) -> Any:
        _CURRENT.set(who)
        return await inner_ss(requests, context)
    return grpc.stream_stream_rpc_method_handler(stream_stream, **_kw(handler))


def _denied(handler: grpc.RpcMethodHandler, code: grpc.StatusCode, message: str) -> grpc.RpcMethodHandler:
    async def deny(_request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(code, message)

    kw = _kw(handler)
    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(deny, **kw)
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(deny, **kw)
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(deny, **kw)
    return grpc.stream_stream_rpc_method_handler(deny, **kw)
