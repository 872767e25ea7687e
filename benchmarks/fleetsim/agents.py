"""Simulated agents for the fleet benchmark: many agents in one process, each an open Connect stream
speaking the real agent protocol over real gRPC, as agentd does, but "running" each assignment at once.

    python -m benchmarks.fleetsim.agents --target HOST:PORT --token-file F --agents N --prefix P --out FILE

A run's command says what to do: `sim lines=K bytes=B pairs=C` sends started, K output lines of B
bytes in 256 KiB LogBatch messages (agentd's batch size), C ReserveModelCall+SettleModelCall pairs,
then finished, each run message acked by the control plane before the run counts as done (acks
mean the message is durable). Until SIGTERM; then the timings are written to FILE as JSON:
  assigned  {run_id: [wall time the assignment arrived, change_id]}
  done      {run_id: wall time the finished message was acked}
  pairs     reserve+settle pairs granted and settled
`FILE.progress` holds the number of runs done, rewritten every 100 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import pathlib
import signal
import sys
import time
from typing import Any

import grpc

from drover.v1 import agent_pb2, agent_pb2_grpc

STREAMS_PER_CHANNEL = 100
BATCH_BYTES = 256 * 1024


class Sim:
    def __init__(self, target: str, token: str) -> None:
        self.target, self.metadata = target, (("authorization", f"Bearer {token}"),)
        self.assigned: dict[str, list[Any]] = {}
        self.done: dict[str, float] = {}
        self.pairs = 0
        self.errors: list[str] = []
        self.channels: list[grpc.aio.Channel] = []

    def channel(self, i: int) -> grpc.aio.Channel:
        while len(self.channels) <= i // STREAMS_PER_CHANNEL:
            self.channels.append(
                grpc.aio.insecure_channel(
                    self.target,
                    options=[
                        # Its own connection: channels with the same target and options otherwise
                        # share one (the global subchannel pool), and a few thousand streams on one
                        # HTTP/2 connection fail at their first write. agentd has one per process.
                        ("grpc.use_local_subchannel_pool", 1),
                        ("grpc.keepalive_time_ms", 10_000),
                        ("grpc.keepalive_permit_without_calls", 1),
                        ("grpc.http2.max_pings_without_data", 0),
                    ],
                )
            )
        return self.channels[i // STREAMS_PER_CHANNEL]

    async def agent(self, i: int, name: str) -> None:
        stub = agent_pb2_grpc.AgentServiceStub(self.channel(i))
        call = stub.Connect(metadata=self.metadata)
        hello = agent_pb2.Hello(name=name, capacity=1, drivers=["command"], version="fleetsim")
        try:
            await call.write(agent_pb2.AgentMessage(hello=hello))
        except grpc.aio.AioRpcError as err:
            # A write to a stream the server already ended fails as INTERNAL "execute_batch" (grpc
            # issue 36066): the server's own status is the call's.
            code, details = await call.code(), await call.details()
            raise RuntimeError(f"hello not sent ({err.code().name}): the stream ended {code.name} {details}") from None
        acked: dict[tuple[str, int], asyncio.Event] = {}
        lock = asyncio.Lock()
        runs: set[asyncio.Task[None]] = set()
        heartbeat = asyncio.create_task(self._heartbeat(call, lock))
        try:
            while (message := await call.read()) is not grpc.aio.EOF:
                body = message.WhichOneof("body")
                if body == "ack":
                    acked.setdefault((message.ack.run_id, message.ack.seq), asyncio.Event()).set()
                elif body == "assign":
                    a = message.assign
                    self.assigned[a.run_id] = [time.time(), a.change_id]
                    task = asyncio.create_task(self._run(stub, call, lock, acked, a))
                    runs.add(task)
                    task.add_done_callback(runs.discard)
                    task.add_done_callback(self._report)
        except grpc.aio.AioRpcError as err:
            if err.code() != grpc.StatusCode.CANCELLED:
                self.errors.append(f"{name}: {err.code().name} {err.details()}")
                if len(self.errors) <= 20:  # the simulator's log says why streams ended, as they end
                    print(self.errors[-1], file=sys.stderr, flush=True)
        finally:
            heartbeat.cancel()

    def _report(self, task: asyncio.Task[None]) -> None:
        """A run that raised never counts as done: say why, as it happens."""
        if not task.cancelled() and task.exception() is not None:
            self.errors.append(f"a run failed: {task.exception()!r}")
            print(self.errors[-1], file=sys.stderr, flush=True)

    async def _heartbeat(self, call: Any, lock: asyncio.Lock) -> None:
        while True:
            await asyncio.sleep(10)
            async with lock:
                await call.write(agent_pb2.AgentMessage(heartbeat=agent_pb2.Heartbeat()))

    async def _run(self, stub: Any, call: Any, lock: asyncio.Lock, acked: dict[Any, Any], a: Any) -> None:
        spec = dict(arg.split("=", 1) for arg in a.command.argv[1:] if "=" in arg)
        lines, size, pairs = int(spec.get("lines", 0)), int(spec.get("bytes", 80)), int(spec.get("pairs", 0))
        seq = 0

        async def send(**body: Any) -> None:
            nonlocal seq
            seq += 1
            async with lock:
                await call.write(agent_pb2.AgentMessage(run=agent_pb2.RunMessage(run_id=a.run_id, seq=seq, **body)))

        await send(started=agent_pb2.RunStarted())
        line = "x" * (size - 1) + "\n"
        per_batch = max(1, BATCH_BYTES // size)
        for first in range(0, lines, per_batch):
            await send(log=agent_pb2.LogBatch(stream="stdout", text=line * min(per_batch, lines - first)))
        for n in range(pairs):
            await self._pair(stub, a.run_id, n)
        await send(finished=agent_pb2.RunFinished(status="succeeded", exit_code=0))
        await acked.setdefault((a.run_id, seq), asyncio.Event()).wait()
        self.done[a.run_id] = time.time()

    async def _pair(self, stub: Any, run_id: str, n: int) -> None:
        reserved = await stub.ReserveModelCall(
            agent_pb2.ReserveModelCallRequest(
                run_id=run_id, key=f"sim:{n}", model="claude-sonnet-5-5", purpose="agent", max_output_tokens=1000
            ),
            metadata=self.metadata,
        )
        if not reserved.granted:
            self.errors.append(f"{run_id}: refused {reserved.refusal}")
            return
        usage = agent_pb2.Usage(input_tokens=2000, output_tokens=500)
        await stub.SettleModelCall(
            agent_pb2.SettleModelCallRequest(reservation_id=reserved.reservation_id, usage=usage),
            metadata=self.metadata,
        )
        self.pairs += 1


async def main_async(args: argparse.Namespace) -> None:
    token = pathlib.Path(args.token_file).read_text().strip()
    sim = Sim(args.target, token)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    agents = [asyncio.create_task(sim.agent(i, f"{args.prefix}-{i:05d}")) for i in range(args.agents)]
    ended: list[str] = []

    def report(task: asyncio.Task[None]) -> None:  # an agent's stream ended before the benchmark did
        if not stop.is_set() and len(ended) < 20:
            ended.append(repr(task.exception()) if not task.cancelled() else "cancelled")
            print(f"agent stream ended: {ended[-1]}", file=sys.stderr, flush=True)

    for task in agents:
        task.add_done_callback(report)
    progress = pathlib.Path(args.out + ".progress")
    while not stop.is_set():
        progress.write_text(f"{len(sim.done)} {sum(not t.done() for t in agents)}")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.1)
    for task in agents:
        task.cancel()
    await asyncio.gather(*agents, return_exceptions=True)
    for channel in sim.channels:
        await channel.close()
    out = {"assigned": sim.assigned, "done": sim.done, "pairs": sim.pairs, "errors": sim.errors[:20]}
    pathlib.Path(args.out).write_text(json.dumps(out))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", required=True)
    p.add_argument("--token-file", required=True)
    p.add_argument("--agents", type=int, default=250)
    p.add_argument("--prefix", default="sim")
    p.add_argument("--out", required=True)
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()
