"""The agent protocol spoken by hand over a real stream: refusals, exactly-once application, acks."""

from __future__ import annotations

import queue
from collections.abc import Iterator

import grpc

from drover.v1 import agent_pb2, agent_pb2_grpc
from tests.conftest import ControlPlane, Fleet, task, wait_for


class RawAgent:
    """A hand-driven agent: what it sends and what it receives, nothing else."""

    def __init__(self, plane: ControlPlane, name: str, capacity: int = 1, active_runs: tuple[str, ...] = ()) -> None:
        self.channel = grpc.insecure_channel(plane.target)
        self.outgoing: queue.Queue[agent_pb2.AgentMessage | None] = queue.Queue()
        self.send(
            agent_pb2.AgentMessage(
                hello=agent_pb2.Hello(name=name, capacity=capacity, drivers=["command"], active_runs=active_runs)
            )
        )
        token = plane.agent_token_file.read_text().strip()
        self.incoming = agent_pb2_grpc.AgentServiceStub(self.channel).Connect(
            self._requests(), metadata=(("authorization", f"Bearer {token}"),)
        )

    def _requests(self) -> Iterator[agent_pb2.AgentMessage]:
        while (message := self.outgoing.get()) is not None:
            yield message

    def send(self, message: agent_pb2.AgentMessage) -> None:
        self.outgoing.put(message)

    def run_message(self, run_id: str, seq: int, **body: object) -> None:
        self.send(agent_pb2.AgentMessage(run=agent_pb2.RunMessage(run_id=run_id, seq=seq, **body)))

    def next(self, kind: str) -> agent_pb2.ControlMessage:
        for message in self.incoming:
            if message.WhichOneof("body") == kind:
                return message
        raise AssertionError(f"stream ended before a {kind}")

    def close(self) -> None:
        self.outgoing.put(None)
        self.channel.close()


def test_a_refused_run_goes_back_to_the_queue_and_runs_elsewhere(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    plane.add_project("proto")
    raw = RawAgent(plane, "refuser")
    assert raw.next("welcome").welcome.agent == "refuser"
    with plane.client() as client:
        change = client.submit_change("proto", "refuse", [task("only", ["true"])])
        assignment = raw.next("assign").assign
        assert assignment.command.argv == ["true"] and assignment.task_key == "only"
        raw.run_message(assignment.run_id, 1, refused=agent_pb2.RunRefused(reason="at_capacity"))
        assert raw.next("ack").ack.seq == 1
        wait_for(lambda: client.get_run(assignment.run_id).state == "queued", 10, what="the run to be requeued")
        # A later run reaches the refuser, so dispatch has passed since the refusal; the refused run was
        # not handed straight back to it.
        later = client.submit_change("proto", "later", [task("later", ["true"])])
        assert raw.next("assign").assign.change_id == later.id
        assert client.get_run(assignment.run_id).state == "queued"
        raw.close()
        fleet.agent("worker")
        list(client.watch(change.id))
        run = client.get_run(assignment.run_id)
        kinds = [e.kind for e in client.list_events(run_id=run.id)]
    assert run.state == "succeeded" and run.agent == "worker"
    assert kinds == ["run.queued", "run.assigned", "run.requeued", "run.assigned", "run.started", "run.finished"]


def test_each_message_is_applied_once_and_acked_cumulatively(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    plane.add_project("proto")
    raw = RawAgent(plane, "careful")
    raw.next("welcome")
    with plane.client() as client:
        change = client.submit_change("proto", "exactly once", [task("only", ["true"])])
        run_id = raw.next("assign").assign.run_id
        log = agent_pb2.LogBatch
        acks = []
        for seq, body in [
            (1, {"started": agent_pb2.RunStarted()}),
            (2, {"log": log(stream="stdout", text="a")}),
            (2, {"log": log(stream="stdout", text="a")}),  # a replay after a reconnect
            (4, {"log": log(stream="stdout", text="c")}),  # a gap: not applied yet
            (3, {"log": log(stream="stderr", text="b")}),
            (4, {"log": log(stream="stdout", text="c")}),
            (5, {"finished": agent_pb2.RunFinished(status="succeeded")}),
        ]:
            raw.run_message(run_id, seq, **body)
            acks.append(raw.next("ack").ack.seq)
        assert acks == [1, 2, 2, 2, 3, 4, 5]
        lines = [(ln.stream, ln.text) for ln in client.run_logs(run_id)]
        assert lines == [("stdout", "a"), ("stderr", "b"), ("stdout", "c")]
        list(client.watch(change.id))
        assert client.get_change(change.id).status == "succeeded"
    raw.close()


def test_a_reconnecting_agent_learns_what_was_applied(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    plane.add_project("proto")
    raw = RawAgent(plane, "forgetful")
    raw.next("welcome")
    with plane.client() as client:
        client.submit_change("proto", "welcome", [task("only", ["true"])])
        run_id = raw.next("assign").assign.run_id
        raw.run_message(run_id, 1, started=agent_pb2.RunStarted())
        raw.run_message(run_id, 2, log=agent_pb2.LogBatch(stream="stdout", text="x"))
        raw.next("ack"), raw.next("ack")
        raw.close()
        wait_for(lambda: not any(a.connected for a in client.list_agents()), 10, what="the disconnect")
        back = RawAgent(plane, "forgetful", active_runs=(run_id,))
        assert dict(back.next("welcome").welcome.applied) == {run_id: 2}
        assert client.get_run(run_id).state == "running"
        back.close()
