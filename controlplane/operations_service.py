"""drover.v1.OperationsService: what an operator needs, usable with grpcurl."""

from __future__ import annotations

from typing import AsyncIterator

import grpc

from controlplane import lifecycle, queries, runstate
from controlplane.fleet import Fleet
from controlplane.notify import Notifier
from controlplane.servicing import reporting
from controlplane.store import Store
from drover.v1 import operations_pb2, operations_pb2_grpc, types_pb2

TAIL_POLL_SECONDS = 1.0


class OperationsService(operations_pb2_grpc.OperationsServiceServicer):
    def __init__(self, store: Store, fleet: Fleet, notifier: Notifier) -> None:
        self.store, self.fleet, self.notifier = store, fleet, notifier

    @reporting
    async def ListAgents(self, request: operations_pb2.ListAgentsRequest,
                         context: grpc.aio.ServicerContext) -> operations_pb2.ListAgentsResponse:
        return operations_pb2.ListAgentsResponse(
            agents=await self.store.run(queries.list_agents, request.connected_only))

    @reporting
    async def DrainAgent(self, request: operations_pb2.DrainAgentRequest,
                         context: grpc.aio.ServicerContext) -> types_pb2.Agent:
        await self.store.run(lifecycle.drain_agent, request.name)
        self.fleet.tell_drain(request.name)
        return await self.store.run(queries.agent, request.name)

    @reporting
    async def ListRuns(self, request: operations_pb2.ListRunsRequest,
                       context: grpc.aio.ServicerContext) -> operations_pb2.ListRunsResponse:
        runs = await self.store.run(lambda s: queries.list_runs(
            s, change_id=request.change_id, state=request.state, agent=request.agent,
            limit=min(max(request.limit, 0), 1000)))
        return operations_pb2.ListRunsResponse(runs=runs)

    @reporting
    async def GetRun(self, request: operations_pb2.GetRunRequest,
                     context: grpc.aio.ServicerContext) -> types_pb2.Run:
        return await self.store.run(queries.get_run, request.run_id)

    @reporting
    async def CancelRun(self, request: operations_pb2.CancelRunRequest,
                        context: grpc.aio.ServicerContext) -> types_pb2.Run:
        run = await self.store.run(lifecycle.cancel_run, request.run_id, request.reason or "cancelled by operator")
        if run.state in runstate.ACTIVE:
            self.fleet.tell_cancel([(run.id, run.agent)], request.reason or "cancelled by operator")
        self.notifier.notify()
        self.fleet.wake()
        return await self.store.run(queries.get_run, request.run_id)

    @reporting
    async def TailRunLogs(self, request: operations_pb2.TailRunLogsRequest,
                          context: grpc.aio.ServicerContext) -> AsyncIterator[types_pb2.LogLine]:
        after = request.after_seq
        while True:
            lines, state = await self.store.run(queries.run_logs, request.run_id, after)
            for line in lines:
                after = line.seq
                yield line
            if lines:
                continue
            if not request.follow or state in runstate.TERMINAL:
                return
            await self.notifier.wait(TAIL_POLL_SECONDS)

    @reporting
    async def ListEvents(self, request: operations_pb2.ListEventsRequest,
                         context: grpc.aio.ServicerContext) -> operations_pb2.ListEventsResponse:
        events = await self.store.run(lambda s: queries.events(
            s, change_id=request.change_id, run_id=request.run_id, kind=request.kind, after_id=request.after_id,
            limit=min(max(request.limit, 0), 1000)))
        return operations_pb2.ListEventsResponse(events=events)

    @reporting
    async def GetUsage(self, request: operations_pb2.GetUsageRequest,
                       context: grpc.aio.ServicerContext) -> operations_pb2.GetUsageResponse:
        return operations_pb2.GetUsageResponse(meters=await self.store.run(queries.usage, request.prefix))

    @reporting
    async def ListReceipts(self, request: operations_pb2.ListReceiptsRequest,
                           context: grpc.aio.ServicerContext) -> operations_pb2.ListReceiptsResponse:
        found = await self.store.run(lambda s: queries.receipts(s, change_id=request.change_id,
                                                                run_id=request.run_id))
        return operations_pb2.ListReceiptsResponse(receipts=found)

    @reporting
    async def ListClaims(self, request: operations_pb2.ListClaimsRequest,
                         context: grpc.aio.ServicerContext) -> operations_pb2.ListClaimsResponse:
        found = await self.store.run(queries.list_claims, request.change_id, request.include_released)
        return operations_pb2.ListClaimsResponse(claims=found)

    @reporting
    async def GetPacket(self, request: operations_pb2.GetPacketRequest,
                        context: grpc.aio.ServicerContext) -> operations_pb2.Packet:
        context_hash, text = await self.store.run(queries.packet_of, self.fleet.objects, request.run_id)
        return operations_pb2.Packet(run_id=request.run_id, context_hash=context_hash, json=text)
