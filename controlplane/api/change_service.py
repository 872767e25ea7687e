"""drover.v1.ChangeService: decode, call the domain, encode. Every call sees only the projects of its token."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from controlplane import metrics
from controlplane.api import auth, change_queries, convert, validation
from controlplane.api.agent_stream import AgentSessions
from controlplane.api.status import reporting
from controlplane.config import HarnessConfig
from controlplane.dispatch import quota
from controlplane.domain import graph
from controlplane.services import amend, change_lifecycle, recovery, tokens
from controlplane.services.notify import Notifier
from controlplane.store.engine import Store
from controlplane.store.objects import ObjectStore
from drover.errors import FailedPrecondition, Unauthenticated
from drover.v1 import change_pb2, change_pb2_grpc, types_pb2

WATCH_POLL_SECONDS = 1.0


async def still_allowed(store: Store, who: tokens.Principal) -> None:
    """A long stream stops at the next poll once its token is revoked or has expired."""
    if not await store.read(tokens.still_valid, who.token_id):
        raise Unauthenticated(f"token {who.name!r} was revoked or has expired")


class ChangeService(change_pb2_grpc.ChangeServiceServicer):
    def __init__(
        self,
        store: Store,
        notifier: Notifier,
        objects: ObjectStore,
        agents: AgentSessions,
        wake: Callable[[], None],
        limits: validation.Limits = validation.Limits(),
        harness: Callable[[], HarnessConfig] = HarnessConfig,
        run_and_assign: Callable[..., Awaitable[Any]] | None = None,
    ) -> None:
        self.store, self.notifier, self.objects, self.agents = store, notifier, objects, agents
        self.wake, self.limits, self.harness = wake, limits, harness
        self.run_and_assign = run_and_assign or store.run
        """A submit's transaction that also assigns its command runs (`Dispatcher.run_and_assign`)."""

    async def _changed(self, change_id: str) -> types_pb2.Change:
        """After a Change moved: wake the watchers and the dispatcher, answer the Change as it is now."""
        self.notifier.notify()
        self.wake()
        return await self.store.read(change_queries.get_change, change_id)

    @reporting
    async def SubmitChange(
        self, request: change_pb2.SubmitChangeRequest, context: grpc.aio.ServicerContext
    ) -> types_pb2.Change:
        who = auth.current()
        spec = convert.change_spec(request)
        worked_by_model = [i for i, t in enumerate(spec.tasks) if not t.command]
        if worked_by_model and not quota.has_model_key(self.harness(), os.environ):
            raise FailedPrecondition(quota.NO_MODEL_KEY, field=f"tasks[{worked_by_model[0]}]")
        # A command Task needs no routing decision: its run can go to an agent in the submit's transaction.
        run = self.run_and_assign if any(task.command for task in spec.tasks) else self.store.run
        change_id = await run(change_lifecycle.submit_change, spec, who.name, who.projects)
        return await self._changed(change_id)

    @reporting
    async def GetChange(
        self, request: change_pb2.GetChangeRequest, context: grpc.aio.ServicerContext
    ) -> types_pb2.Change:
        return await self.store.read(change_queries.get_change, request.change_id, auth.current().projects)

    @reporting
    async def ListChanges(
        self, request: change_pb2.ListChangesRequest, context: grpc.aio.ServicerContext
    ) -> change_pb2.ListChangesResponse:
        page = await self.store.read(
            change_queries.list_changes,
            request.project,
            request.page_size or request.limit,
            request.page_token,
            auth.current().projects,
            request.status,
            request.submitted_by,
        )
        return change_pb2.ListChangesResponse(changes=page.items, next_page_token=page.next_token)

    @reporting
    async def WatchChange(
        self, request: change_pb2.WatchChangeRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[types_pb2.Event]:
        who = auth.current()
        # Reads only, on the read connections; asleep until an event of this Change commits here.
        await self.store.read(change_queries.change_status, request.change_id, who.projects)  # NOT_FOUND first
        after = request.after_event_id
        with self.store.wakeups.watching(request.change_id) as watch:
            while True:
                seen = watch.version  # before reading: a commit during the read is not slept through
                await still_allowed(self.store, who)
                status, page = await self.store.read(change_queries.watch_page, request.change_id, after, who.projects)
                for event in page.items:
                    after = event.id
                    yield event
                if not page.items and status in graph.TERMINAL_CHANGE:
                    return
                if not page.items:
                    woken = await watch.wait(seen, WATCH_POLL_SECONDS)
                    metrics.on_watch_wakeup("event" if woken else "poll")

    @reporting
    async def CancelChange(
        self, request: change_pb2.CancelChangeRequest, context: grpc.aio.ServicerContext
    ) -> types_pb2.Change:
        who = auth.current()
        runs = await self.store.run(
            lambda s: change_lifecycle.cancel_change(
                s, request.change_id, scope=who.projects, by=who.name, may_manage=who.has_role("run.manage")
            )
        )
        self.agents.tell_cancel([(r.id, r.agent) for r in runs], "change cancelled")
        return await self._changed(request.change_id)

    @reporting
    async def ListChangeSets(
        self, request: change_pb2.ListChangeSetsRequest, context: grpc.aio.ServicerContext
    ) -> change_pb2.ListChangeSetsResponse:
        page = await self.store.read(
            change_queries.changesets, request.change_id, request.page_size, request.page_token, auth.current().projects
        )
        return change_pb2.ListChangeSetsResponse(changesets=page.items, next_page_token=page.next_token)

    @reporting
    async def GetPatch(
        self, request: change_pb2.GetPatchRequest, context: grpc.aio.ServicerContext
    ) -> change_pb2.Patch:
        text = await self.store.read(change_queries.patch, self.objects, request.changeset_id, auth.current().projects)
        return change_pb2.Patch(changeset_id=request.changeset_id, text=text)

    @reporting
    async def RaiseBudget(
        self, request: change_pb2.RaiseBudgetRequest, context: grpc.aio.ServicerContext
    ) -> types_pb2.Change:
        who = auth.current()
        await self.store.run(
            lambda s: change_lifecycle.raise_budget(
                s,
                request.change_id,
                request.budget_usd,
                scope=who.projects,
                by=who.name,
                may_manage=who.has_role("run.manage"),
            )
        )
        return await self._changed(request.change_id)

    @reporting
    async def RetryTask(
        self, request: change_pb2.RetryTaskRequest, context: grpc.aio.ServicerContext
    ) -> types_pb2.Change:
        who = auth.current()
        tiers = frozenset(self.harness().tiers)
        task = await self.store.run(
            lambda s: recovery.retry_task(
                s,
                request.task_id,
                request.tier,
                tiers,
                scope=who.projects,
                by=who.name,
                may_manage=who.has_role("run.manage"),
            )
        )
        return await self._changed(task.change_id)

    @reporting
    async def AmendChange(
        self, request: change_pb2.AmendChangeRequest, context: grpc.aio.ServicerContext
    ) -> types_pb2.Change:
        who = auth.current()
        tasks = convert.change_spec(change_pb2.SubmitChangeRequest(tasks=request.tasks)).tasks
        edges = [(e.task, e.depends_on) for e in request.edges]
        worked_by_model = [i for i, t in enumerate(tasks) if not t.command]
        if worked_by_model and not quota.has_model_key(self.harness(), os.environ):
            raise FailedPrecondition(quota.NO_MODEL_KEY, field=f"tasks[{worked_by_model[0]}]")
        await self.store.run(
            lambda s: amend.amend_change(
                s,
                request.change_id,
                tasks,
                edges,
                scope=who.projects,
                by=who.name,
                may_manage=who.has_role("run.manage"),
            )
        )
        return await self._changed(request.change_id)

    @reporting
    async def GetSpend(
        self, request: change_pb2.GetSpendRequest, context: grpc.aio.ServicerContext
    ) -> change_pb2.Spend:
        return await self.store.read(change_queries.spend, request.change_id, auth.current().projects)
