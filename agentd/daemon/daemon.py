"""The agentd process: connection, runs and the outbox, and its clean shutdown."""

from __future__ import annotations

import asyncio
import logging
import signal

from agentd import __version__
from agentd.daemon import metrics
from agentd.daemon.config import AgentConfig
from agentd.daemon.connection import Connection, to_wire
from agentd.daemon.outbox import Outbox
from agentd.daemon.run_slots import Refused
from agentd.daemon.runs import Runs
from agentd.run import session_input
from drover.v1 import agent_pb2

log = logging.getLogger("agentd")


class Agent:
    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        self.outbox = Outbox()
        self.runs = Runs(config, self.outbox)
        self.draining = False
        self.connection = Connection(config, self.outbox, self.hello, self.on_control, self.on_welcome)

    def hello(self) -> agent_pb2.Hello:
        return agent_pb2.Hello(
            name=self.config.name,
            labels=dict(self.config.labels),
            capacity=self.config.capacity,
            drivers=self.config.drivers(),
            version=__version__,
            active_runs=self.runs.active_ids(),
            undelivered_runs=self.runs.undelivered_ids(),
            draining=self.draining,
            resume_runs=self.runs.resume_ids(),
        )

    def busy_runs(self) -> int:
        return self.runs.busy

    def capacity(self) -> int:
        return self.config.capacity

    def is_connected(self) -> bool:
        return self.connection.connected.is_set()

    def on_welcome(self, welcome: agent_pb2.Welcome) -> None:
        self.runs.forget_applied(dict(welcome.applied))

    def on_control(self, message: agent_pb2.ControlMessage) -> None:
        body = message.WhichOneof("body")
        if body == "ack":
            self.runs.ack(message.ack.run_id, message.ack.seq)
        elif body == "assign":
            self._assign(message.assign)
        elif body == "cancel":
            self.runs.cancel(message.cancel.run_id)
        elif body == "input":
            slot = self.runs.slots.get(message.input.run_id)
            if slot is not None and slot.live and slot.driver != "command":  # else the run has ended
                session_input.deliver(slot.dir, slot.box, message.input)
        elif body == "drain" and message.drain.undrain:
            self.draining = False
            log.warning("undrained: taking new runs again")
        elif body == "drain":
            self.draining = True
            log.warning("draining: taking no new runs")

    def _assign(self, assignment: agent_pb2.RunAssignment) -> None:
        try:
            if self.draining:
                raise Refused("draining")
            self.runs.start(assignment)
            log.info("run %s (%s) started", assignment.run_id, assignment.task_key)
        except Refused as refused:
            log.info("run %s refused: %s", assignment.run_id, refused.reason)
            self.connection.send_direct(
                to_wire(assignment.run_id, {"seq": 1, "kind": "refused", "reason": refused.reason})
            )

    async def run(self) -> None:
        self.runs.recover()
        if self.config.metrics_listen:
            port = metrics.serve_metrics(self.config.metrics_listen, self, self.outbox)
            log.info("metrics on http://%s:%d/metrics", self.config.metrics_listen.rpartition(":")[0], port)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        connection = asyncio.create_task(self.connection.run_forever(), name="connection")
        stopper = asyncio.create_task(stop.wait())
        await asyncio.wait({connection, stopper}, return_when=asyncio.FIRST_COMPLETED)
        log.info("stopping: runs keep going under their supervisors; the outbox stays in %s", self.config.spool)
        self.draining = True
        connection.cancel()
        await asyncio.gather(connection, return_exceptions=True)
        await self.runs.close()
        if connection.done() and not connection.cancelled() and connection.exception():
            raise connection.exception()  # type: ignore[misc]
