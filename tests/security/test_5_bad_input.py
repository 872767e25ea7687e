"""Finding 5: of 165 malformed requests, 48 were accepted and 13 answered UNKNOWN, some with SQL text and
parameters in the message: NaN, Infinity and 1e308 budgets (a stored inf made GetSpend fail for that
Change for ever); on PostgreSQL keys over 200 characters or with NUL raised DataError; Task keys
`../../x`, with `/`, newline, NUL, 100k characters; env names `A=B`, `""`, with NUL; argv with NUL;
3 MB criteria (six such Changes made the default ListChanges exceed the message limit for everyone).

One table of malformed requests, each with the status it must get and the field its message must
name, run against a real control plane on SQLite and on PostgreSQL. Nothing refused is stored."""

from __future__ import annotations

import collections
import math
import re
import sqlite3
from collections.abc import Callable
from typing import Any

import grpc
import pytest

from drover.v1 import (
    agent_pb2,
    agent_pb2_grpc,
    change_pb2,
    change_pb2_grpc,
    operations_pb2,
    operations_pb2_grpc,
    types_pb2,
)
from tests.conftest import Fleet

INVALID, NOT_FOUND = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND


def good_task(**over: Any) -> dict[str, Any]:
    return {"key": "a", "kind": "test", "objective": "do it", "command": ["true"], **over}


def change(tasks: list[dict[str, Any]] | None = None, **over: Any) -> change_pb2.SubmitChangeRequest:
    values: dict[str, Any] = {"project": "web", "goal": "a goal", **over}
    request = change_pb2.SubmitChangeRequest(**values)
    for t in tasks if tasks is not None else [good_task()]:
        request.tasks.append(types_pb2.Task(**t))
    return request


Case = tuple[str, str, Any, grpc.StatusCode, str]  # (service, method, request, code, field named)
CASES: list[Case] = []


def case(service: str, method: str, request: Any, code: grpc.StatusCode, field: str) -> None:
    CASES.append((service, method, request, code, field))


def submit(code: grpc.StatusCode, field: str, tasks: list[dict[str, Any]] | None = None, **over: Any) -> None:
    case("change", "SubmitChange", change(tasks, **over), code, field)


# --- SubmitChange: the Change ------------------------------------------------------------------------
for budget in (math.nan, math.inf, -math.inf, 1e308, -1.0, -0.5, 10_000.01):
    submit(INVALID, "budget_usd", budget_usd=budget)
for project in ("", " ", "a" * 201, "we\x00b", "../web", "no such", "web;drop"):
    submit(INVALID, "project", project=project)
submit(NOT_FOUND, "project", project="nowhere")
for goal in ("", "   ", "g" * (64 * 1024 + 1), "a\x00b"):
    submit(INVALID, "goal", goal=goal)
for name in ("criteria", "invariants"):
    submit(INVALID, name, **{name: ["c"] * 101})
    submit(INVALID, name, **{name: ["c" * 4097]})
    submit(INVALID, name, **{name: ["bad\x00"]})
submit(INVALID, "criteria", criteria=["x" * 3_000_000])
submit(INVALID, "tasks", tasks=[])
submit(INVALID, "tasks", tasks=[good_task(key=f"t{i}") for i in range(501)])
submit(INVALID, "tasks", tasks=[good_task(key=f"t{i}", objective="o" * 60_000) for i in range(20)])  # > 1 MiB
# --- SubmitChange: a Task -----------------------------------------------------------------------------
for key in ("", " ", "../../x", "a/b", "a\nb", "a\x00", "k" * 65, "k" * 100_000, "Upper", "-lead", ".lead", "a b"):
    submit(INVALID, "tasks[0].key", tasks=[good_task(key=key)])
submit(INVALID, "tasks[1].key", tasks=[good_task(), good_task()])
for kind in ("", "Bad Kind", "k" * 33, "a\x00", "../x"):
    submit(INVALID, "tasks[0].kind", tasks=[good_task(kind=kind)])
