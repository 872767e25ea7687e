"""The notification loop (issue 28): run by the leader only, it makes the outbox's deliveries from new
events, then POSTs the due ones to their `[[notify]]` targets, each signed with its target's secret, and
records what came of each attempt. The POSTs happen outside any transaction and outside any request:
a slow or dead receiver delays only its own notifications.

Delivery is at least once: a leader killed between a receiver's 2xx and the record of it leaves the
delivery to be sent again (same X-Drover-Delivery id, same body) once its attempt's lease runs out."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from controlplane.domain import notifications as rules
from controlplane.services import delivery_retention
from controlplane.services import notification_outbox as outbox
from controlplane.store.engine import Store

log = logging.getLogger("drover.notify")

POLL_SECONDS = 1.0
TIMEOUT_SECONDS = 10.0
"""One attempt's whole HTTP exchange."""
LEASE_SECONDS = TIMEOUT_SECONDS + 10.0
"""A taken delivery is due again after this if its attempt's result was never recorded (its sender died)."""
BATCH = 16
"""Deliveries attempted at once."""
PRUNE_SECONDS = 3600.0
"""How often the leader prunes finished deliveries older than the retention."""

Post = Callable[[str, bytes, dict[str, str]], Awaitable[tuple[int, str]]]
"""POST (url, body, headers): the HTTP status, or 0 and why nothing answered."""


async def http_post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
    import httpx2

    try:
        async with asyncio.timeout(TIMEOUT_SECONDS):  # httpx's timeout is per phase; this bounds the whole
            async with httpx2.AsyncClient(timeout=TIMEOUT_SECONDS, follow_redirects=False) as client:
                answer = await client.post(url, content=body, headers=headers)
                return answer.status_code, "" if answer.is_success else f"HTTP {answer.status_code}"
    except TimeoutError:
        return 0, f"no answer within {TIMEOUT_SECONDS:.0f} s"
    except (httpx2.HTTPError, httpx2.InvalidURL) as err:  # the URL may hold a secret (a Slack webhook's path)
        return 0, f"{type(err).__name__}: {err}".replace(url, "<the target's url>")


class NotificationLoop:
    def __init__(
        self,
        store: Store,
        targets: Callable[[], Sequence[rules.Target]],
        leading: Callable[[], Awaitable[bool]],
        post: Post = http_post,
        retention_days: float = 30.0,
    ) -> None:
        self.store, self.targets, self.leading, self.post = store, targets, leading, post
        self.retention_days = retention_days
        self._pruned_at = -PRUNE_SECONDS  # monotonic time of the last prune; the first pass prunes

    async def run_forever(self) -> None:
        while True:
            try:
                if await self.leading():
                    await self.pass_once()
                    await self.prune_due()
            except Exception:
                log.exception("delivering notifications failed; retrying")
            await asyncio.sleep(POLL_SECONDS)

    async def pass_once(self) -> None:
        """Make deliveries from new events, then attempt the due ones (a batch at a time)."""
        targets = {t.name: t for t in self.targets()}
        while await self.store.run(outbox.make_deliveries, list(targets.values())) == outbox.EVENTS_PER_PASS:
            pass  # a full batch of events looked at: there may be more
        while True:
            due = await self.store.run(outbox.take_due, list(targets), BATCH, LEASE_SECONDS)
            if not due:
                return
            await asyncio.gather(*(self.attempt(targets[d.target], d) for d in due))
            if len(due) < BATCH or not await self.leading():
                return

    async def prune_due(self) -> None:
        """Once every PRUNE_SECONDS: prune finished deliveries past the retention, batch by batch."""
        if asyncio.get_running_loop().time() - self._pruned_at < PRUNE_SECONDS:
            return
        self._pruned_at = asyncio.get_running_loop().time()
        while True:
            forge, notes = await self.store.run(delivery_retention.prune_all, self.retention_days)
            if forge or notes:
                log.info("pruned %d forge deliveries and %d notification deliveries", forge, notes)
            if max(forge, notes) < delivery_retention.BATCH:
                return

    async def attempt(self, target: rules.Target, attempt: outbox.Attempt) -> None:
        sent = rules.body(target.format, attempt.payload)
        headers = rules.headers(target.secret, attempt.id, attempt.event, sent)
        status, error = await self.post(target.url, sent, headers)
        state = await self.store.run(outbox.record_attempt, attempt, status, error)
        if state != "delivered":
            level = logging.WARNING if state == "failed" else logging.INFO
            log.log(level, "notification %s to %s: attempt %d: %s", attempt.id, target.name, attempt.attempt, error)
