"""Bearer tokens: agent tokens scoped to a pool, user tokens with a role and the projects they may use.
Tokens are stored as SHA-256 hashes (the token itself is shown once), may expire, and are revoked at once."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import re
import secrets
from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.domain.names import AGENT_NAME, NAME, ROLES, TOKEN_KINDS
from controlplane.store.engine import aware
from controlplane.store.events import add_event
from controlplane.store.models import Project, Token, utcnow
from drover.errors import InvalidArgument, NotFound

_DURATION = re.compile(r"(\d+)([smhdw])")


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
MAX_LIFETIME_SECONDS = 100 * 365 * 86400


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
    expires_at: dt.datetime | None = dataclasses.field(default=None, compare=False)
    """When the token expires (None: never); a cached principal is not used past it."""

    def has_role(self, role: str) -> bool:
        return self.kind == "user" and ROLES.index(self.role) >= ROLES.index(role)

    def may_use(self, project: str) -> bool:
        return self.projects is None or project in self.projects


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
    if seconds > MAX_LIFETIME_SECONDS:  # past it the expiry date overflows; "never" is the empty duration
        raise InvalidArgument("at most 100 years (leave it empty for a token that never expires)", field="expires_in")
    return dt.timedelta(seconds=seconds)


def create_token(
    s: Session,
    kind: str,
    name: str,
    role: str = "",
    monthly_budget_usd: float = 0.0,
    *,
    pool: str = "",
    projects: Iterable[str] = (),
    expires_in: dt.timedelta | None = None,
    created_by: str = "",
    event: bool = True,
) -> str:
    """Store a new token's hash; answers the token, which is shown once and never stored. `created_by`
    names the token that minted it ("": the host's `controlplane token create`); the first start's own
    two tokens record no event (`event`), so a fresh control plane's history starts with what users did."""
    if kind not in TOKEN_KINDS:
        raise InvalidArgument(f"must be one of {', '.join(TOKEN_KINDS)}", field="kind")
    if not AGENT_NAME.fullmatch(name):
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
        if pool and not NAME.fullmatch(pool):
            raise InvalidArgument(f"{pool!r} is not a pool name", field="pool")
    if not (monthly_budget_usd >= 0) or monthly_budget_usd > 1e9:  # also refuses NaN
        raise InvalidArgument("must be a number from 0 to 1e9", field="monthly_budget_usd")
    token = f"drv_{kind[0]}_{secrets.token_urlsafe(32)}"
    now = utcnow()
    s.add(
        Token(
            name=name,
            kind=kind,
            role=role,
            token_hash=hash_token(token),
            monthly_budget_usd=monthly_budget_usd,
            pool=pool,
            projects=projects,
            created_at=now,
            expires_at=now + expires_in if expires_in else None,
            created_by=created_by,
        )
    )
    if event:
        add_event(s, "token.created", name=name, token_kind=kind, role=role, projects=projects, by=created_by or "host")
    return token


def principal_of(row: Token) -> Principal:
    return Principal(
        row.name,
        row.kind,
        row.role,
        row.id,
        row.pool or "",
        frozenset(row.projects) if row.kind == "user" and row.projects else None,
        aware(row.expires_at),
    )


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


def within(row: Token, scope: frozenset[str] | None) -> bool:
    """Whether a caller scoped to `scope` sees (and may revoke) the token `row`: an unscoped caller sees
    every token; a scoped one the user tokens whose projects all lie within its own."""
    if scope is None:
        return True
    return row.kind == "user" and bool(row.projects) and set(row.projects) <= scope


def revoke(s: Session, name: str, kind: str = "", scope: frozenset[str] | None = None, by: str = "host") -> int:
    """Revoke every live token named `name` (of `kind` when given) that a caller scoped to `scope` sees;
    answers how many. The others do not exist for it: NOT_FOUND as for a name never used."""
    q = select(Token).where(Token.name == name, Token.revoked_at.is_(None))
    if kind:
        q = q.where(Token.kind == kind)
    rows = [row for row in s.scalars(q) if within(row, scope)]
    if not rows:
        raise NotFound(f"no live token named {name!r}", field="name")
    now = utcnow()
    for row in rows:
        row.revoked_at = now
    add_event(s, "token.revoked", name=name, token_kind=rows[0].kind, count=len(rows), by=by)
    return len(rows)
