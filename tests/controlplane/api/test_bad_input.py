"""Bad input through the SDK and the raw agent stream against a real control plane: every refusal
has its typed error and names what was wrong, and nothing refused is stored."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest

import drover
from drover import Client
from drover.v1 import agent_pb2, agent_pb2_grpc, change_pb2, change_pb2_grpc
from tests.conftest import ControlPlane, Fleet, python_command, task

TRUE = python_command("pass")


def make_token(plane: ControlPlane, name: str, role: str) -> str:
    out = plane.cli("token", "create", "--kind", "user", "--name", name, "--role", role).stdout.strip()
    token = out.splitlines()[-1].strip()
    assert token.startswith("drv_u_"), out
    return token


def assert_nothing_stored(client: Client) -> None:
    assert client.list_changes() == []
    assert client.list_runs() == []
    assert [e.kind for e in client.list_events(kind="change.")] == []
    assert [e.kind for e in client.list_events(kind="task.")] == []
    assert [e.kind for e in client.list_events(kind="run.")] == []


def raises(error: type[drover.DroverError], call: Callable[[], Any], *names: str) -> drover.DroverError:
    """`call()` raises `error` whose message names each of `names`."""
    with pytest.raises(error) as caught:
        result = call()
        if isinstance(result, Iterator):
            list(result)
    for name in names:
        assert name in caught.value.message, f"{name!r} not in {caught.value.message!r}"
    return caught.value


# --- Change graphs ---------------------------------------------------------------------------------


def test_invalid_graphs_are_refused_naming_the_field_and_nothing_is_stored(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    plane.add_project("bare")
    cases: list[tuple[str, str, list[dict[str, Any]], str]] = [
        # (project, goal, tasks, the field the message must name)
        ("bare", "dup", [task("a", TRUE), task("a", TRUE)], "tasks[1].key"),
        ("bare", "unknown dep", [task("a", TRUE), task("b", TRUE, depends_on=("zzz",))], "tasks[1].depends_on"),
        ("bare", "self dep", [task("a", TRUE, depends_on=("a",))], "tasks[0].depends_on"),
        (
            "bare",
            "cycle",
            [
                task("a", TRUE, depends_on=("c",)),
                task("b", TRUE, depends_on=("a",)),
                task("c", TRUE, depends_on=("b",)),
            ],
            "tasks[0].depends_on",
        ),
        ("bare", "empty objective", [task("a", TRUE), task("b", TRUE, objective="  ")], "tasks[1].objective"),
        ("bare", "empty key", [task("", TRUE)], "tasks[0].key"),
        ("bare", "empty kind", [task("a", TRUE, kind="")], "tasks[0].kind"),
        ("bare", "empty program", [task("a", ["", "x"])], "tasks[0].command[0]"),
        ("bare", "negative timeout", [task("a", TRUE, timeout_seconds=-1)], "tasks[0].timeout_seconds"),
        ("bare", "no tasks", [], "tasks"),
        ("bare", "   ", [task("a", TRUE)], "goal"),
        ("bare", "", [task("a", TRUE)], "goal"),
        ("", "no project", [task("a", TRUE)], "project"),
    ]
    with plane.client() as client:
        for project, goal, tasks, field in cases:
            err = raises(
                drover.InvalidArgument, lambda p=project, g=goal, t=tasks: client.submit_change(p, g, t), field
            )
            assert err.message.startswith(f"{field}:"), err.message
            assert err.field == field and str(err) == err.message  # the server's field, from the status metadata
        cycle = raises(drover.InvalidArgument, lambda: client.submit_change("bare", "cycle", cases[3][2]), "cycle")
        assert "a -> c -> b -> a" in cycle.message and cycle.field == "tasks[0].depends_on"
        raises(
            drover.InvalidArgument,
            lambda: client.submit_change("bare", "negative budget", [task("a", TRUE)], budget_usd=-1),
            "budget_usd",
        )

        # A graph that is valid but names no known project is NOT_FOUND, naming the project.
        raises(
            drover.NotFound, lambda: client.submit_change("nowhere", "ghost", [task("a", TRUE)]), "project", "nowhere"
        )
        # Validation comes before the lookup: a bad graph on an unknown project is still INVALID_ARGUMENT.
        raises(drover.InvalidArgument, lambda: client.submit_change("nowhere", "ghost", []), "tasks")

        assert_nothing_stored(client)


def test_text_limits_and_the_message_size_limit(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    plane.add_project("bare")
    with plane.client() as client:
        # Over 4 MiB: the transport refuses the message before any servicer sees it.
        huge = "x" * (5 * 1024 * 1024)
        raises(
            drover.ResourceExhausted, lambda: client.submit_change("bare", "huge", [task("a", TRUE, objective=huge)])
        )
        # Over 64 KiB of text but well under 4 MiB: the domain refuses it and names the field.
        big = "y" * (64 * 1024 + 1)
        raises(
            drover.InvalidArgument,
            lambda: client.submit_change("bare", "big", [task("a", TRUE, objective=big)]),
            "tasks[0].objective",
            "65536",
        )
        raises(
            drover.InvalidArgument,
            lambda: client.submit_change("bare", "big", [task("a", TRUE), task("b", TRUE, objective=big)]),
            "tasks[1].objective",
        )
        raises(drover.InvalidArgument, lambda: client.submit_change("bare", big, [task("a", TRUE)]), "goal")
        assert_nothing_stored(client)

        # The channel is still usable, and exactly 64 KiB is accepted.
        limit = "z" * (64 * 1024)
        change = client.submit_change("bare", limit, [task("a", TRUE, objective=limit)])
        stored = client.get_change(change.id)
        assert stored.goal == limit and stored.tasks[0].objective == limit
        assert [c.id for c in client.list_changes()] == [change.id]


# --- unknown ids -----------------------------------------------------------------------------------


def test_unknown_ids_are_not_found(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    with plane.client() as client:
        raises(drover.NotFound, lambda: client.get_change("chg_nope"), "change_id", "chg_nope")
        raises(drover.NotFound, lambda: client.cancel_change("chg_nope"), "change_id", "chg_nope")
        raises(drover.NotFound, lambda: list(client.watch("chg_nope")), "change_id", "chg_nope")
        raises(drover.NotFound, lambda: client.get_run("run_nope"), "run_id", "run_nope")
        raises(drover.NotFound, lambda: client.cancel_run("run_nope"), "run_id", "run_nope")
        raises(drover.NotFound, lambda: list(client.run_logs("run_nope")), "run_id", "run_nope")
        raises(drover.NotFound, lambda: list(client.run_logs("run_nope", follow=True)), "run_id")
        raises(drover.NotFound, lambda: client.drain_agent("ghost"), "name", "ghost")
        raises(drover.InvalidArgument, lambda: client.get_change(""), "change_id", "must not be empty")
        # Filters that match nothing are empty answers, not errors.
        assert client.list_runs(change_id="chg_nope") == []
        assert client.list_events(run_id="run_nope") == []
        assert client.list_changes(project="nowhere") == []


def test_list_events_kind_is_a_literal_case_sensitive_prefix(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    plane.add_project("bare")
    with plane.client() as client:
        client.submit_change("bare", "g", [task("a", TRUE)])
        everything = {e.kind for e in client.list_events()}
        assert {"change.submitted", "task.ready", "run.queued"} <= everything
        assert [e.kind for e in client.list_events(kind="run.")] == ["run.queued"]
        assert {e.kind for e in client.list_events(kind="")} == everything
        # An underscore is no wildcard: a literal prefix of no kind.
        for pattern in ("_", "r_n."):
            assert client.list_events(kind=pattern) == [], pattern
        # What no event kind can hold (a LIKE wildcard, capitals) is refused, naming the field.
        for pattern in ("%", "%.", "run%", "RUN.", "Run.queued"):
            raises(drover.InvalidArgument, lambda pattern=pattern: client.list_events(kind=pattern), "kind")


# --- tokens and roles ------------------------------------------------------------------------------


def test_missing_or_unknown_tokens_are_unauthenticated(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    plane.add_project("bare")
    for token in ("", "nope", plane.admin_token + "x"):
        with Client(plane.target, token=token) as client:
            raises(drover.Unauthenticated, client.list_changes, "bearer token")
            raises(drover.Unauthenticated, lambda: client.submit_change("bare", "g", [task("a", TRUE)]))
            raises(drover.Unauthenticated, client.list_agents)
            raises(drover.Unauthenticated, lambda: client.get_run("run_nope"))  # before NOT_FOUND
            raises(drover.Unauthenticated, lambda: list(client.watch("chg_nope")))
            raises(drover.Unauthenticated, lambda: list(client.run_logs("run_nope")))
    # No metadata at all.
    with grpc.insecure_channel(plane.target) as channel:
        with pytest.raises(grpc.RpcError) as caught:
            change_pb2_grpc.ChangeServiceStub(channel).ListChanges(change_pb2.ListChangesRequest(), timeout=10)
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with plane.client() as client:
        assert_nothing_stored(client)


def test_agent_tokens_reach_only_the_agent_service_and_user_tokens_never_connect(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    plane.add_project("bare")
    agent_token = plane.agent_token_file.read_text().strip()
    with Client(plane.target, token=agent_token) as client:
        raises(drover.PermissionDenied, lambda: client.submit_change("bare", "g", [task("a", TRUE)]), "agent")
        raises(drover.PermissionDenied, client.list_changes, "agent")
        raises(drover.PermissionDenied, lambda: list(client.watch("chg_nope")), "agent")
        raises(drover.PermissionDenied, client.list_agents, "agent")
        raises(drover.PermissionDenied, client.list_runs, "agent")
        raises(drover.PermissionDenied, client.list_events, "agent")
        raises(drover.PermissionDenied, lambda: client.cancel_run("run_nope"), "agent")
        raises(drover.PermissionDenied, lambda: client.drain_agent("ghost"), "agent")
        raises(drover.PermissionDenied, lambda: list(client.run_logs("run_nope")), "agent")

    for token in (plane.admin_token, make_token(plane, "dev", "submit")):
        code, details = connect_raw(plane, token, [hello("intruder")])
        assert code == grpc.StatusCode.PERMISSION_DENIED, details
        assert "user tokens cannot call" in details
    with plane.client() as client:
        assert [a.name for a in client.list_agents()] == []
        assert_nothing_stored(client)


def test_roles_gate_cancel_run_and_drain_agent(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    plane.add_project("bare")  # no agent: runs stay queued
    submit = make_token(plane, "dev", "submit")
    manage = make_token(plane, "oncall", "run.manage")
    with (
        Client(plane.target, token=submit) as dev,
        Client(plane.target, token=manage) as oncall,
        plane.client() as admin,
    ):
        change = dev.submit_change("bare", "queued work", [task("a", TRUE), task("b", TRUE)])
        assert change.submitted_by == "dev"
        run_a, run_b = (t.latest_run_id for t in change.tasks)
        assert dev.get_run(run_a).state == "queued"
        assert [c.id for c in dev.list_changes()] == [change.id]

        raises(drover.PermissionDenied, lambda: dev.cancel_run(run_a), "run.manage", "'dev'", "submit")
        raises(drover.PermissionDenied, lambda: dev.drain_agent("ghost"), "admin", "'dev'")
        raises(drover.PermissionDenied, lambda: oncall.drain_agent("ghost"), "admin", "'oncall'")
        assert admin.get_run(run_a).state == "queued"  # the refused cancel changed nothing
        assert admin.list_events(kind="run.cancel") == []

        # run.manage includes submit; it may cancel a run.
        cancelled = oncall.cancel_run(run_a, reason="not needed")
        assert cancelled.state == "cancelled"
        assert admin.get_change(change.id).tasks[0].status == "cancelled"
        # admin includes run.manage.
        assert admin.cancel_run(run_b).state == "cancelled"
        final = admin.get_change(change.id)
        assert [t.status for t in final.tasks] == ["cancelled", "cancelled"]
        assert final.status == "failed"  # runs were cancelled, not the Change

        # A submit token may cancel a Change (ChangeService/CancelChange needs submit).
        other = dev.submit_change("bare", "to cancel", [task("c", TRUE)])
        assert dev.cancel_change(other.id).status == "cancelled"

        # Cancelling a finished run is a failed precondition, not a silent success.
        raises(drover.FailedPrecondition, lambda: oncall.cancel_run(run_a), "run_id", "already cancelled")

        # Talking to a session needs run.manage too; a run that is not running has no session to take it.
        queued = dev.submit_change("bare", "talk", [task("d", TRUE)]).tasks[0].latest_run_id
        raises(drover.PermissionDenied, lambda: dev.send_input(queued, "message", "hi"), "run.manage", "'dev'")
        raises(drover.FailedPrecondition, lambda: oncall.send_input(run_a, "message", "hi"), "run_id", "ended")
        raises(drover.FailedPrecondition, lambda: oncall.send_input(queued, "message", "hi"), "run_id", "command")
        raises(drover.InvalidArgument, lambda: oncall.send_input(queued, "message", " "), "text")
        assert admin.list_inputs(queued) == [] and admin.list_events(kind="run.input") == []

        raises(drover.NotFound, lambda: admin.drain_agent("ghost"), "name")  # admin passes the role check


def test_cancel_run_on_a_finished_run_is_a_failed_precondition(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    plane.add_project("bare")
    fleet.agent("worker")
    with plane.client() as client:
        change = client.submit_change(
            "bare", "quick", [task("a", TRUE), task("b", python_command("raise SystemExit(3)"))]
        )
        list(client.watch(change.id))
        runs = {r.task_key: r for r in client.list_runs(change_id=change.id)}
        assert runs["a"].state == "succeeded" and runs["b"].state == "failed"
        for run in runs.values():
            raises(
                drover.FailedPrecondition, lambda run=run: client.cancel_run(run.id), "run_id", f"already {run.state}"
            )
            after = client.get_run(run.id)
            assert after.state == run.state and not after.cancel_requested
        assert client.list_events(kind="run.cancel") == []
        # Cancelling a Change that already ended answers it unchanged.
        assert client.cancel_change(change.id).status == "failed"
        assert client.list_events(kind="change.cancel") == []


# --- the raw agent stream --------------------------------------------------------------------------


def hello(name: str, capacity: int = 1) -> agent_pb2.AgentMessage:
    return agent_pb2.AgentMessage(
        hello=agent_pb2.Hello(name=name, capacity=capacity, drivers=["command"], version="test")
    )


def connect_raw(
    plane: ControlPlane, token: str, messages: list[agent_pb2.AgentMessage], timeout: float = 10
) -> tuple[grpc.StatusCode, str]:
    """Open AgentService/Connect, send `messages` and half-close, read until the stream ends;
    answers its status code and details (OK when the stream ended cleanly)."""
    with grpc.insecure_channel(plane.target) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        call = stub.Connect(iter(messages), metadata=(("authorization", f"Bearer {token}"),), timeout=timeout)
        try:
            for _ in call:
                pass
        except grpc.RpcError as err:
            return err.code(), err.details() or ""
        return grpc.StatusCode.OK, ""


def test_agent_connect_refuses_a_bad_first_message_and_a_duplicate_name(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    plane.add_project("bare")
    agent_token = plane.agent_token_file.read_text().strip()
    not_hello = agent_pb2.AgentMessage(
        run=agent_pb2.RunMessage(run_id="run_x", seq=1, started=agent_pb2.RunStarted(pid=1))
    )
    for messages, names in [
        ([not_hello], "hello"),
        ([], "hello"),  # no message at all
        ([hello("zero", capacity=0)], "hello.capacity"),
        ([hello("negative", capacity=-2)], "hello.capacity"),
        ([hello("")], "hello.name"),
        ([hello("n" * 201)], "hello.name"),
    ]:
        code, details = connect_raw(plane, agent_token, messages)
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (messages, code, details)
        assert names in details
    with plane.client() as client:
        assert client.list_agents() == []
        assert client.list_events(kind="agent.") == []

    agent = fleet.agent("dup")
    code, details = connect_raw(plane, agent_token, [hello("dup", capacity=5)])
    assert code == grpc.StatusCode.ALREADY_EXISTS, details
    assert "dup" in details
    with plane.client() as client:
        # The refused duplicate changed nothing about the connected agent, which still works.
        [listed] = client.list_agents()
        assert listed.name == "dup" and listed.connected and listed.capacity == 1
        assert [e.kind for e in client.list_events(kind="agent.")] == ["agent.connected"]
        change = client.submit_change("bare", "still works", [task("a", TRUE)])
        list(client.watch(change.id))
        assert client.get_change(change.id).status == "succeeded"
        assert [r.agent for r in client.list_runs(change_id=change.id)] == ["dup"]
    assert agent.proc is not None and agent.proc.poll() is None
