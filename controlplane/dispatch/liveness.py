"""The liveness sweep, every few seconds: agents whose token was revoked lose their stream; the runs of
agents gone longer than the lost window fail as agent_lost (a window counted from when this process
began judging at the earliest: an outage of the control plane never counts against an agent);
reservations whose settle never came settle at their estimate; the claims of live runs are renewed at half-life."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.config import ServerConfig
from controlplane.domain import presence, run_states
from controlplane.services import agent_presence, claims, model_calls, questions, run_input
from controlplane.services.notify import Notifier
from controlplane.store import escrow
from controlplane.store.engine import Store
from controlplane.store.models import Run, utcnow
from controlplane.store.objects import ObjectStore

log = logging.getLogger("drover.liveness")
RESERVATION_TTL = dt.timedelta(minutes=15)
SLICE_IDLE = dt.timedelta(seconds=30)
"""An escrow slice untouched this long goes back to its meter (its holder stopped, or went quiet)."""
"""Longer than any model call attempt (10 min ceiling): a reservation older than this was never settled."""


class Agents(Protocol):
    def connected(self) -> list[str]: ...

    async def close_revoked(self) -> None: ...

    def tell_inputs(self, pending: list[run_input.Pending]) -> None: ...


class Liveness:
    def __init__(
        self,
        store: Store,
        config: ServerConfig,
        notifier: Notifier,
        agents: Agents,
        wake: Callable[[], None],
        clock: Callable[[], dt.datetime] = utcnow,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        leading: Callable[[], Awaitable[bool]] | None = None,
        replica: str = "",
        objects: ObjectStore | None = None,
    ) -> None:
        self.store, self.config, self.notifier, self.agents = store, config, notifier, agents
        self.objects = objects
        """Where the tool logs of the runs it fails are written."""
        self.wake, self.clock, self.sleep = wake, clock, sleep
        self.leading = leading or _always
        self.replica = replica
        self.up_since: dt.datetime | None = None
        """Since when this process has been judging lost agents without a break (None: it is not)."""
        self._last_judged: dt.datetime | None = None

    async def run_forever(self) -> None:
        while True:
            await self.sleep(self.every)
            try:
                await self.sweep()
            except Exception:
                log.exception("liveness sweep failed")

    @property
    def every(self) -> float:
        return max(0.2, min(5.0, self.config.agent_lost_seconds / 4))

    @property
    def lost_window(self) -> dt.timedelta:
        return dt.timedelta(seconds=self.config.agent_lost_seconds)

    @property
    def lease(self) -> dt.timedelta:
        """How long an agent counts as connected after its replica last renewed it."""
        return dt.timedelta(seconds=max(self.config.agent_silence_seconds, 3 * self.every))

    async def sweep(self) -> list[str]:
        """One pass; answers the runs it failed. Every replica renews the leases of its agents and their
        claims; the leading replica alone expires leases and fails, settles, parks and returns idle escrow slices
        (one sweeper)."""
        await self.agents.close_revoked()
        now = self.clock()
        connected = self.agents.connected()
        await self.store.run(agent_presence.renew_leases, self.replica, now + self.lease)
        await self.store.run(renew_claims, connected, now)
        if not await self.leading():
            self.up_since = self._last_judged = None  # another replica judges; taking over starts afresh
            return []
        up_since = presence.up_period_start(self.up_since, self._last_judged, now, self.lost_window / 2)
        if up_since != self.up_since:
            log.info(
                "judging lost agents from %s: every agent has until %s to reconnect",
                up_since.isoformat(timespec="seconds"),
                (up_since + self.lost_window).isoformat(timespec="seconds"),
            )
            self.up_since = up_since
        expired = await self.store.run(agent_presence.expire_leases, now, self.lease)
        if expired:
            log.warning("the leases of %d agents expired (their replica is gone): %s", len(expired), expired)
        failed = await self.store.run(
            agent_presence.fail_lost_runs, self.lost_window, now, self.config.lifecycle, up_since, self.objects
        )
        self._last_judged = now
        await self.store.run(model_calls.settle_expired, RESERVATION_TTL)
        for key in await self.store.read(escrow.idle_meters, SLICE_IDLE):
            await self.store.run(escrow.return_idle, key, SLICE_IDLE)
        parking = await self.store.run(questions.park_overdue, now)
        if parking:
            log.info("parking %d sessions held past their answer window", len(parking))
            self.agents.tell_inputs(parking)
        if failed:
            log.warning("failed %d runs of lost agents", len(failed))
            self.notifier.notify()
            self.wake()
        return failed


def renew_claims(s: Session, connected: list[str], now: dt.datetime) -> None:
    """The claims of live runs on connected agents are renewed at half-life."""
    here = set(connected)  # thousands of agents: filtered here, not as thousands of query parameters
    for run_id, agent in s.execute(select(Run.id, Run.agent).where(Run.state.in_(run_states.ACTIVE))):
        if agent in here:
            claims.renew_due(s, run_id, now)


async def _always() -> bool:
    return True
