"""The console's pages: each asks the API's services what it shows (`Visit.call`), so a token sees in a
browser exactly what it may see with grpcurl."""

from __future__ import annotations

import collections
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.responses import Response, StreamingResponse

from controlplane.web import receipts as receipt_view
from controlplane.web import spend_chart, task_graph, transcript
from controlplane.web.visit import SECURITY_HEADERS, Handler, Visit
from drover.errors import DroverError
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
from drover.v1 import change_pb2, operations_pb2

CHANGES_PAGE = 25


async def fleet(v: Visit) -> Response:
    agents = [
        from_proto(a, Agent)
        for a in (await v.call("OperationsService/ListAgents", operations_pb2.ListAgentsRequest(page_size=1000))).agents
    ]
    running = await _runs(v, state="running")
    queued = await _runs(v, state="queued")
    by_agent: dict[str, list[Run]] = collections.defaultdict(list)
    for run in running:
        by_agent[run.agent].append(run)
    queue = collections.Counter(run.project for run in queued)
    return v.render("fleet.html", agents=agents, by_agent=by_agent, queue=sorted(queue.items()), title="Fleet")


async def _runs(v: Visit, **filters: Any) -> list[Run]:
    answer = await v.call("OperationsService/ListRuns", operations_pb2.ListRunsRequest(page_size=1000, **filters))
    return [from_proto(r, Run) for r in answer.runs]


async def changes(v: Visit) -> Response:
    q = v.request.query_params
    filters = {"project": q.get("project", ""), "status": q.get("status", ""), "submitted_by": q.get("submitter", "")}
    request = change_pb2.ListChangesRequest(
        page_size=CHANGES_PAGE,
        page_token=q.get("page", ""),
        project=filters["project"],
        status=filters["status"],
        submitted_by=filters["submitted_by"],
    )
    answer = await v.call("ChangeService/ListChanges", request)
    found = [from_proto(c, Change) for c in answer.changes]
    return v.render("changes.html", changes=found, filters=filters, next_page=answer.next_page_token, title="Changes")


async def change(v: Visit) -> Response:
    change_id = v.request.path_params["change_id"]
    found = from_proto(
        await v.call("ChangeService/GetChange", change_pb2.GetChangeRequest(change_id=change_id)), Change
    )
    runs = await _runs(v, change_id=change_id)
    changesets = [
        from_proto(c, ChangeSet)
        for c in (
            await v.call("ChangeService/ListChangeSets", change_pb2.ListChangeSetsRequest(change_id=change_id))
        ).changesets
    ]
    patches = {
        c.id: (await v.call("ChangeService/GetPatch", change_pb2.GetPatchRequest(changeset_id=c.id))).text
        for c in changesets
    }
    claims_request = operations_pb2.ListClaimsRequest(change_id=change_id, include_released=True)
    claims = [from_proto(c, Claim) for c in (await v.call("OperationsService/ListClaims", claims_request)).claims]
    nodes = [
        task_graph.Node(t.key, t.status, tuple(t.depends_on), f"/runs/{t.latest_run_id}" if t.latest_run_id else "")
        for t in found.tasks
    ]
    contended_request = operations_pb2.ListEventsRequest(change_id=change_id, kind="claim.contended", page_size=100)
    contended = [from_proto(e, Event) for e in (await v.call("OperationsService/ListEvents", contended_request)).events]
    reopened_request = operations_pb2.ListEventsRequest(change_id=change_id, kind="task.reopened", page_size=100)
    reopened = [from_proto(e, Event) for e in (await v.call("OperationsService/ListEvents", reopened_request)).events]
    newest = operations_pb2.ListEventsRequest(change_id=change_id, page_size=1, newest=True)
    last_event = max((e.id for e in (await v.call("OperationsService/ListEvents", newest)).events), default=0)
    runs_by_task: dict[str, list[Run]] = collections.defaultdict(list)
    for run in sorted(runs, key=lambda r: (r.task_key, r.attempt)):
        runs_by_task[run.task_id].append(run)
    return v.render(
        "change.html",
        change=found,
        graph=task_graph.svg(nodes),
        runs_by_task=runs_by_task,
        changesets=changesets,
        patches=patches,
        claims=claims,
        contended=contended,
        reopened=reopened,
        watch=f"/changes/{found.id}/stream?after={last_event}" if found.status in ("open", "running") else "",
        title=f"Change {found.id}",
    )


async def change_stream(v: Visit) -> Response:
    """The Change's events as they happen (server-sent events `change`, then `end`): the page reloads."""
    request = change_pb2.WatchChangeRequest(
        change_id=v.request.path_params["change_id"], after_event_id=_int(v.request.query_params.get("after"))
    )
    return await _sse(v.stream("ChangeService/WatchChange", request), "change", _event_json)


def _event_json(event: Any) -> str:
    return json.dumps({"id": event.id, "kind": event.kind})


def _int(text: str | None) -> int:
    try:
        return max(0, int(text or "0"))
    except ValueError:
        return 0