for objective in ("", "  ", "o" * (64 * 1024 + 1), "a\x00b"):
    submit(INVALID, "tasks[0].objective", tasks=[good_task(objective=objective)])
for deps, field in (
    (["zzz"], "tasks[0].depends_on"),
    (["a"], "tasks[0].depends_on"),
    (["../x"], "tasks[0].depends_on[0]"),
    (["b"] * 501, "tasks[0].depends_on"),
):
    submit(INVALID, field, tasks=[good_task(depends_on=deps)])
submit(INVALID, "tasks[0].depends_on", tasks=[good_task(depends_on=["b"]), good_task(key="b", depends_on=["a"])])
for argv, field in (
    (["", "x"], "tasks[0].command"),
    (["a\x00b"], "tasks[0].command[0]"),
    (["true", "x\x00"], "tasks[0].command[1]"),
    (["x"] * 1001, "tasks[0].command"),
    (["a" * (16 * 1024 + 1)], "tasks[0].command[0]"),
):
    submit(INVALID, field, tasks=[good_task(command=argv)])
for env in (
    {"A=B": "1"},
    {"": "1"},
    {"A\x00": "1"},
    {"1A": "x"},
    {"A B": "x"},
    {"A-B": "x"},
    {"a" * 129: "x"},
    {"A": "x\x00"},
    {"A": "x" * (32 * 1024 + 1)},
    {f"V{i}": "x" for i in range(201)},
):
    submit(INVALID, "tasks[0].env", tasks=[good_task(env=env)])
for timeout in (-1, 7 * 24 * 3600 + 1, -(2**31)):
    submit(INVALID, "tasks[0].timeout_seconds", tasks=[good_task(timeout_seconds=timeout)])
for files in (["../../"], ["."], [""], ["/"], [".."], ["a/../../b"], ["a\x00"], ["f"] * 201, ["f" * 1025]):
    submit(INVALID, "tasks[0].files", tasks=[good_task(files=files)])
for resources in (["table:"], [".."], ["queue:  "], ["r"] * 201, ["x\x00"]):
    submit(INVALID, "tasks[0].resources", tasks=[good_task(resources=resources)])
for name, value in (("size", "huge"), ("complexity", "extreme"), ("risk", "none"), ("size", "SMALL")):
    submit(INVALID, f"tasks[0].{name}", tasks=[good_task(**{name: value})])
for caps in (["Bad Cap"], ["c"] * 33, [""], ["x\x00"]):
    submit(INVALID, "tasks[0].required_capabilities", tasks=[good_task(required_capabilities=caps)])
for flags in ({"nope": True}, {"": True}, {"x\x00": True}):
    submit(INVALID, "tasks[0].flags", tasks=[good_task(flags=flags)])

# --- the other ChangeService calls ------------------------------------------------------------------------
BAD_IDS = ("", "x" * 65, "a\x00b", "../x", "a b", "chg_%", "-x")
for method, cls, field in (
    ("GetChange", change_pb2.GetChangeRequest, "change_id"),
    ("WatchChange", change_pb2.WatchChangeRequest, "change_id"),
    ("CancelChange", change_pb2.CancelChangeRequest, "change_id"),
    ("ListChangeSets", change_pb2.ListChangeSetsRequest, "change_id"),
    ("GetPatch", change_pb2.GetPatchRequest, "changeset_id"),
    ("GetSpend", change_pb2.GetSpendRequest, "change_id"),
):
    for bad in BAD_IDS:
        case("change", method, cls(**{field: bad}), INVALID, field)
    case("change", method, cls(**{field: "chg_00000000000000000000"}), NOT_FOUND, field)
for budget in (math.nan, math.inf, 1e308, -1.0, 10_001.0):
    case(
        "change",
        "RaiseBudget",
        change_pb2.RaiseBudgetRequest(change_id="chg_x", budget_usd=budget),
        INVALID,
        "budget_usd",
    )
for bad in BAD_IDS:
    case("change", "RetryTask", change_pb2.RetryTaskRequest(task_id=bad), INVALID, "task_id")
