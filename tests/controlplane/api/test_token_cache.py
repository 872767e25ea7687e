"""TokenCache: a token's principal is reused for half a second and never past the token's expiry;
an unknown token and a lookup that raced a revocation are never kept."""

from __future__ import annotations

import datetime as dt

from controlplane.api.auth import TokenCache
from controlplane.services.tokens import Principal

START = dt.datetime(2026, 12, 5, tzinfo=dt.UTC)
AGENT = Principal("a1", "agent", "", 1, "default", None)
USER = Principal("ann", "user", "submit", 2, "", None)
EXPIRING = Principal("eve", "user", "submit", 3, "", None, START + dt.timedelta(seconds=0.2))


class Tokens:
    """The token table a lookup reads, counting its reads; a clock the test moves."""

    def __init__(self) -> None:
        self.rows = {"ha": AGENT, "hu": USER, "he": EXPIRING}
        self.reads = 0
        self.now = 0.0
        self.during_read = lambda: None

    async def lookup(self, digest: str) -> Principal | None:
        self.reads += 1
        found = self.rows.get(digest)
        self.during_read()
        return found

    def cache(self) -> TokenCache:
        return TokenCache(self.lookup, 0.5, lambda: self.now, lambda: START + dt.timedelta(seconds=self.now))


async def test_a_token_is_read_once_per_half_second_and_a_drop_forgets_it() -> None:
    for digest, principal in (("ha", AGENT), ("hu", USER)):
        db = Tokens()
        cache = db.cache()
        assert [await cache(digest) for _ in range(3)] == [principal] * 3
        assert db.reads == 1
        db.now = 0.5
        assert await cache(digest) == principal and db.reads == 2, "read again once half a second old"
        del db.rows[digest]
        cache.drop(principal.name)  # revoked through a replica
        assert await cache(digest) is None


async def test_a_cached_token_is_not_used_past_its_expiry() -> None:
    db = Tokens()
    cache = db.cache()
    assert await cache("he") == EXPIRING and await cache("he") == EXPIRING
    assert db.reads == 1
    db.now = 0.25  # the token expired at 0.2, before the half second was up
    del db.rows["he"]  # the store no longer lets it in
    assert await cache("he") is None and db.reads == 2


async def test_an_unknown_token_is_read_every_time() -> None:
    db = Tokens()
    cache = db.cache()
    for _ in range(2):
        assert await cache("nope") is None
    assert db.reads == 2


async def test_a_lookup_that_raced_a_revocation_is_not_kept() -> None:
    db = Tokens()
    cache = db.cache()
    db.during_read = lambda: cache.drop("a1")  # revoked while the lookup read the token live
    assert await cache("ha") == AGENT
    db.during_read = lambda: None
    del db.rows["ha"]
    assert await cache("ha") is None