async def run(v: Visit) -> Response:
    run_id = v.request.path_params["run_id"]
    found = from_proto(await v.call("OperationsService/GetRun", operations_pb2.GetRunRequest(run_id=run_id)), Run)
    lines = [
        entry
        async for line in v.stream("OperationsService/TailRunLogs", operations_pb2.TailRunLogsRequest(run_id=run_id))
        for entry in transcript.entries(from_proto(line, LogLine))
    ]
    receipts_request = operations_pb2.ListReceiptsRequest(run_id=run_id)
    receipts = [
        from_proto(r, DecisionReceipt)
        for r in (await v.call("OperationsService/ListReceipts", receipts_request)).receipts
    ]
    questions_request = operations_pb2.ListQuestionsRequest(run_id=run_id)
    questions = [
        from_proto(q, Question) for q in (await v.call("OperationsService/ListQuestions", questions_request)).questions
    ]
    inputs = [
        from_proto(i, RunInput)
        for i in (await v.call("OperationsService/ListInputs", operations_pb2.ListInputsRequest(run_id=run_id))).inputs
    ]
    events_request = operations_pb2.ListEventsRequest(run_id=run_id, page_size=200)
    events = [from_proto(e, Event) for e in (await v.call("OperationsService/ListEvents", events_request)).events]
    owner = await v.call("ChangeService/GetChange", change_pb2.GetChangeRequest(change_id=found.change_id))
    last = max((entry["seq"] for entry in lines), default=0)
    return v.render(
        "run.html",
        run=found,
        submitted_by=owner.submitted_by,
        lines=lines,
        last_seq=last,
        live=found.state in ("queued", "starting", "running"),
        receipts=[(r, receipt_view.steps(r.data), receipt_view.candidates(r.data)) for r in receipts],
        candidate_columns=receipt_view.CANDIDATE_COLUMNS,
        questions=questions,
        inputs=inputs,
        events=events,
        title=f"Run {found.id}",
    )


async def run_stream(v: Visit) -> Response:
    """The run's transcript as it grows: server-sent events `line` (a JSON list of entries), then `end`."""
    run_id = v.request.path_params["run_id"]
    request = operations_pb2.TailRunLogsRequest(
        run_id=run_id, after_seq=_int(v.request.query_params.get("after")), follow=True
    )
    stream = v.stream("OperationsService/TailRunLogs", request)

    async def final() -> str:  # the stream ends once the run has: the page shows its state without a reload
        try:
            ended = await v.call("OperationsService/GetRun", operations_pb2.GetRunRequest(run_id=run_id))
        except DroverError:  # signed out meanwhile: the page reloads into whatever it may see
            return "{}"
        return json.dumps({"state": ended.state, "outcome": ended.outcome})

    return await _sse(stream, "line", lambda line: json.dumps(transcript.entries(from_proto(line, LogLine))), final)


async def _sse(
    stream: AsyncIterator[Any], name: str, data: Any, final: Callable[[], Awaitable[str]] | None = None
) -> Response:
    """Server-sent events `name`, one per item of `stream`, then `end` (its data from `final`, if given)."""
    first = await anext(stream, None)  # errors (NOT_FOUND, PERMISSION_DENIED) come before the 200

    async def events() -> AsyncIterator[str]:
        item = first
        while item is not None:
            yield f"event: {name}\ndata: {data(item)}\n\n"
            item = await anext(stream, None)
        yield f"event: end\ndata: {await final() if final else '{}'}\n\n"

    headers = {**SECURITY_HEADERS, "X-Accel-Buffering": "no"}
    return StreamingResponse(events(), media_type="text/event-stream", headers=headers)


async def packet(v: Visit) -> Response:
    run_id = v.request.path_params["run_id"]
    found = await v.call("OperationsService/GetPacket", operations_pb2.GetPacketRequest(run_id=run_id))
    pretty = json.dumps(json.loads(found.json), indent=2, ensure_ascii=False)
    return v.render("packet.html", run_id=run_id, context_hash=found.context_hash, packet=pretty, title="Packet")


def _raisable(v: Visit) -> list[str]:
    """The meters the visitor may raise, by RaiseMeter's own rules: an admin for every project any of
    them, a project's admin its project's."""
    if not v.may("OperationsService/RaiseMeter"):
        return []
    if v.who.projects is not None:
        return ["project"]
    return ["provider_month", "agent_calls_day", "classifier_calls_day", "project", "user"]


async def spend(v: Visit) -> Response:
    meters = [
        from_proto(m, MeterUsage)
        for m in (await v.call("OperationsService/GetUsage", operations_pb2.GetUsageRequest(page_size=1000))).meters
    ]
    recent = (await v.call("ChangeService/ListChanges", change_pb2.ListChangesRequest(page_size=100))).changes
    spends = []
    for c in recent:
        got = await v.call("ChangeService/GetSpend", change_pb2.GetSpendRequest(change_id=c.id))
        spends.append((from_proto(c, Change), from_proto(got, Spend)))
    refusals_request = operations_pb2.ListEventsRequest(kind="run.spend_limited", page_size=50, newest=True)
    refusals = [from_proto(e, Event) for e in (await v.call("OperationsService/ListEvents", refusals_request)).events]
    return v.render(
        "spend.html",
        meters=meters,
        raisable=_raisable(v),
        charts=spend_chart.charts(spends),
        refusals=list(reversed(refusals)),
        title="Spend",
    )


PAGES: dict[str, Handler] = {
    "/fleet": fleet,
    "/changes": changes,
    "/changes/{change_id}": change,
    "/runs/{run_id}": run,
    "/runs/{run_id}/packet": packet,
    "/spend": spend,
}
