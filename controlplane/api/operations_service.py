"""drover.v1.OperationsService: what an operator needs, usable with grpcurl. Every call sees only the
projects of its token (and, for agents, those projects' pools)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import grpc

from controlplane.api import auth, change_queries, notification_queries, run_queries
from controlplane.api.agent_stream import AgentSessions
from controlplane.api.change_service import still_allowed
from controlplane.api.status import reporting
from controlplane.config import BudgetConfig
from controlplane.domain import run_states
from controlplane.services import agent_presence, recovery, run_input, run_lifecycle
from controlplane.services.notify import Notifier
from controlplane.store import meters
from controlplane.store.engine import Store
from controlplane.store.objects import ObjectStore
from drover.v1 import operations_pb2, operations_pb2_grpc, types_pb2

TAIL_POLL_SECONDS = 1.0


class OperationsService(operations_pb2_grpc.OperationsServiceServicer):
    def __init__(
        self,
        store: Store,
        notifier: Notifier,
        objects: ObjectStore,
        agents: AgentSessions,
        wake: Callable[[], None],
        budgets: Callable[[], BudgetConfig] = BudgetConfig,
    ) -> None:
        self.store, self.notifier, self.objects, self.agents, self.wake = store, notifier, objects, agents, wake
        self.budgets = budgets

    @reporting
    async def ListAgents(
        self, request: operations_pb2.ListAgentsRequest, context: grpc.aio.ServicerContext
    ) -> operations_pb2.ListAgentsResponse:
        page = await self.store.read(
            run_queries.list_agents,
            request.connected_only,
            request.page_size,
            request.page_token,
            auth.current().projects,
        )
        return operations_pb2.ListAgentsResponse(agents=page.items, next_page_token=page.next_token)

    @reporting
    async def DrainAgent(
        self, request: operations_pb2.DrainAgentRequest, context: grpc.aio.ServicerContext
    ) -> types_pb2.Agent:
        scope = auth.current().projects
        await self.store.run(agent_presence.drain_agent, request.name, True, scope)
        self.agents.tell_drain(request.name)
        return await self.store.read(run_queries.agent, request.name, scope)

    @reporting
    async def UndrainAgent(
        self, request: operations_pb2.UndrainAgentRequest, context: grpc.aio.ServicerContext
    ) -> types_pb2.Agent:
        scope = auth.current().projects
        await self.store.run(agent_presence.drain_agent, request.name, False, scope)
        self.agents.tell_drain(request.name, undrain=True)
        self.wake()
        return await self.store.read(run_queries.agent, request.name, scope)

    @reporting
    async def ListRuns(
        self, request: operations_pb2.ListRunsRequest, context: grpc.aio.ServicerContext
    ) -> operations_pb2.ListRunsResponse:
        scope = auth.current().projects
        page = await self.store.read(
            lambda s: run_queries.list_runs(
                s,
                change_id=request.change_id,
                state=request.state,
                agent=request.agent,
                limit=request.page_size or request.limit,
                token=request.page_token,
                scope=scope,
            )
        )
        return operations_pb2.ListRunsResponse(runs=page.items, next_page_token=page.next_token)

    @reporting
    async def GetRun(self, request: operations_pb2.GetRunRequest, context: grpc.aio.ServicerContext) -> types_pb2.Run:
        return await self.store.read(run_queries.get_run, request.run_id, auth.current().projects)

    @reporting
    async def CancelRun(
        self, request: operations_pb2.CancelRunRequest, context: grpc.aio.ServicerContext
    ) -> types_pb2.Run:
        reason = request.reason or "cancelled by operator"
        run = await self.store.run(run_lifecycle.cancel_run, request.run_id, reason, auth.current().projects)
        if run.state in run_states.ACTIVE:
            self.agents.tell_cancel([(run.id, run.agent)], reason)
        self.notifier.notify()
        self.wake()
        return await self.store.read(run_queries.get_run, request.run_id)

    @reporting
    async def TailRunLogs(
        self, request: operations_pb2.TailRunLogsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[types_pb2.LogLine]:
        who = auth.current()
        after = request.after_seq
        while True:
            lines, state = await self.store.read(
                lambda s, after=after: run_queries.run_logs(s, request.run_id, after, scope=who.projects)
            )
            for line in lines:
                after = line.seq
                yield line
            if lines:
                continue
            if not request.follow or state in run_states.TERMINAL:
                return
            await self.notifier.wait(TAIL_POLL_SECONDS)
            await still_allowed(self.store, who)

    @reporting
    async def ListEvents(
        self, request: operations_pb2.ListEventsRequest, context: grpc.aio.ServicerContext
    ) -> operations_pb2.ListEventsResponse:
        scope = auth.current().projects
        page = await self.store.read(
            lambda s: change_queries.events(
                s,
                change_id=request.change_id,
                run_id=request.run_id,
                kind=request.kind,
                after_id=request.after_id,
                limit=request.page_size or request.limit,
                token=request.page_token,
                scope=scope,
                newest=request.newest,
            )
        )
        return operations_pb2.ListEventsResponse(events=page.items, next_page_token=page.next_token)

    @reporting
    async def GetUsage(
        self, request: operations_pb2.GetUsageRequest, context: grpc.aio.ServicerContext
    ) -> operations_pb2.GetUsageResponse:
        who = auth.current()
        page = await self.store.read(
            lambda s: run_queries.usage(
                s, request.prefix, request.page_size, request.page_token, user=who.name, scope=who.projects
            )
        )
        return operations_pb2.GetUsageResponse(meters=page.items, next_page_token=page.next_token)

    @reporting
    async def RaiseMeter(
        self, request: operations_pb2.RaiseMeterRequest, context: grpc.aio.ServicerContext
    ) -> types_pb2.MeterUsage:
        who, budgets = auth.current(), self.budgets()
        key, _, limit = await self.store.run(
            lambda s: recovery.raise_meter(
                s, request.meter, request.name, request.limit, budgets, scope=who.projects, by=who.name
            )
        )
        self.notifier.notify()
        self.wake()
        rows = await self.store.read(lambda s: meters.usage(s, key, exact=True))
        if rows:
            return types_pb2.MeterUsage(**rows[0])
        spec = meters.spec_of_key(key, limit)  # a Project or user meter nothing has drawn on yet
        return types_pb2.MeterUsage(key=key, kind=spec.kind, period=spec.period, unit=spec.unit, limit=limit)

    @reporting
    async def ListReceipts(
        self, request: operations_pb2.ListReceiptsRequest, context: grpc.aio.ServicerContext
    ) -> operations_pb2.ListReceiptsResponse:
        scope = auth.current().projects
        page = await self.store.read(
            lambda s: change_queries.receipts(
                s,
                change_id=request.change_id,
                run_id=request.run_id,
                size=request.page_size,
                token=request.page_token,
                scope=scope,
            )
        )
        return operations_pb2.ListReceiptsResponse(receipts=page.items, next_page_token=page.next_token)

    @reporting
    async def ListClaims(
        self, request: operations_pb2.ListClaimsRequest, context: grpc.aio.ServicerContext
    ) -> operations_pb2.ListClaimsResponse:
        page = await self.store.read(
            run_queries.list_claims,
            request.change_id,
            request.include_released,
            request.page_size,
            request.page_token,
            auth.current().projects,
        )
        return operations_pb2.ListClaimsResponse(claims=page.items, next_page_token=page.next_token)

    @reporting
    async def GetPacket(
        self, request: operations_pb2.GetPacketRequest, context: grpc.aio.ServicerContext
    ) -> operations_pb2.Packet:
        context_hash, text = await self.store.read(
            run_queries.packet_of, self.objects, request.run_id, auth.current().projects
        )
        return operations_pb2.Packet(run_id=request.run_id, context_hash=context_hash, json=text)

    @reporting
    async def SendInput(
        self, request: operations_pb2.SendInputRequest, context: grpc.aio.ServicerContext
    ) -> types_pb2.RunInput:
        who = auth.current()
        sent = await self.store.run(
            run_queries.send_input, request.run_id, request.kind, request.text, who.name, who.projects
        )
        self.agents.tell_inputs(await self.store.read(run_input.pending_for, sent[1], [request.run_id]))
        self.notifier.notify()
        return sent[0]

    @reporting
    async def ListInputs(
        self, request: operations_pb2.ListInputsRequest, context: grpc.aio.ServicerContext
    ) -> operations_pb2.ListInputsResponse:
        page = await self.store.read(
            run_queries.list_inputs, request.run_id, request.page_size, request.page_token, auth.current().projects
        )
        return operations_pb2.ListInputsResponse(inputs=page.items, next_page_token=page.next_token)

    @reporting
    async def ListQuestions(
        self, request: operations_pb2.ListQuestionsRequest, context: grpc.aio.ServicerContext
    ) -> operations_pb2.ListQuestionsResponse:
        page = await self.store.read(
            run_queries.list_questions,
            request.change_id,
            request.run_id,
            request.open_only,
            request.page_size,
            request.page_token,
            auth.current().projects,
        )
        return operations_pb2.ListQuestionsResponse(questions=page.items, next_page_token=page.next_token)

    @reporting
    async def AnswerQuestion(
        self, request: operations_pb2.AnswerQuestionRequest, context: grpc.aio.ServicerContext
    ) -> types_pb2.Question:
        who = auth.current()
        answered, agent, run_id = await self.store.run(
            run_queries.answer_question,
            request.question_id,
            request.text,
            who.name,
            who.has_role("run.manage"),
            who.projects,
        )
        self.agents.tell_inputs(await self.store.read(run_input.pending_for, agent, [run_id]))
        self.notifier.notify()
        self.wake()  # a parked session's last answer queued the run that resumes it
        return answered

    @reporting
    async def ListNotificationDeliveries(
        self, request: operations_pb2.ListNotificationDeliveriesRequest, context: grpc.aio.ServicerContext
    ) -> operations_pb2.ListNotificationDeliveriesResponse:
        page = await self.store.read(
            notification_queries.list_deliveries,
            request.state,
            request.target,
            request.page_size,
            request.page_token,
            auth.current().projects,
        )
        return operations_pb2.ListNotificationDeliveriesResponse(deliveries=page.items, next_page_token=page.next_token)