case("change", "RetryTask", change_pb2.RetryTaskRequest(task_id="tsk_00000000000000000000"), NOT_FOUND, "task_id")
for tier in ("a b", "x\x00", "t" * 65, "-x"):
    case("change", "RetryTask", change_pb2.RetryTaskRequest(task_id="tsk_x", tier=tier), INVALID, "tier")
MORE = types_pb2.Task(key="more", kind="test", objective="more", command=["true"])
for bad in BAD_IDS:
    case("change", "AmendChange", change_pb2.AmendChangeRequest(change_id=bad, tasks=[MORE]), INVALID, "change_id")
case("change", "AmendChange", change_pb2.AmendChangeRequest(change_id="chg_0000", tasks=[MORE]), NOT_FOUND, "change_id")
for key in ("../x", "a/b", "a\x00", "k" * 65, ""):
    edges = [change_pb2.TaskEdge(task="more", depends_on=key)]
    case(
        "change",
        "AmendChange",
        change_pb2.AmendChangeRequest(change_id="chg_x", edges=edges),
        INVALID,
        "edges[0].depends_on",
    )
    bad_task = types_pb2.Task(key=key, kind="test", objective="more", command=["true"])
    case(
        "change",
        "AmendChange",
        change_pb2.AmendChangeRequest(change_id="chg_x", tasks=[bad_task]),
        INVALID,
        "tasks[0].key",
    )
for limit in (math.nan, math.inf, 1e308, -1.0, 0.0, 1e10):
    request = operations_pb2.RaiseMeterRequest(meter="provider_month", limit=limit)
    case("ops", "RaiseMeter", request, INVALID, "limit")
for meter in ("", "tokens", "x\x00"):
    case("ops", "RaiseMeter", operations_pb2.RaiseMeterRequest(meter=meter, limit=5), INVALID, "meter")
case("ops", "RaiseMeter", operations_pb2.RaiseMeterRequest(meter="project", name="nope", limit=5), NOT_FOUND, "name")
case(
    "change",
    "WatchChange",
    change_pb2.WatchChangeRequest(change_id="chg_x", after_event_id=-1),
    INVALID,
    "after_event_id",
)
for over, field in (
    ({"limit": -1}, "limit"),
    ({"page_size": -5}, "page_size"),
    ({"page_token": "garbage!"}, "page_token"),
    ({"page_token": "W10"}, "page_token"),
    ({"project": "a b"}, "project"),
    ({"project": "x\x00"}, "project"),
    ({"page_token": "t" * 513}, "page_token"),
):
    case("change", "ListChanges", change_pb2.ListChangesRequest(**over), INVALID, field)
case(
    "change", "ListChangeSets", change_pb2.ListChangeSetsRequest(change_id="chg_x", page_size=-1), INVALID, "page_size"
)

# --- OperationsService ---------------------------------------------------------------------------------------
for name in ("", "a b", "x\x00", "n" * 201, "../agent", "-x"):
    case("ops", "DrainAgent", operations_pb2.DrainAgentRequest(name=name), INVALID, "name")
case("ops", "DrainAgent", operations_pb2.DrainAgentRequest(name="nobody-here"), NOT_FOUND, "name")
for over, field in (
    ({"state": "runing"}, "state"),
    ({"state": "RUNNING"}, "state"),
    ({"agent": "a b"}, "agent"),
    ({"limit": -1}, "limit"),
    ({"page_size": -1}, "page_size"),
    ({"change_id": "x\x00"}, "change_id"),
    ({"page_token": "%%%"}, "page_token"),
):
    case("ops", "ListRuns", operations_pb2.ListRunsRequest(**over), INVALID, field)
for method, cls in (
    ("GetRun", operations_pb2.GetRunRequest),
    ("CancelRun", operations_pb2.CancelRunRequest),
    ("TailRunLogs", operations_pb2.TailRunLogsRequest),
    ("GetPacket", operations_pb2.GetPacketRequest),
    ("ListInputs", operations_pb2.ListInputsRequest),
):
    for bad in BAD_IDS:
        case("ops", method, cls(run_id=bad), INVALID, "run_id")
    case("ops", method, cls(run_id="run_00000000000000000000"), NOT_FOUND, "run_id")
