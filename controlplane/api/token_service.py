"""drover.v1.TokenService: tokens minted, listed and revoked through the API (role admin), never with
more than the caller holds (services/minting.py). The token is answered once, by CreateToken."""

from __future__ import annotations

from collections.abc import Callable

import grpc
from sqlalchemy.orm import Session

from controlplane.api import auth
from controlplane.api.project_service import rfc3339
from controlplane.api.status import reporting
from controlplane.services import minting, paging, tokens
from controlplane.store.engine import Store
from controlplane.store.models import Token
from drover.v1 import token_pb2, token_pb2_grpc


def token_message(t: Token) -> token_pb2.Token:
    """What is known of a token: never the token, which is not stored (only its hash, not shown either)."""
    return token_pb2.Token(
        id=t.id,
        name=t.name,
        kind=t.kind,
        role=t.role or "",
        pool=t.pool or "",
        projects=list(t.projects or []) if t.kind == "user" else [],
        monthly_budget_usd=t.monthly_budget_usd or 0.0,
        created_at=rfc3339(t.created_at),
        created_by=t.created_by or "",
        expires_at=rfc3339(t.expires_at),
        last_used_at=rfc3339(t.last_used_at),
        revoked_at=rfc3339(t.revoked_at),
    )


def token_request(r: token_pb2.CreateTokenRequest) -> minting.TokenRequest:
    return minting.TokenRequest(
        name=r.name,
        kind=r.kind or "user",
        role=r.role,
        pool=r.pool,
        projects=tuple(r.projects),
        monthly_budget_usd=r.monthly_budget_usd,
        expires_in=tokens.parse_duration(r.expires_in) if r.expires_in else None,
    )


class TokenService(token_pb2_grpc.TokenServiceServicer):
    def __init__(self, store: Store, on_revoked: Callable[[str], None] = lambda name: None) -> None:
        self.store = store
        self.on_revoked = on_revoked
        """Called with a revoked token's name once the revocation committed (caches forget it)."""

    @reporting
    async def CreateToken(
        self, request: token_pb2.CreateTokenRequest, context: grpc.aio.ServicerContext
    ) -> token_pb2.CreateTokenResponse:
        who, want = auth.current(), token_request(request)

        def create(s: Session) -> token_pb2.CreateTokenResponse:
            row, secret = minting.mint(s, who, want)
            return token_pb2.CreateTokenResponse(token=token_message(row), secret=secret)

        return await self.store.run(create)

    @reporting
    async def ListTokens(
        self, request: token_pb2.ListTokensRequest, context: grpc.aio.ServicerContext
    ) -> token_pb2.ListTokensResponse:
        scope = auth.current().projects
        size = paging.page_size(request.page_size, 100, 1000)
        after = paging.decode(request.page_token, (int,))[0] if request.page_token else 0

        def page(s: Session) -> paging.Page[token_pb2.Token]:
            rows = minting.visible_tokens(s, scope, request.include_revoked, after, size + 1)
            return paging.take(rows, size, token_message, lambda m: m.ByteSize(), lambda r: paging.encode(r.id))

        found = await self.store.read(page)
        return token_pb2.ListTokensResponse(tokens=found.items, next_page_token=found.next_token)

    @reporting
    async def RevokeToken(
        self, request: token_pb2.RevokeTokenRequest, context: grpc.aio.ServicerContext
    ) -> token_pb2.RevokeTokenResponse:
        who = auth.current()
        count = await self.store.run(tokens.revoke, request.name, request.kind, who.projects, who.name)
        self.on_revoked(request.name)
        return token_pb2.RevokeTokenResponse(revoked=count)
