"""A hand-driven agent for the security tests: it says what an attacker holding an agent token would say,
and keeps everything the control plane sends it."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import grpc

from drover.v1 import agent_pb2, agent_pb2_grpc
from tests.conftest import ControlPlane


class RawAgent:
    def __init__(
        self,
        plane: ControlPlane,
        name: str,
        token: str,
        capacity: int = 1,
        labels: dict[str, str] | None = None,
        drivers: tuple[str, ...] = ("command", "harness"),
    ) -> None:
        self.channel = grpc.insecure_channel(plane.target)
        self.outgoing: queue.Queue[agent_pb2.AgentMessage | None] = queue.Queue()
        self.received: queue.Queue[agent_pb2.ControlMessage] = queue.Queue()
        self.error: grpc.RpcError | None = None
        self.ended = threading.Event()
        self.send(
            agent_pb2.AgentMessage(
                hello=agent_pb2.Hello(name=name, capacity=capacity, drivers=list(drivers), labels=labels or {})
            )
        )
        self.stream = agent_pb2_grpc.AgentServiceStub(self.channel).Connect(
            self._requests(), metadata=(("authorization", f"Bearer {token}"),)
        )
        threading.Thread(target=self._receive, daemon=True).start()

    def _requests(self) -> Iterator[agent_pb2.AgentMessage]:
        while (message := self.outgoing.get()) is not None:
            yield message

    def _receive(self) -> None:
        try:
            for message in self.stream:
                self.received.put(message)
        except grpc.RpcError as err:
            self.error = err
        finally:
            self.ended.set()

    def send(self, message: agent_pb2.AgentMessage) -> None:
        self.outgoing.put(message)

    def run_message(self, run_id: str, seq: int, **body: object) -> None:
        self.send(agent_pb2.AgentMessage(run=agent_pb2.RunMessage(run_id=run_id, seq=seq, **body)))

    def messages(self, seconds: float) -> list[agent_pb2.ControlMessage]:
        """Everything received within `seconds` (or until the stream ends)."""
        out = []
        try:
            while True:
                out.append(self.received.get(timeout=seconds))
        except queue.Empty:
            return out

    def refused_with(self, seconds: float = 10) -> grpc.StatusCode | None:
        """The status the stream ended with (None while it is open)."""
        self.ended.wait(seconds)
        return self.error.code() if self.error is not None else None

    def close(self) -> None:
        self.outgoing.put(None)
        self.channel.close()
