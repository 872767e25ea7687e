"""The agentd process: connection, runs and the outbox, and its clean shutdown."""

from __future__ import annotations

import asyncio
import logging
import pathlib
import signal

from agentd import __version__
from agentd.daemon import metrics
from agentd.daemon.assignment import decode
from agentd.daemon.config import AgentConfig
from agentd.daemon.connection import Connection, to_wire
from agentd.daemon.mirrors import MirrorRefresh
from agentd.daemon.outbox import Outbox, RunOutbox
from agentd.daemon.runs import Runs
from agentd.errors import RunRefused
from agentd.run import session_input
from drover.v1 import agent_pb2

log = logging.getLogger("agentd")


class Agent:
    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        self.outbox = Outbox()
        self.runs = Runs(config, self.outbox)
        self.mirrors = MirrorRefresh(config)  # repository mirrors fetched between runs
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

    def setups(self) -> metrics.SetupTally:
        return self.runs.setups

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
                deliver_input(slot.dir, slot.box, message.input)
        elif body == "drain" and message.drain.undrain:
            self.draining = False
            log.warning("undrained: taking new runs again")
        elif body == "drain":
            self.draining = True
            log.warning("draining: taking no new runs")

    def _assign(self, message: agent_pb2.RunAssignment) -> None:
        assignment = decode(message)  # agentd's edge: past here a RunSpec, never protobuf
        try:
            if self.draining:
                raise RunRefused("draining")
            self.runs.start(assignment)
            self.mirrors.note(assignment.spec, assignment.secret_env)
            log.info("run %s (%s) started", assignment.run_id, assignment.spec.task_key)
        except RunRefused as refused:
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
        mirrors = asyncio.create_task(self.mirrors.run_forever(), name="mirrors")
        await asyncio.wait({connection, stopper}, return_when=asyncio.FIRST_COMPLETED)
        mirrors.cancel()
        log.info("stopping: runs keep going under their supervisors; the outbox stays in %s", self.config.spool)
        self.draining = True
        connection.cancel()
        await asyncio.gather(connection, return_exceptions=True)
        await self.runs.close()
        if connection.done() and not connection.cancelled() and connection.exception():
            raise connection.exception()  # type: ignore[misc]


def deliver_input(run_dir: pathlib.Path, box: RunOutbox, given: agent_pb2.SessionInput) -> None:
    """Keep a person's input on disk for the run's supervisor (agentd/run/session_input.py), each
    input_seq once and in order, and report it received through the run's outbox."""
    path = run_dir / session_input.FILE
    if given.input_seq != session_input.stored_through(path) + 1:
        return  # had (and reported) already, or out of order: the next reconnect sends it again
    try:
        session_input.store(path, given.input_seq, given.kind, given.text, given.input_id, given.question_id)
        box.append("input_received", input_seq=given.input_seq)
    except OSError as err:
        log.error("run %s: cannot keep input %d: %s", run_dir.name, given.input_seq, err)
        return
    log.info("run %s: input %d (%s) received", run_dir.name, given.input_seq, given.kind)
