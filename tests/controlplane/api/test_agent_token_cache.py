"""AgentTokenCache: an agent token's principal is reused for half a second; a user token, an unknown
token and a lookup that raced a revocation are never kept."""

from __future__ import annotations

from controlplane.api.auth import AgentTokenCache
from controlplane.services.tokens import Principal

AGENT = Principal("a1", "agent", "", 1, "default", None)
USER = Principal("ann", "user", "submit", 2, "", None)


class Tokens:
    """The token table a lookup reads, counting its reads; a clock the test moves."""

    def __init__(self) -> None:
        self.rows = {"ha": AGENT, "hu": USER}
        self.reads = 0
        self.now = 0.0
        self.during_read = lambda: None

    async def lookup(self, digest: str) -> Principal | None:
        self.reads += 1
        found = self.rows.get(digest)
        self.during_read()
        return found


async def test_an_agent_token_is_read_once_per_half_second_and_a_drop_forgets_it() -> None:
    db = Tokens()
    cache = AgentTokenCache(db.lookup, 0.5, lambda: db.now)
    assert [await cache("ha") for _ in range(3)] == [AGENT] * 3
    assert db.reads == 1
    db.now = 0.5
    assert await cache("ha") == AGENT and db.reads == 2, "read again once half a second old"
    del db.rows["ha"]
    cache.drop("a1")  # revoked through a replica
    assert await cache("ha") is None


async def test_user_and_unknown_tokens_are_read_every_time() -> None:
    db = Tokens()
    cache = AgentTokenCache(db.lookup, 0.5, lambda: db.now)
    for _ in range(2):
        assert await cache("hu") == USER
        assert await cache("nope") is None
    assert db.reads == 4


async def test_a_lookup_that_raced_a_revocation_is_not_kept() -> None:
    db = Tokens()
    cache = AgentTokenCache(db.lookup, 0.5, lambda: db.now)
    db.during_read = lambda: cache.drop("a1")  # revoked while the lookup read the token live
    assert await cache("ha") == AGENT
    db.during_read = lambda: None
    del db.rows["ha"]
    assert await cache("ha") is None