for bad in BAD_IDS:
    case("ops", "SendInput", operations_pb2.SendInputRequest(run_id=bad, kind="message", text="hi"), INVALID, "run_id")
case(
    "ops",
    "SendInput",
    operations_pb2.SendInputRequest(run_id="run_00000000000000000000", kind="message", text="hi"),
    NOT_FOUND,
    "run_id",
)
for over, field in (
    ({"change_id": "a b"}, "change_id"),
    ({"run_id": "x\x00"}, "run_id"),
    ({"page_size": -1}, "page_size"),
):
    case("ops", "ListQuestions", operations_pb2.ListQuestionsRequest(**over), INVALID, field)
for bad in BAD_IDS:
    case(
        "ops", "AnswerQuestion", operations_pb2.AnswerQuestionRequest(question_id=bad, text="a"), INVALID, "question_id"
    )
case(
    "ops", "AnswerQuestion", operations_pb2.AnswerQuestionRequest(question_id="q_1", text="t" * 70000), INVALID, "text"
)
case(
    "ops",
    "AnswerQuestion",
    operations_pb2.AnswerQuestionRequest(question_id="q_1", text="yes"),
    NOT_FOUND,
    "question_id",
)
for over, field in (
    ({"kind": ""}, "kind"),
    ({"kind": "shout"}, "kind"),
    ({"kind": "message", "text": "t" * (64 * 1024 + 1)}, "text"),
    ({"kind": "message", "text": "nul\x00"}, "text"),
):
    case("ops", "SendInput", operations_pb2.SendInputRequest(run_id="run_x", **over), INVALID, field)
case("ops", "CancelRun", operations_pb2.CancelRunRequest(run_id="run_x", reason="r" * 1025), INVALID, "reason")
case("ops", "TailRunLogs", operations_pb2.TailRunLogsRequest(run_id="run_x", after_seq=-1), INVALID, "after_seq")
for over, field in (
    ({"kind": "%"}, "kind"),
    ({"kind": "RUN."}, "kind"),
    ({"kind": "k" * 65}, "kind"),
    ({"after_id": -1}, "after_id"),
    ({"limit": -1}, "limit"),
    ({"run_id": "a b"}, "run_id"),
    ({"page_token": "!"}, "page_token"),
):
    case("ops", "ListEvents", operations_pb2.ListEventsRequest(**over), INVALID, field)
for over, field in (
    ({"prefix": "p" * 301}, "prefix"),
    ({"prefix": "a\x00"}, "prefix"),
    ({"page_size": -1}, "page_size"),
):
    case("ops", "GetUsage", operations_pb2.GetUsageRequest(**over), INVALID, field)
for method, cls in (
    ("ListReceipts", operations_pb2.ListReceiptsRequest),
    ("ListClaims", operations_pb2.ListClaimsRequest),
):
    for over, field in (
        ({"change_id": "a b"}, "change_id"),
        ({"page_size": -1}, "page_size"),
        ({"page_token": "zz"}, "page_token"),
    ):
        case("ops", method, cls(**over), INVALID, field)
for over, field in (({"page_size": -1}, "page_size"), ({"page_token": "bad token"}, "page_token")):
    case("ops", "ListAgents", operations_pb2.ListAgentsRequest(**over), INVALID, field)

# --- AgentService (agent token) ------------------------------------------------------------------------------
for over, field in (
    ({"run_id": ""}, "run_id"),
    ({"run_id": "a\x00"}, "run_id"),
    ({"purpose": "steal"}, "purpose"),
    ({"max_output_tokens": -1}, "max_output_tokens"),
    ({"max_output_tokens": 2_000_000}, "max_output_tokens"),
    ({"estimated_input_tokens": -5}, "estimated_input_tokens"),
    ({"model": "a b"}, "model"),
    ({"key": "k" * 201}, "key"),
):
    case(
        "agent",
        "ReserveModelCall",
        agent_pb2.ReserveModelCallRequest(**{"run_id": "run_x", "key": "k", **over}),
        INVALID,
        field,
    )
