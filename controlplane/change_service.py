"""drover.v1.ChangeService: decode, call the domain, encode."""

from __future__ import annotations

from typing import AsyncIterator

import grpc

from controlplane import changesets, convert, graph, lifecycle, queries
from controlplane.auth import AuthInterceptor
from controlplane.fleet import Fleet
from controlplane.notify import Notifier
from controlplane.servicing import reporting
from controlplane.store import Store
from drover.v1 import change_pb2, change_pb2_grpc, types_pb2

WATCH_POLL_SECONDS = 1.0


class ChangeService(change_pb2_grpc.ChangeServiceServicer):
    def __init__(self, store: Store, fleet: Fleet, notifier: Notifier, auth: AuthInterceptor) -> None:
        self.store, self.fleet, self.notifier, self.auth = store, fleet, notifier, auth

    @reporting
    async def SubmitChange(self, request: change_pb2.SubmitChangeRequest,
                           context: grpc.aio.ServicerContext) -> types_pb2.Change:
        who = await self.auth.principal(context.invocation_metadata())
        spec = convert.change_spec(request)
        change_id = await self.store.run(lifecycle.submit_change, spec, who.name if who else "")
        self.notifier.notify()
        self.fleet.wake()
        return await self.store.run(queries.get_change, change_id)

    @reporting
    async def GetChange(self, request: change_pb2.GetChangeRequest,
                        context: grpc.aio.ServicerContext) -> types_pb2.Change:
        return await self.store.run(queries.get_change, request.change_id)

    @reporting
    async def ListChanges(self, request: change_pb2.ListChangesRequest,
                          context: grpc.aio.ServicerContext) -> change_pb2.ListChangesResponse:
        changes = await self.store.run(queries.list_changes, request.project, min(max(request.limit, 0), 500))
        return change_pb2.ListChangesResponse(changes=changes)

    @reporting
    async def WatchChange(self, request: change_pb2.WatchChangeRequest,
                          context: grpc.aio.ServicerContext) -> AsyncIterator[types_pb2.Event]:
        await self.store.run(queries.change_status, request.change_id)  # NOT_FOUND before streaming
        after = request.after_event_id
        while True:
            status = await self.store.run(queries.change_status, request.change_id)
            batch = await self.store.run(lambda s: queries.events(s, change_id=request.change_id, after_id=after))
            for event in batch:
                after = event.id
                yield event
            if not batch and status in graph.TERMINAL_CHANGE:
                return
            if not batch:
                await self.notifier.wait(WATCH_POLL_SECONDS)

    @reporting
    async def CancelChange(self, request: change_pb2.CancelChangeRequest,
                           context: grpc.aio.ServicerContext) -> types_pb2.Change:
        runs = await self.store.run(lifecycle.cancel_change, request.change_id)
        self.fleet.tell_cancel([(r.id, r.agent) for r in runs], "change cancelled")
        self.notifier.notify()
        self.fleet.wake()
        return await self.store.run(queries.get_change, request.change_id)

    @reporting
    async def ListChangeSets(self, request: change_pb2.ListChangeSetsRequest,
                             context: grpc.aio.ServicerContext) -> change_pb2.ListChangeSetsResponse:
        rows = await self.store.run(changesets.list_for_change, request.change_id)
        return change_pb2.ListChangeSetsResponse(changesets=[convert.changeset(cs, key) for cs, key in rows])

    @reporting
    async def GetPatch(self, request: change_pb2.GetPatchRequest,
                       context: grpc.aio.ServicerContext) -> change_pb2.Patch:
        text = await self.store.run(changesets.get_patch, self.fleet.objects, request.changeset_id)
        return change_pb2.Patch(changeset_id=request.changeset_id, text=text)

    @reporting
    async def RaiseBudget(self, request: change_pb2.RaiseBudgetRequest,
                          context: grpc.aio.ServicerContext) -> types_pb2.Change:
        await self.store.run(lifecycle.raise_budget, request.change_id, request.budget_usd)
        self.notifier.notify()
        self.fleet.wake()
        return await self.store.run(queries.get_change, request.change_id)

    @reporting
    async def GetSpend(self, request: change_pb2.GetSpendRequest,
                       context: grpc.aio.ServicerContext) -> change_pb2.Spend:
        return await self.store.run(queries.spend, request.change_id)
