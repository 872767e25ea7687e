"""The forge loop (issue 28): takes the kept webhook deliveries still `received` and ends each `done` or
`failed` with why. Run by the leader only (on SQLite this process always leads), woken when a delivery
is kept here and polling every few seconds for those kept by other replicas.

An issue labelled with the project's forge label starts a Change (controlplane.domain.forge_start
decides): the issue read from the forge, the Change submitted and linked to the issue in one
transaction, then ONE comment posted on the issue naming the Change. A comment on an issue may be a
`/drover` command (controlplane.dispatch.forge_commands). Every other delivery is done without action
for now."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable

from controlplane.config import HarnessConfig
from controlplane.dispatch import forge_commands, quota
from controlplane.dispatch.forge_outcomes import ForgeOutcomes
from controlplane.dispatch.forge_rounds import ForgeRounds
from controlplane.domain import forge_retry
from controlplane.domain import forge_rounds as rounds
from controlplane.domain import forge_start as starts
from controlplane.services import forge_start
from controlplane.services.credentials import Sealer
from controlplane.services.forge_client import ForgeClient, ForgeError
from controlplane.services.notify import Notifier
from controlplane.store.engine import Store
from drover.errors import DroverError

log = logging.getLogger("drover.forge")

POLL_SECONDS = 3.0


class ForgeLoop:
    def __init__(
        self,
        store: Store,
        sealer: Sealer,
        notifier: Notifier,
        wake_dispatch: Callable[[], None],
        leading: Callable[[], Awaitable[bool]],
        harness: Callable[[], HarnessConfig],
        console_url: str = "",
    ) -> None:
        self.store, self.sealer, self.notifier = store, sealer, notifier
        self.wake_dispatch, self.leading, self.harness = wake_dispatch, leading, harness
        self.console_url = console_url
        self.outcomes = ForgeOutcomes(store, sealer, console_url)  # the Changes' ends, told on the forge
        self._woken = asyncio.Event()
        self.tell_cancel: Callable[[list[tuple[str, str]], str], None] = lambda runs, reason: None
        """Tells the agents of cancelled runs (the server sets it to its agent sessions')."""
        model_key = lambda: quota.has_model_key(self.harness(), os.environ)  # noqa: E731
        self.rounds = ForgeRounds(store, sealer, notifier, wake_dispatch, model_key)  # fix rounds on pull requests

    def wake(self) -> None:
        """A delivery was kept: process it now rather than at the next poll."""
        self._woken.set()

    async def run_forever(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._woken.wait(), POLL_SECONDS)
            self._woken.clear()
            try:
                if await self.leading():
                    await self.process_pending()
                    await self.outcomes.pass_once()
            except Exception:
                log.exception("processing forge deliveries failed; retrying")
                await asyncio.sleep(POLL_SECONDS)

    async def process_pending(self) -> None:
        for delivery in await self.store.read(forge_start.pending):
            await self.process(delivery)
        await self.rounds.finish_rounds()

    async def process(self, d: forge_start.Pending) -> None:
        if d.event in rounds.EVENTS:  # checks, statuses, pull requests and reviews: fix rounds
            await self.rounds.process(d.delivery_id)
            return
        decision = starts.decide(d.event, d.action, d.label, d.forge_label, d.running_change)
        if decision.action == starts.COMMENT:
            await forge_commands.process_comment(self, d)
            return
        if decision.action == starts.SKIP:
            await self.store.run(forge_start.finish, d.delivery_id, "done", decision.why)
            return
        try:
            if not quota.has_model_key(self.harness(), os.environ):
                raise ForgeError(quota.NO_MODEL_KEY)
            access = await self.store.read(forge_start.forge_access, d.project, self.sealer)
            async with ForgeClient(access) as forge:
                issue = await forge.get_issue(d.number)
                spec = await forge_commands.issue_spec(self, d.project, issue)
                change_id = await self.store.run(forge_start.start_change, d.delivery_id, spec, d.number)
                if not change_id:
                    return
                self.notifier.notify()
                self.wake_dispatch()
                log.info("project %s: issue #%d started Change %s", d.project, d.number, change_id)
                comment = await forge.create_comment(d.number, starts.started_comment(change_id, self.console_url))
                await self.store.run(forge_start.record_comment, change_id, comment)
        except (ForgeError, DroverError) as err:
            await self.failed(d, err)

    async def failed(self, d: forge_start.Pending, err: ForgeError | DroverError) -> None:
        """A passing forge error (5xx, 429, unreachable) leaves the delivery to be tried again later; any
        other error fails it, saying why."""
        passing = isinstance(err, ForgeError) and forge_retry.passing(err.status)
        if passing and await self.store.run(forge_start.try_again, d.delivery_id, str(err)):
            log.warning("project %s: delivery %s will be tried again: %s", d.project, d.delivery_id, err)
            return
        log.warning("project %s: delivery %s failed: %s", d.project, d.delivery_id, err)
        await self.store.run(forge_start.finish, d.delivery_id, "failed", str(err))