case("agent", "ReserveModelCall", agent_pb2.ReserveModelCallRequest(run_id="run_x", key="k"), NOT_FOUND, "run_id")
for over, field in (
    ({"reservation_id": ""}, "reservation_id"),
    ({"error": "e" * 201}, "error"),
    ({"usage": agent_pb2.Usage(input_tokens=-1)}, "usage.input_tokens"),
    ({"usage": agent_pb2.Usage(output_tokens=2**40)}, "usage.output_tokens"),
):
    case(
        "agent",
        "SettleModelCall",
        agent_pb2.SettleModelCallRequest(**{"reservation_id": "mc_x", **over}),
        INVALID,
        field,
    )
case("agent", "SettleModelCall", agent_pb2.SettleModelCallRequest(reservation_id="mc_x"), NOT_FOUND, "reservation_id")
for over, field in (
    ({"branch": ""}, "branch"),
    ({"commit": "xyz"}, "commit"),
    ({"base_commit": "1234"}, "base_commit"),
    ({"intent_json": "not json"}, "intent_json"),
    ({"intent_json": "[1]"}, "intent_json"),
    ({"stacked_on": ["a b"]}, "stacked_on[0]"),
    ({"summary": "s" * (64 * 1024 + 1)}, "summary"),
):
    case(
        "agent",
        "PublishChangeSet",
        agent_pb2.PublishChangeSetRequest(**{"run_id": "run_x", "branch": "drover/x", "commit": "a" * 40, **over}),
        INVALID,
        field,
    )

STUBS: dict[str, Callable[[grpc.Channel], Any]] = {
    "change": change_pb2_grpc.ChangeServiceStub,
    "ops": operations_pb2_grpc.OperationsServiceStub,
    "agent": agent_pb2_grpc.AgentServiceStub,
}


def _table(fleet: Fleet) -> collections.Counter[str]:
    plane = fleet.start_plane()
    plane.add_project("web")
    tokens = {
        "change": plane.admin_token,
        "ops": plane.admin_token,
        "agent": plane.agent_token_file.read_text().strip(),
    }
    tally: collections.Counter[str] = collections.Counter()
    wrong = []
    with grpc.insecure_channel(plane.target, options=[("grpc.max_send_message_length", 64 << 20)]) as channel:
        for service, method, request, code, field in CASES:
            call = getattr(STUBS[service](channel), method)
            try:
                answer = call(request, metadata=(("authorization", f"Bearer {tokens[service]}"),), timeout=15)
                if hasattr(answer, "__next__"):
                    list(answer)
                got, details = grpc.StatusCode.OK, ""
            except grpc.RpcError as err:
                got, details = err.code(), err.details() or ""
            tally["tried"] += 1
            tally[
                {
                    grpc.StatusCode.OK: "accepted",
                    grpc.StatusCode.UNKNOWN: "unknown",
                    grpc.StatusCode.INTERNAL: "internal",
                }.get(got, "refused")
            ] += 1
            if got == code and field in details:
                tally["answered precisely"] += 1
            else:
                wrong.append(
                    f"{method} {str(request)[:120]!r}: wanted {code.name} naming {field!r}, "
                    f"got {got.name} {details[:200]!r}"
                )
        stored = operations_pb2_grpc.OperationsServiceStub(channel).ListEvents(
            operations_pb2.ListEventsRequest(kind="change."),
            metadata=(("authorization", f"Bearer {plane.admin_token}"),),
        )
    print(f"\nmalformed requests: {dict(tally)}")
    assert not wrong, f"{len(wrong)} of {len(CASES)} answered wrongly:\n" + "\n".join(wrong)
    assert list(stored.events) == [], "a refused submission was stored"
    return tally


def test_every_malformed_request_is_refused_naming_its_field_on_sqlite(fleet: Fleet) -> None:
    assert len(CASES) >= 165
    _table(fleet)


