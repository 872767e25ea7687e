"""What a token may mint through the API: never more than it holds. A minted token has no higher role
than its minter's, no project the minter may not use (a scoped minter's by default: its own), no larger
monthly budget (the minter's by default, when it has one) and no later expiry (the minter's by default,
when it has one). Agent tokens, and admin tokens, only come from an admin token not scoped to projects."""

from __future__ import annotations

import dataclasses
import datetime as dt

from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.domain.names import ROLES
from controlplane.services import tenancy, tokens
from controlplane.store.engine import aware
from controlplane.store.models import Token, utcnow
from drover.errors import AlreadyExists, InvalidArgument, NotFound, PermissionDenied


@dataclasses.dataclass(frozen=True)
class TokenRequest:
    """A token asked for through the API, each default in one place."""

    name: str
    kind: str = "user"
    role: str = ""
    """User tokens: submit (default), run.manage or admin."""
    pool: str = ""
    projects: tuple[str, ...] = ()
    """User tokens: the projects it may use; empty: all (a scoped minter's: its own)."""
    monthly_budget_usd: float = 0.0
    expires_in: dt.timedelta | None = None
    """None: never (a minter that expires: when it does)."""


def mint(s: Session, minter: tokens.Principal, want: TokenRequest) -> tuple[Token, str]:
    """Store a token no stronger than `minter`; answers its row and the token (shown once)."""
    held = s.get(Token, minter.token_id)
    if held is None or not tokens.usable(held, utcnow()):
        raise PermissionDenied("the minting token is revoked or expired")
    want = bounded(held, minter, want)
    clash = s.scalars(select(Token).where(Token.name == want.name, Token.revoked_at.is_(None)))
    if any(not tokens.within(row, minter.projects) for row in clash):
        raise AlreadyExists(f"a token named {want.name!r} exists; choose another name", field="name")
    secret = tokens.create_token(
        s,
        want.kind,
        want.name,
        want.role,
        want.monthly_budget_usd,
        pool=want.pool,
        projects=want.projects,
        expires_in=want.expires_in,
        created_by=minter.name,
    )
    s.flush()
    row = s.scalar(select(Token).where(Token.token_hash == tokens.hash_token(secret)))
    assert row is not None
    ends, own = aware(held.expires_at), aware(row.expires_at)
    if ends is not None and (own is None or own > ends):  # computed a moment apart: the same instant at most
        row.expires_at = held.expires_at
    return row, secret


def bounded(held: Token, minter: tokens.Principal, want: TokenRequest) -> TokenRequest:
    """`want` with the minter's limits as its defaults; PERMISSION_DENIED, NOT_FOUND or INVALID_ARGUMENT
    (naming the field) when it asks for more than the minter holds."""
    if want.kind == "agent":
        tenancy.unscoped(minter.projects, "minting an agent token", "kind")
        return want
    role = want.role or "submit"
    if role in ROLES and ROLES.index(role) > ROLES.index(minter.role):
        raise PermissionDenied(f"a {minter.role} token cannot mint a {role} token", field="role")
    if role == "admin":
        tenancy.unscoped(minter.projects, "minting an admin token", "role")
    projects = want.projects
    if minter.projects is not None:
        projects = projects or tuple(sorted(minter.projects))
        for project in projects:
            if project not in minter.projects:
                raise NotFound(f"no project {project!r}", field="projects")
    budget = want.monthly_budget_usd
    if held.monthly_budget_usd:
        budget = budget or held.monthly_budget_usd
        if budget > held.monthly_budget_usd:
            raise InvalidArgument(
                f"at most {held.monthly_budget_usd:g}, the minting token's own budget", field="monthly_budget_usd"
            )
    return dataclasses.replace(
        want, role=role, projects=projects, monthly_budget_usd=budget, expires_in=_expiry(held, want.expires_in)
    )


def _expiry(held: Token, wanted: dt.timedelta | None) -> dt.timedelta | None:
    ends = aware(held.expires_at)
    if ends is None:
        return wanted
    left = ends - utcnow()
    if wanted is None:
        return left
    if wanted > left:
        raise InvalidArgument(
            f"must not outlive the minting token (it expires {ends:%Y-%m-%d %H:%M} UTC)", field="expires_in"
        )
    return wanted


def visible_tokens(
    s: Session, scope: frozenset[str] | None, include_revoked: bool, after_id: int, limit: int
) -> list[Token]:
    """Tokens by id after `after_id` that a caller scoped to `scope` sees, at most `limit`."""
    q = select(Token).where(Token.id > after_id).order_by(Token.id)
    if not include_revoked:
        q = q.where(Token.revoked_at.is_(None))
    if scope is None:
        return list(s.scalars(q.limit(limit)))
    out: list[Token] = []
    for row in s.scalars(q):  # a scoped admin's few tokens: filtered here, JSON lists differ by dialect
        if tokens.within(row, scope):
            out.append(row)
            if len(out) == limit:
                break
    return out
