"""drover.v1.AgentService: the agentd side of the wire."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import grpc
from sqlalchemy.orm import Session

from controlplane.api import auth, convert
from controlplane.api.agent_stream import AgentSessions
from controlplane.api.status import reporting
from controlplane.config import HarnessConfig, ServerConfig
from controlplane.services import call_batches, changesets, claims, model_calls, questions, tenancy
from controlplane.services.notify import Notifier
from controlplane.store.engine import Store
from controlplane.store.group_commit import GroupCommit
from controlplane.store.models import utcnow
from controlplane.store.objects import ObjectStore
from drover.core.usage import Usage
from drover.v1 import agent_pb2, agent_pb2_grpc, types_pb2


class AgentService(agent_pb2_grpc.AgentServiceServicer):
    def __init__(
        self,
        store: Store,
        notifier: Notifier,
        objects: ObjectStore,
        sessions: AgentSessions,
        settings: Callable[[], ServerConfig],
    ) -> None:
        self.store, self.notifier, self.objects = store, notifier, objects
        self.sessions, self.settings = sessions, settings
        self.renewals = claims.Renewals()
        self.calls = GroupCommit(store, call_batches.alone, lanes=1, many=call_batches.apply_many)
        """Reservations and settlements, many to a transaction and to a statement (`call_batches`): each
        call is answered after its commit. One batch at a time, on PostgreSQL too: under load the
        process's CPU is the limit, and one lane makes the batches larger (benchmarks/fleet.py, 50 runs:
        264 pairs/s with one lane, 230 with two, 202 with four)."""

    @property
    def harness(self) -> HarnessConfig:
        return self.settings().harness  # replaced by a hot reload

    async def Connect(self, request_iterator: object, context: grpc.aio.ServicerContext) -> None:
        await self.sessions.connect(context)

    @reporting
    async def ReserveModelCall(
        self, request: agent_pb2.ReserveModelCallRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.ReserveModelCallResponse:
        h, token_id = self.harness, auth.current().token_id
        renewed: list[tuple[dt.datetime, dt.datetime]] = []  # (now, next due), kept once committed

        def renew(s: Session, r: model_calls.Reservation) -> None:
            renewed.clear()  # a batch run again answers its units again
            now = utcnow()
            if r.granted and self.renewals.due(request.run_id, now):  # a model call renews claims at half-life
                renewed.append((now, claims.renew_due_until(s, request.run_id, now)))

        reserve = call_batches.ReserveUnit(
            h,
            request.run_id,
            request.key,
            request.model,
            request.purpose or "agent",
            request.max_output_tokens,
            request.estimated_input_tokens,
            token_id,  # tenancy: checked in the reservation's first read
            after=renew,
        )
        r = await self.calls.apply(reserve)
        for now, next_due in renewed:
            self.renewals.renewed(request.run_id, next_due, now)
        self.sessions.activity.seen(request.run_id)
        if not r.granted or renewed:  # a refusal wrote its event, a renewal its claims; a grant only its call
            self.notifier.notify()
        return agent_pb2.ReserveModelCallResponse(
            reservation_id=r.reservation_id,
            granted=r.granted,
            refusal=r.refusal,
            calls_used=r.calls_used,
            calls_cap=r.calls_cap,
            estimate_micros=r.estimate_micros,
        )

    @reporting
    async def SettleModelCall(
        self, request: agent_pb2.SettleModelCallRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.SettleModelCallResponse:
        h, token_id = self.harness, auth.current().token_id
        u = request.usage
        usage = Usage(u.input_tokens, u.output_tokens, u.cache_creation_input_tokens, u.cache_read_input_tokens)

        settle = call_batches.SettleUnit(h, request.reservation_id, usage, request.error, token_id)
        run_id, cost, run_cost = await self.calls.apply(settle)
        self.sessions.activity.seen(run_id)
        return agent_pb2.SettleModelCallResponse(cost_micros=cost, run_cost_micros=run_cost)

    @reporting
    async def PublishChangeSet(
        self, request: agent_pb2.PublishChangeSetRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.ChangeSetRef:
        await self.store.read(tenancy.agent_run, request.run_id, auth.current().token_id)
        published = convert.published(request)
        row = await self.store.run(changesets.publish, self.objects, published)
        self.notifier.notify()
        return agent_pb2.ChangeSetRef(changeset_id=row.id, patch_ref=row.patch_ref)

    @reporting
    async def AskQuestion(
        self, request: agent_pb2.AskQuestionRequest, context: grpc.aio.ServicerContext
    ) -> types_pb2.Question:
        token_id = auth.current().token_id

        def ask(s: Session) -> types_pb2.Question:
            run = tenancy.agent_run(s, request.run_id, token_id)
            row = questions.ask(s, run, request.key, request.text, request.blocking)
            return convert.question(row)

        asked = await self.store.run(ask)
        self.sessions.activity.seen(request.run_id)
        self.notifier.notify()
        return asked