def test_every_malformed_request_is_refused_naming_its_field_on_postgresql(pg_fleet: Fleet) -> None:
    _table(pg_fleet)


def test_the_agent_stream_refuses_a_malformed_hello_naming_the_field(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    token = plane.agent_token_file.read_text().strip()
    hellos = [
        ({"name": ""}, "hello.name"),
        ({"name": "a b"}, "hello.name"),
        ({"name": "x\x00"}, "hello.name"),
        ({"name": "n" * 201}, "hello.name"),
        ({"name": "ok", "capacity": 0}, "hello.capacity"),
        ({"name": "ok", "capacity": 5000}, "hello.capacity"),
        ({"name": "ok", "capacity": 1, "labels": {"bad key": "v"}}, "hello.labels"),
        ({"name": "ok", "capacity": 1, "labels": {"k": "v" * 257}}, "hello.labels"),
        ({"name": "ok", "capacity": 1, "active_runs": ["a b"]}, "hello.active_runs[0]"),
    ]
    with grpc.insecure_channel(plane.target) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        for fields, field in hellos:
            first = agent_pb2.AgentMessage(hello=agent_pb2.Hello(**fields))
            with pytest.raises(grpc.RpcError) as caught:
                list(stub.Connect(iter([first]), metadata=(("authorization", f"Bearer {token}"),), timeout=10))
            assert caught.value.code() == INVALID, (fields, caught.value.code())
            assert field in caught.value.details(), (fields, caught.value.details())


def test_large_changes_are_listed_in_pages_that_fit_one_answer(fleet: Fleet) -> None:
    """Six Changes of almost 1 MiB each made the default ListChanges exceed the message limit for
    everyone. Pages stop at 3 MiB, whatever page_size asks for."""
    plane = fleet.start_plane()
    plane.add_project("web")
    with plane.client() as client:
        big = [good_task(key=f"t{i}", objective="o" * 60_000) for i in range(15)]  # ~0.9 MB a Change
        ids = [client.submit_change("web", f"big {n}", big).id for n in range(6)]
    with grpc.insecure_channel(plane.target) as channel:  # grpc's default 4 MiB receive limit, as grpcurl's
        stub = change_pb2_grpc.ChangeServiceStub(channel)
        seen, token, pages = [], "", 0
        while True:
            page = stub.ListChanges(
                change_pb2.ListChangesRequest(page_size=500, page_token=token),
                metadata=(("authorization", f"Bearer {plane.admin_token}"),),
            )
            assert page.ByteSize() < 4 * 1024 * 1024
            seen += [c.id for c in page.changes]
            pages += 1
            token = page.next_page_token
            if not token:
                break
    assert sorted(seen) == sorted(ids) and len(seen) == len(set(seen))
    assert pages >= 2


def test_an_unexpected_error_answers_internal_with_an_error_id_in_the_log(fleet: Fleet) -> None:
    """A fault below the edge (here a row no version of Drover writes) answers INTERNAL with an id that
    the server log carries with its traceback; the message carries no SQL and no stored values."""
    plane = fleet.start_plane()
    plane.add_project("web")
    with plane.client() as client:
        change = client.submit_change("web", "g", [good_task()])
    db = sqlite3.connect(plane.data_dir / "drover.db")
    with db:
        db.execute("UPDATE tasks SET env = 'not json, secret-ish' WHERE change_id = ?", (change.id,))
    db.close()
    with grpc.insecure_channel(plane.target) as channel:
        stub = change_pb2_grpc.ChangeServiceStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            stub.GetChange(
                change_pb2.GetChangeRequest(change_id=change.id),
                metadata=(("authorization", f"Bearer {plane.admin_token}"),),
            )
    assert caught.value.code() == grpc.StatusCode.INTERNAL
    details = caught.value.details()
    found = re.search(r"internal error (err_[0-9a-f]{12})", details)
    assert found, details
    assert "SELECT" not in details and "secret-ish" not in details and "tasks" not in details
    log = (plane.data_dir / f"controlplane-{plane.starts}.log").read_text()
    assert found.group(1) in log and "Traceback" in log
