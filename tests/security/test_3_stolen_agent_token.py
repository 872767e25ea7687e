"""Finding 3: a stolen agent token received every project's secrets. Agent tokens were bound to nothing
and pool labels were whatever hello claimed: a fake agent with capacity 100 was picked first, received
other projects' assignments with their git tokens in secret_env, reported a fake `succeeded`, and the
Change succeeded."""

from __future__ import annotations

import pathlib

import grpc
import pytest

from drover.v1 import agent_pb2, agent_pb2_grpc
from tests.conftest import Fleet, python_command, task, wait_for
from tests.security.rawagent import RawAgent

GIT_TOKEN = "ghp_web-project-git-token-0123456789"


def _web_project(fleet: Fleet, tmp_path: pathlib.Path) -> None:
    (tmp_path / "git.token").write_text(GIT_TOKEN + "\n")
    fleet.plane.cli("project", "add", "web", "--pool", "web", "--git-token-file", str(tmp_path / "git.token"))


def test_an_agent_of_another_pool_never_receives_a_run_or_its_secrets(fleet: Fleet, tmp_path: pathlib.Path) -> None:
    plane = fleet.start_plane()
    _web_project(fleet, tmp_path)
    thief = RawAgent(plane, "thief", plane.agent_token_file.read_text().strip(), capacity=100)
    try:
        assert thief.messages(2)[0].WhichOneof("body") == "welcome"
        fleet.agent("web-1", pool="web")
        with plane.client() as client:
            change = client.submit_change("web", "deploy", [task(f"t{i}", ["true"]) for i in range(3)])
            final = wait_for(
                lambda: (c := client.get_change(change.id)).status == "succeeded" and c,
                60,
                what="the web Change to succeed on its own pool",
            )
            runs = client.list_runs(change_id=change.id)
        got = thief.messages(1)
    finally:
        thief.close()
    assert final.status == "succeeded"
    assert {r.agent for r in runs} == {"web-1"}
    assert [m for m in got if m.WhichOneof("body") == "assign"] == []
    assert GIT_TOKEN not in "".join(str(m) for m in got)


def test_a_pool_label_that_contradicts_the_token_is_refused(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    plane.add_project("web", pool="web")
    liar = RawAgent(plane, "liar", plane.agent_token_file.read_text().strip(), capacity=100, labels={"pool": "web"})
    try:
        assert liar.refused_with() == grpc.StatusCode.PERMISSION_DENIED
        assert "pool" in liar.error.details()
    finally:
        liar.close()
    with plane.client() as client:
        assert [a.name for a in client.list_agents()] == []


def test_an_agent_name_belongs_to_the_token_that_registered_it(fleet: Fleet, tmp_path: pathlib.Path) -> None:
    plane = fleet.start_plane()
    _web_project(fleet, tmp_path)
    web = fleet.agent("web-1", pool="web")
    web.stop()
    with plane.client() as client:
        wait_for(lambda: not any(a.connected for a in client.list_agents()), 30, what="web-1 to disconnect")
        # Another token of the very same pool cannot take the name either.
        other = plane.cli("token", "create", "--kind", "agent", "--name", "other", "--pool", "web").stdout.strip()
        for token in (plane.agent_token_file.read_text().strip(), other):
            impostor = RawAgent(plane, "web-1", token, labels={})
            try:
                assert impostor.refused_with() == grpc.StatusCode.PERMISSION_DENIED, token
                assert "belongs to another agent token" in impostor.error.details()
            finally:
                impostor.close()
        assert not any(a.connected for a in client.list_agents())


def test_a_fake_result_and_model_calls_for_another_agents_run_are_not_applied(fleet: Fleet, tmp_path) -> None:
    plane = fleet.start_plane()
    _web_project(fleet, tmp_path)
    fleet.agent("web-1", pool="web")
    default_token = plane.agent_token_file.read_text().strip()
    thief = RawAgent(plane, "thief", default_token, capacity=100)
    try:
        thief.messages(1)
        with plane.client() as client:
            sleeper = python_command("import time; time.sleep(60)")
            change = client.submit_change("web", "slow", [task("slow", sleeper)])
            run_id = wait_for(
                lambda: (r := client.list_runs(change_id=change.id)) and r[0].state == "running" and r[0].id,
                30,
                what="the web run to start",
            )
            thief.run_message(run_id, 1, finished=agent_pb2.RunFinished(status="succeeded"))
            thief.run_message(run_id, 2, finished=agent_pb2.RunFinished(status="succeeded"))
            thief.messages(2)
            assert client.get_run(run_id).state == "running"
            assert client.get_change(change.id).status == "running"
            stub = agent_pb2_grpc.AgentServiceStub(thief.channel)
            auth = (("authorization", f"Bearer {default_token}"),)
            for call, request in [
                (stub.ReserveModelCall, agent_pb2.ReserveModelCallRequest(run_id=run_id, key="k", model="m")),
                (stub.PublishChangeSet, agent_pb2.PublishChangeSetRequest(run_id=run_id, branch="b", commit="a" * 40)),
            ]:
                with pytest.raises(grpc.RpcError) as caught:
                    call(request, metadata=auth)
                assert caught.value.code() == grpc.StatusCode.NOT_FOUND
            client.cancel_change(change.id)
    finally:
        thief.close()
