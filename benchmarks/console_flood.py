#!/usr/bin/env python3
"""Whether the web console can slow the API: gRPC GetChange latency, quiet and while the console is flooded.

    python benchmarks/console_flood.py [--streams 300] [--uploads 200] [--every 0.01] [--calls 500]
                                       [--flood-nice 10] [--timeout 600]

Starts `controlplane serve --http-listen 127.0.0.1:0` (SQLite in a temporary data dir), adds a project
and submits a Change with one command Task; no agent is started, so the Change stays open and its event
stream stays open. Then:

  quiet    --calls sequential GetChange calls over gRPC (the SDK client, admin token) -> p50/p99/max
  flooded  drover.testing.console_flood (its own process, at nice --flood-nice: the crowd is other
           machines in real life, so here it should not take the measuring process's CPU) opens
           --streams server-sent event streams of that Change (/changes/<id>/stream) and --uploads
           form uploads (POST /changes/<id>/budget) sending one byte every --every seconds, all with the
           admin's session cookie; once they are open, the same GetChange calls -> p50/p99/max.

The console's limits are raised so the whole flood is admitted (the worst case for the API: nothing is
refused cheaply); a control plane without those flags (main before the console had its own process)
gets the same flood. Also printed: the CPU seconds the control plane and its console process spent
during the flooded calls. Nothing is asserted; figures are printed. Every process started here is
stopped at the end, also on error; the whole benchmark fails after --timeout seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "sdk"))
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))

from dispatch import Deadline, add_project, cpu_seconds, log_tail, pct, start_plane, wait_for

from drover import Client


def console_flags(streams: int, uploads: int) -> list[str]:
    """Limits that admit the whole flood, when this control plane has them."""
    help_text = subprocess.run(
        [sys.executable, "-m", "controlplane.cli", "serve", "--help"], capture_output=True, text=True, cwd=REPO
    ).stdout
    if "--console-max-streams" not in help_text:
        return []
    return [
        *("--console-max-connections", str(streams + uploads + 100)),
        *("--console-max-streams", str(streams + 10)),
        *("--console-max-streams-per-session", str(streams + 10)),
        *("--console-max-uploads", str(uploads + 10)),
        *("--console-body-timeout-seconds", "3600"),
    ]


def latencies(client: Client, change_id: str, calls: int) -> list[float]:
    took = []
    for _ in range(calls):
        start = time.perf_counter()
        client.get_change(change_id)
        took.append((time.perf_counter() - start) * 1000)
    return took


def line(name: str, values: list[float]) -> str:
    return (
        f"GetChange {name:<8} p50 {pct(values, 50):7.1f} ms  p99 {pct(values, 99):7.1f} ms  "
        f"max {max(values):7.1f} ms  (n={len(values)})"
    )


def console_children(pid: int) -> list[int]:
    """The console process of control plane `pid` (none when the console runs in its loop)."""
    found = []
    for task in pathlib.Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(OSError):
            found += [int(c) for c in task.read_text().split()]
    return found


def cpu(pids: list[int]) -> float:
    return sum(sum(cpu_seconds(p)) for p in pids)


def bench(args: argparse.Namespace, tmp: pathlib.Path, deadline: Deadline) -> None:
    data_dir = tmp / "cp"
    env = dict(os.environ, DROVER_LOG_LEVEL="INFO")
    env.pop("DROVER_DATABASE_URL", None)
    flags = console_flags(args.streams, args.uploads)
    plane, target = start_plane(
        data_dir, tmp / "controlplane.log", env, deadline, "--http-listen", "127.0.0.1:0", *flags
    )
    flood: subprocess.Popen[str] | None = None
    try:
        found = wait_for(
            lambda: re.search(r"drover console on (http://127\.0\.0\.1:\d+)/", log_tail(plane.log, 10**6)),
            deadline,
            60,
            "the console to listen",
        )
        url = found.group(1)
        add_project(data_dir, env, "bench")
        token_file = data_dir / "tokens" / "admin.token"
        assert plane.proc is not None
        pids = [plane.proc.pid, *console_children(plane.proc.pid)]
        where = "its own process" if len(pids) > 1 else "the control plane's event loop"
        print(f"control plane pid {pids[0]} on {target}; console {url} in {where}", flush=True)
        with Client(target, token=token_file.read_text().strip()) as client:
            task = {"key": "wait", "kind": "test", "objective": "wait", "command": ["true"]}
            change = client.submit_change("bench", "an open Change to watch", [task])
            latencies(client, change.id, min(50, args.calls))  # warm up
            before_quiet = cpu(pids[:1])
            quiet = latencies(client, change.id, args.calls)
            print(line("quiet", quiet), flush=True)
            print(f"cpu during the quiet calls: control plane {cpu(pids[:1]) - before_quiet:.1f} s", flush=True)
            flood = subprocess.Popen(
                [
                    *(sys.executable, "-m", "drover.testing.console_flood", "--url", url),
                    *("--token-file", str(token_file), "--every", str(args.every)),
                    *("--stream-path", f"/changes/{change.id}/stream?after=0"),
                    *("--upload-path", f"/changes/{change.id}/budget"),
                    *("--streams", str(args.streams), "--uploads", str(args.uploads)),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                cwd=REPO,
                env=dict(env, PYTHONPATH=str(REPO / "sdk")),
                preexec_fn=lambda: os.nice(args.flood_nice),
            )
            assert flood.stdout is not None and flood.stdin is not None
            opened = flood.stdout.readline().strip()
            print(f"flood of {args.streams} streams + {args.uploads} uploads: {opened}", flush=True)
            before = [cpu([pid]) for pid in pids]
            flooded = latencies(client, change.id, args.calls)
            spent = [cpu([pid]) - b for pid, b in zip(pids, before, strict=True)]
            print(line("flooded", flooded), flush=True)
            console_cpu = f", console process {sum(spent[1:]):.1f} s" if len(spent) > 1 else " (console included)"
            print(f"cpu during the flooded calls: control plane {spent[0]:.1f} s{console_cpu}", flush=True)
            flood.stdin.close()
            print(f"flood at the end: {flood.stdout.readline().strip()}", flush=True)
    finally:
        if flood is not None and flood.poll() is None:
            flood.kill()
            flood.wait(10)
        plane.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", type=int, default=300)
    p.add_argument("--uploads", type=int, default=200)
    p.add_argument("--every", type=float, default=0.01, help="seconds between the bytes of a slow upload")
    p.add_argument("--calls", type=int, default=500)
    p.add_argument("--flood-nice", type=int, default=10, help="the flood's CPU priority below this process's")
    p.add_argument("--timeout", type=float, default=600)
    args = p.parse_args(argv)
    deadline = Deadline(args.timeout)
    with tempfile.TemporaryDirectory(prefix="drover-console-flood-") as tmp:
        bench(args, pathlib.Path(tmp), deadline)
    return 0


if __name__ == "__main__":
    sys.exit(main())
