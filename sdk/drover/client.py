"""The Drover SDK client (synchronous)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import grpc

from drover.admin import Projects, Tokens
from drover.errors import from_rpc_error
from drover.models import (
    Agent,
    Change,
    ChangeSet,
    Claim,
    DecisionReceipt,
    Event,
    LogLine,
    MeterUsage,
    Question,
    Run,
    RunInput,
    Spend,
    from_proto,
)
from drover.notifications import Notifications
from drover.recovery import Recovery
from drover.task_messages import task_message as _task
from drover.v1 import (
    change_pb2,
    change_pb2_grpc,
    operations_pb2,
    operations_pb2_grpc,
)

T = TypeVar("T")


def _mapped(fn: Callable[..., T]) -> Callable[..., T]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            return fn(*args, **kwargs)
        except grpc.RpcError as err:
            raise from_rpc_error(err) from None

    return wrapper


def _every_page(call: Callable[[str], Any], field: str, cls: type[T]) -> list[T]:
    """Every item of a paged list call, page after page."""
    items: list[T] = []
    token = ""
    while True:
        answer = call(token)
        items.extend(from_proto(m, cls) for m in getattr(answer, field))
        token = answer.next_page_token
        if not token:
            return items


class Client(Recovery):
    """Submit and follow Changes. `Client("127.0.0.1:50051", token=...)`; use as a context manager
    or call close(). Every method raises a `drover.DroverError` subclass on failure."""

    def __init__(
        self, target: str = "127.0.0.1:50051", *, token: str, credentials: grpc.ChannelCredentials | None = None
    ) -> None:
        options = [("grpc.max_receive_message_length", 16 * 1024 * 1024)]
        self._channel = (
            grpc.secure_channel(target, credentials, options=options)
            if credentials
            else grpc.insecure_channel(target, options=options)
        )
        self._metadata = (("authorization", f"Bearer {token}"),)
        self._changes = change_pb2_grpc.ChangeServiceStub(self._channel)
        self._ops = operations_pb2_grpc.OperationsServiceStub(self._channel)
        self.projects = Projects(self._channel, self._metadata)
        """Projects and their git credential (ProjectService)."""
        self.tokens = Tokens(self._channel, self._metadata)
        """Tokens (TokenService, role admin)."""
        self.notifications = Notifications(self._channel, self._metadata)
        """Notifications sent to [[notify]] targets (role run.manage)."""

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    @_mapped
    def submit_change(
        self,
        project: str,
        goal: str,
        tasks: Sequence[Mapping[str, Any]],
        *,
        criteria: Sequence[str] = (),
        invariants: Sequence[str] = (),
        budget_usd: float = 0.0,
    ) -> Change:
        """Submit a Change: a goal and a graph of Tasks (dicts with key, kind, objective, depends_on,
        and for command Tasks command, env, timeout_seconds)."""
        request = change_pb2.SubmitChangeRequest(
            project=project,
            goal=goal,
            criteria=list(criteria),
            invariants=list(invariants),
            budget_usd=budget_usd,
            tasks=[_task(t, i) for i, t in enumerate(tasks)],
        )
        return from_proto(self._changes.SubmitChange(request, metadata=self._metadata), Change)

    def submit_change_file(self, data: Mapping[str, Any]) -> Change:
        """Submit the contents of a Change file (see drover.changefile.load)."""
        return self.submit_change(
            data.get("project", ""),
            data.get("goal", ""),
            data.get("tasks") or [],
            criteria=data.get("criteria") or [],
            invariants=data.get("invariants") or [],
            budget_usd=float(data.get("budget_usd") or 0),
        )

    @_mapped
    def get_change(self, change_id: str) -> Change:
        answer = self._changes.GetChange(change_pb2.GetChangeRequest(change_id=change_id), metadata=self._metadata)
        return from_proto(answer, Change)

    @_mapped
    def list_changes(
        self, project: str = "", limit: int = 50, *, status: str = "", submitted_by: str = ""
    ) -> list[Change]:
        """Newest first; each filter left empty matches everything."""
        request = change_pb2.ListChangesRequest(project=project, limit=limit, status=status, submitted_by=submitted_by)
        answer = self._changes.ListChanges(request, metadata=self._metadata)
        return [from_proto(c, Change) for c in answer.changes]

    def watch(self, change_id: str, after_event_id: int = 0) -> Iterator[Event]:
        """Events of a Change as they happen, ending when the Change ends."""
        try:
            for event in self._changes.WatchChange(
                change_pb2.WatchChangeRequest(change_id=change_id, after_event_id=after_event_id),
                metadata=self._metadata,
            ):
                yield from_proto(event, Event)
        except grpc.RpcError as err:
            raise from_rpc_error(err) from None

    def run_logs(self, run_id: str, *, follow: bool = False, after_seq: int = 0) -> Iterator[LogLine]:
        """A run's output in order; with follow, until the run ends."""
        try:
            for line in self._ops.TailRunLogs(
                operations_pb2.TailRunLogsRequest(run_id=run_id, follow=follow, after_seq=after_seq),
                metadata=self._metadata,
            ):
                yield from_proto(line, LogLine)
        except grpc.RpcError as err:
            raise from_rpc_error(err) from None

    @_mapped
    def list_changesets(self, change_id: str) -> list[ChangeSet]:
        """The ChangeSets a Change's Tasks published (branch, commits, files, patch ref)."""
        return _every_page(
            lambda token: self._changes.ListChangeSets(
                change_pb2.ListChangeSetsRequest(change_id=change_id, page_token=token), metadata=self._metadata
            ),
            "changesets",
            ChangeSet,
        )

    @_mapped
    def get_patch(self, changeset_id: str) -> str:
        """A ChangeSet's patch: the git diff from its start commit."""
        return self._changes.GetPatch(
            change_pb2.GetPatchRequest(changeset_id=changeset_id), metadata=self._metadata
        ).text

    @_mapped
    def raise_budget(self, change_id: str, budget_usd: float) -> Change:
        """Raise a Change's budget; Tasks a budget stopped get a fresh attempt window and run again."""
        answer = self._changes.RaiseBudget(
            change_pb2.RaiseBudgetRequest(change_id=change_id, budget_usd=budget_usd), metadata=self._metadata
        )
        return from_proto(answer, Change)

    @_mapped
    def get_spend(self, change_id: str) -> Spend:
        """A Change's spend by tier, member and model, and its Decision Receipts."""
        answer = self._changes.GetSpend(change_pb2.GetSpendRequest(change_id=change_id), metadata=self._metadata)
        return from_proto(answer, Spend)

    @_mapped
    def get_usage(self, prefix: str = "") -> list[MeterUsage]:
        """Every meter's current value, limit and period."""
        return _every_page(
            lambda token: self._ops.GetUsage(
                operations_pb2.GetUsageRequest(prefix=prefix, page_token=token), metadata=self._metadata
            ),
            "meters",
            MeterUsage,
        )

    @_mapped
    def list_receipts(self, *, change_id: str = "", run_id: str = "") -> list[DecisionReceipt]:
        return _every_page(
            lambda token: self._ops.ListReceipts(
                operations_pb2.ListReceiptsRequest(change_id=change_id, run_id=run_id, page_token=token),
                metadata=self._metadata,
            ),
            "receipts",
            DecisionReceipt,
        )

    @_mapped
    def get_packet(self, run_id: str) -> dict[str, Any]:
        """A run's Context Packet (the parsed canonical JSON); its hash is run.context_hash."""
        import json

        return json.loads(
            self._ops.GetPacket(operations_pb2.GetPacketRequest(run_id=run_id), metadata=self._metadata).json
        )

    @_mapped
    def list_claims(self, change_id: str = "", include_released: bool = False) -> list[Claim]:
        return _every_page(
            lambda token: self._ops.ListClaims(
                operations_pb2.ListClaimsRequest(
                    change_id=change_id, include_released=include_released, page_token=token
                ),
                metadata=self._metadata,
            ),
            "claims",
            Claim,
        )

    @_mapped
    def cancel_change(self, change_id: str) -> Change:
        answer = self._changes.CancelChange(
            change_pb2.CancelChangeRequest(change_id=change_id), metadata=self._metadata
        )
        return from_proto(answer, Change)

    @_mapped
    def cancel_run(self, run_id: str, reason: str = "") -> Run:
        answer = self._ops.CancelRun(
            operations_pb2.CancelRunRequest(run_id=run_id, reason=reason), metadata=self._metadata
        )
        return from_proto(answer, Run)

    @_mapped
    def send_input(self, run_id: str, kind: str, text: str = "") -> RunInput:
        """Talk to a running session: kind "message" (waits for the end of the turn) or "interrupt"
        (stops the turn at once; its text, if any, is the next message). Needs the run.manage role."""
        answer = self._ops.SendInput(
            operations_pb2.SendInputRequest(run_id=run_id, kind=kind, text=text), metadata=self._metadata
        )
        return from_proto(answer, RunInput)

    @_mapped
    def list_inputs(self, run_id: str) -> list[RunInput]:
        return _every_page(
            lambda token: self._ops.ListInputs(
                operations_pb2.ListInputsRequest(run_id=run_id, page_token=token), metadata=self._metadata
            ),
            "inputs",
            RunInput,
        )

    @_mapped
    def list_questions(self, *, change_id: str = "", run_id: str = "", open_only: bool = False) -> list[Question]:
        return _every_page(
            lambda token: self._ops.ListQuestions(
                operations_pb2.ListQuestionsRequest(
                    change_id=change_id, run_id=run_id, open_only=open_only, page_token=token
                ),
                metadata=self._metadata,
            ),
            "questions",
            Question,
        )

    @_mapped
    def answer_question(self, question_id: str, text: str) -> Question:
        """Answer a question a session asked; the answer reaches the session as a message."""
        answer = self._ops.AnswerQuestion(
            operations_pb2.AnswerQuestionRequest(question_id=question_id, text=text), metadata=self._metadata
        )
        return from_proto(answer, Question)

    @_mapped
    def get_run(self, run_id: str) -> Run:
        return from_proto(self._ops.GetRun(operations_pb2.GetRunRequest(run_id=run_id), metadata=self._metadata), Run)

    @_mapped
    def list_runs(self, *, change_id: str = "", state: str = "", agent: str = "", limit: int = 100) -> list[Run]:
        answer = self._ops.ListRuns(
            operations_pb2.ListRunsRequest(change_id=change_id, state=state, agent=agent, limit=limit),
            metadata=self._metadata,
        )
        return [from_proto(r, Run) for r in answer.runs]

    @_mapped
    def list_agents(self, connected_only: bool = False) -> list[Agent]:
        return _every_page(
            lambda token: self._ops.ListAgents(
                operations_pb2.ListAgentsRequest(connected_only=connected_only, page_token=token),
                metadata=self._metadata,
            ),
            "agents",
            Agent,
        )

    @_mapped
    def drain_agent(self, name: str) -> Agent:
        return from_proto(
            self._ops.DrainAgent(operations_pb2.DrainAgentRequest(name=name), metadata=self._metadata), Agent
        )

    @_mapped
    def undrain_agent(self, name: str) -> Agent:
        """Offer a drained agent new runs again."""
        return from_proto(
            self._ops.UndrainAgent(operations_pb2.UndrainAgentRequest(name=name), metadata=self._metadata), Agent
        )

    @_mapped
    def list_events(
        self,
        *,
        change_id: str = "",
        run_id: str = "",
        kind: str = "",
        after_id: int = 0,
        limit: int = 200,
        newest: bool = False,
    ) -> list[Event]:
        """Events oldest first: the `limit` after `after_id`, or with `newest` the newest `limit`."""
        answer = self._ops.ListEvents(
            operations_pb2.ListEventsRequest(
                change_id=change_id, run_id=run_id, kind=kind, after_id=after_id, limit=limit, newest=newest
            ),
            metadata=self._metadata,
        )
        return [from_proto(e, Event) for e in answer.events]
