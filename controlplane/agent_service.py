"""drover.v1.AgentService: the agentd side of the wire."""

from __future__ import annotations

import grpc

from controlplane.fleet import Fleet
from drover.v1 import agent_pb2_grpc


class AgentService(agent_pb2_grpc.AgentServiceServicer):
    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet

    async def Connect(self, request_iterator: object, context: grpc.aio.ServicerContext) -> None:
        await self.fleet.connect(context)
