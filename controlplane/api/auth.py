"""Bearer tokens and what they allow (DESIGN.md "Security").

Agent tokens reach AgentService only and are scoped to one pool; user tokens reach the other services
by role (`submit` < `run.manage` < `admin`) and are scoped to the projects they carry (none: all).
Tokens are stored as hashes and may expire. A call looks its token up on the store's read threads, so
it never waits for a writer. A token's lookup is reused for CACHE_SECONDS (`TokenCache`: an agent's
model calls and a user's calls do not each read the token), never past the token's expiry: a revocation
through a replica's API holds from the next call on that replica and, by a note, within moments on the
others; one the host makes (`controlplane token revoke`) holds within CACHE_SECONDS everywhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import datetime as dt
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from controlplane.services.tokens import Principal, hash_token
from controlplane.store.models import utcnow
from drover.errors import DroverError, PermissionDenied, Unauthenticated

TOUCH_SECONDS = 60.0
"""last_used_at is written at most this often per token."""
CACHE_SECONDS = 0.5
"""A token's principal is reused this long after its lookup."""


@dataclasses.dataclass(frozen=True)
class Permission:
    kind: str  # agent | user
    role: str = ""  # the least user role, "" for any


def bearer(metadata: Any) -> str | None:
    for key, value in metadata or ():
        if key == "authorization" and isinstance(value, str) and value.startswith("Bearer "):
            return value[len("Bearer ") :].strip()
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


class TokenCache:
    """A Lookup that keeps tokens' principals by token hash for CACHE_SECONDS, and never past a token's
    expiry (a token not found is looked up every time). `drop` forgets a name's tokens at once: a revoke
    through this replica's API calls it here and, by a note, on every other replica; a revoke made
    elsewhere (the host's `controlplane token revoke`) holds once the entry is CACHE_SECONDS old."""

    def __init__(
        self,
        lookup: Lookup,
        seconds: float = CACHE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], dt.datetime] = utcnow,
    ) -> None:
        self._lookup, self._seconds, self._clock, self._wall = lookup, seconds, clock, wall
        self._entries: dict[str, tuple[Principal, float]] = {}
        self._drops = 0
        """Counts `drop`s: a lookup that began before one is not kept (it may have read the token live)."""

    async def __call__(self, digest: str) -> Principal | None:
        now = self._clock()
        hit = self._entries.get(digest)
        if hit is not None and now < hit[1]:
            return hit[0]
        drops = self._drops
        found = await self._lookup(digest)
        if found is not None and drops == self._drops:
            if len(self._entries) >= 4096:  # many tokens: keep the live entries only
                self._entries = {d: e for d, e in self._entries.items() if now < e[1]}
            until = now + self._seconds
            if found.expires_at is not None:
                until = min(until, now + (found.expires_at - self._wall()).total_seconds())
            self._entries[digest] = (found, until)
        return found

    def drop(self, name: str) -> None:
        """Forget the tokens named `name` (they were revoked)."""
        self._drops += 1
        self._entries = {d: e for d, e in self._entries.items() if e[0].name != name}


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Checks the bearer token and the method's permission before any servicer runs, and hands the
    principal to the servicer (`auth.current()`)."""

    def __init__(
        self,
        permissions: dict[str, Permission],
        lookup_hash: Lookup,
        touch_token: Touch | None = None,
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
        with contextlib.suppress(Exception):  # last use is a convenience; never fail anything for it
            await self._touch(token_id)  # type: ignore[misc]

    async def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
        needed = self._permissions.get(details.method)
        handler = await continuation(details)
        if needed is None or handler is None:
            return handler  # health, reflection, unknown methods
        who = await self.principal(details.invocation_metadata)
        refused = refusal(who, needed, details.method)
        if refused is not None:
            return _denied(handler, getattr(grpc.StatusCode, refused.code), str(refused))
        assert who is not None
        return _as(handler, who)


def refusal(who: Principal | None, needed: Permission, method: str) -> DroverError | None:
    """Why `who` may not call `method` (None: it may). The web console asks the same question."""
    if who is None:
        return Unauthenticated(
            "missing, unknown, expired or revoked bearer token (metadata 'authorization: Bearer <token>')"
        )
    if who.kind != needed.kind:
        return PermissionDenied(f"{who.kind} tokens cannot call {method}")
    if needed.role and not who.has_role(needed.role):
        return PermissionDenied(f"{method} needs role {needed.role}; token {who.name!r} has {who.role}")
    return None


def acting_as(who: Principal) -> None:
    """Make `who` the current principal of this task (what AuthInterceptor does for a gRPC call)."""
    _CURRENT.set(who)


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
