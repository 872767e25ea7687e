#!/usr/bin/env python3
"""The model gateway's overhead per call: the same calls straight to the fake Messages API and through
a run's gateway (agentd/run/gateway.py), side by side.

    python benchmarks/gateway.py [--calls N] [--warmup W]

The fake provider (drover.testing.fake_anthropic) runs as its own process with zero model latency, so
the difference is the gateway: HTTP parsing (h11), the token check, the model rewrite, forwarding
with httpx2, reading the usage from the JSON or the SSE stream on the way, and the reserve and
settle calls. Here reserve and settle answer in-process at once: the control-plane client's two gRPC calls to
the control plane are not in these figures (benchmarks/budgets.py measures reserve+settle on the
control plane's database). The client is the real `anthropic` SDK, as a runtime would use it, one
call after another, each kind interleaved so drifting load hits both alike. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import anthropic

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentd.run.control_plane import ModelCall, Reservation
from agentd.run.gateway import Gateway, Upstream
from drover.core.usage import Usage

KEY, TOKEN = "sk-bench-provider", "run-token-bench"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def start_fake(calls: int, folder: pathlib.Path) -> tuple[subprocess.Popen[str], str]:
    script = folder / "script.json"
    script.write_text(json.dumps([{"step": "text", "text": "ok " * 50}] * calls))
    proc = subprocess.Popen(
        [sys.executable, "-m", "drover.testing.fake_anthropic", "--script", str(script), "--api-key", KEY],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    return proc, line.rsplit(" ", 1)[-1].strip()


async def one(client: anthropic.AsyncAnthropic, stream: bool) -> float:
    began = time.perf_counter()
    messages = [{"role": "user", "content": "hello"}]
    if stream:
        async with client.messages.stream(model="m", max_tokens=100, messages=messages) as s:  # type: ignore[arg-type]
            await s.get_final_message()
    else:
        await client.messages.create(model="m", max_tokens=100, messages=messages)  # type: ignore[arg-type]
    return (time.perf_counter() - began) * 1000


async def measure(base_url: str, calls: int, warmup: int) -> dict[str, list[float]]:
    settled: list[Usage | None] = []

    class InProcess:
        """The control plane's reserve and settle, answered at once (agentd/run/control_plane.py)."""

        async def reserve(self, call: ModelCall) -> Reservation:
            return Reservation(call.key)

        async def settle(self, reservation: str, usage: Usage | None, error: str) -> None:
            settled.append(usage)

    gateway = Gateway(
        token=TOKEN,
        model="claude-sonnet-5-5",
        max_output_tokens=4000,
        upstream=Upstream(base_url, KEY),
        control_plane=InProcess(),  # type: ignore[arg-type]  # reserve and settle are all it calls
    )
    server = await asyncio.start_server(gateway.serve, "127.0.0.1", 0)
    through = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    results: dict[str, list[float]] = {}
    async with (
        anthropic.AsyncAnthropic(base_url=base_url, api_key=KEY, max_retries=0) as direct,
        anthropic.AsyncAnthropic(base_url=through, api_key=TOKEN, max_retries=0) as proxied,
    ):
        for i in range(warmup + calls):
            for stream in (False, True):
                for name, client in (("direct", direct), ("gateway", proxied)):
                    ms = await one(client, stream)
                    if i >= warmup:
                        results.setdefault(f"{name} {'stream' if stream else 'json'}", []).append(ms)
    server.close()
    await gateway.close()
    assert all(u is not None and u.input_tokens == 100 for u in settled), "every call settled with its usage"
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=300, help="measured calls of each kind (default 300)")
    parser.add_argument("--warmup", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        fake, url = start_fake(4 * (args.calls + args.warmup), pathlib.Path(tmp))
        try:
            results = asyncio.run(measure(url, args.calls, args.warmup))
        finally:
            fake.terminate()
            fake.wait()
    print(f"model gateway overhead: {args.calls} calls of each kind, sequential, fake provider with no latency")
    print(f"{'path':<16}{'p50 ms':>9}{'p99 ms':>9}{'mean ms':>9}")
    for name, values in results.items():
        print(f"{name:<16}{pct(values, 0.5):>9.2f}{pct(values, 0.99):>9.2f}{statistics.fmean(values):>9.2f}")
    for kind in ("json", "stream"):
        direct, proxied = results[f"direct {kind}"], results[f"gateway {kind}"]
        print(
            f"gateway overhead {kind}: p50 {pct(proxied, 0.5) - pct(direct, 0.5):+.2f} ms, "
            f"p99 {pct(proxied, 0.99) - pct(direct, 0.99):+.2f} ms per call"
        )


if __name__ == "__main__":
    main()
