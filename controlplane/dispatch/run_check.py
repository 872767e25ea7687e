"""The run check, every `run_check_seconds`: each replica flushes the activity it saw on the runs whose
streams and model calls it serves (kept in memory meanwhile, so output and model calls cost no extra
write); the leading replica then ends the running runs that made no progress for `run_stall_checks`
checks as `timeout` and tells their agents to cancel them. Activity reaches the database within one
check, so the leader never ends a run another replica saw working."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from controlplane.config import ServerConfig
from controlplane.services import run_ceiling
from controlplane.services.notify import Notifier
from controlplane.store.engine import Store
from controlplane.store.models import utcnow
from controlplane.store.objects import ObjectStore

log = logging.getLogger("drover.run_check")


class RunActivity:
    """When this replica last saw each run make progress (output, a model or tool call), until flushed."""

    def __init__(self, clock: Callable[[], dt.datetime] = utcnow) -> None:
        self.clock = clock
        self._seen: dict[str, dt.datetime] = {}

    def seen(self, run_id: str) -> None:
        self._seen[run_id] = self.clock()

    def take(self) -> dict[str, dt.datetime]:
        taken, self._seen = self._seen, {}
        return taken

    def give_back(self, taken: dict[str, dt.datetime]) -> None:
        """A flush that failed: its activity is flushed with the next one (newer sightings win)."""
        for run_id, when in taken.items():
            self._seen[run_id] = max(when, self._seen.get(run_id, when))


class Agents(Protocol):
    def tell_cancel(self, runs: list[tuple[str, str]], reason: str) -> None: ...


class RunCheck:
    def __init__(
        self,
        store: Store,
        config: ServerConfig,
        activity: RunActivity,
        agents: Agents,
        notifier: Notifier,
        wake: Callable[[], None],
        leading: Callable[[], Awaitable[bool]],
        objects: ObjectStore | None = None,
        clock: Callable[[], dt.datetime] = utcnow,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.store, self.config, self.activity, self.agents = store, config, activity, agents
        self.notifier, self.wake, self.leading, self.objects = notifier, wake, leading, objects
        self.clock, self.sleep = clock, sleep
        self.checking_since: dt.datetime | None = None
        """Since when this process has been the leader checking runs without a break (None: it is not)."""

    async def run_forever(self) -> None:
        while True:
            await self.sleep(self.config.run_check_seconds)
            try:
                await self.check()
            except Exception:
                log.exception("run check failed")

    async def check(self) -> list[run_ceiling.Stalled]:
        """One check; answers the runs it ended."""
        seen = self.activity.take()
        if seen:
            try:
                await self.store.run(run_ceiling.record_activity, seen)
            except Exception:
                self.activity.give_back(seen)
                raise
        if not await self.leading():
            self.checking_since = None  # another replica checks; taking over starts a full window afresh
            return []
        now = self.clock()
        if self.checking_since is None:
            self.checking_since = now
        every = dt.timedelta(seconds=self.config.run_check_seconds)
        ended = await self.store.run(
            run_ceiling.end_stalled_runs,
            now,
            every,
            self.config.run_stall_checks,
            self.checking_since,
            self.config.lifecycle,
            self.objects,
        )
        for stalled in ended:
            log.warning("run %s ended: %s", stalled.run_id, stalled.reason)
            self.agents.tell_cancel([(stalled.run_id, stalled.agent)], stalled.reason)
        if ended:
            self.notifier.notify()
            self.wake()
        return ended
