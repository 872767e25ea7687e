#!/usr/bin/env python3
"""The control plane under a simulated fleet, beside a Celery + durable RabbitMQ baseline.

    python benchmarks/fleet.py [--agents 1000] [--procs 4] [--database sqlite|postgresql|both]
                               [--low 50] [--runs 2000] [--output-runs 100 --lines 20000 --line-bytes 200]
                               [--budget-runs 50 --pairs 40] [--idle-seconds 10] [--celery on|off]

For each database: `controlplane serve` (SQLite in a temporary data dir, or a fresh PostgreSQL
database on 127.0.0.1:5432), a project without repository, and --agents simulated agents of capacity 1
in --procs processes (benchmarks/fleetsim/agents.py: real Connect streams, the real agent protocol,
each assignment "run" at once: started, output, model-call reserve+settle pairs, finished, acked).

  idle            every agent connected, nothing to do, for --idle-seconds: control-plane RSS and CPU
  low load        --low single-Task Changes one after another: submit -> assignment received p50/p99
  saturation      --runs no-op runs in Changes of 100: submit -> assignment p50/p99, assignments/s
                  (first submit -> last assignment), runs/s (first submit -> last finished acked)
  output          --output-runs runs of --lines lines of --line-bytes bytes: MB/s and lines/s ingested
                  (first assignment -> last finished acked; the finished ack follows every line's commit)
  budget          --budget-runs concurrent runs each making --pairs reserve+settle pairs: pairs/s

Then Celery 5 with a durable RabbitMQ broker (acks late, publisher confirms, prefork, 2 processes;
benchmarks/fleetsim/celery_baseline.py): apply_async -> task start p50/p99 at low load and in a burst,
and tasks/s; each Drover figure is printed with its ratio to Celery's.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import pathlib
import re
import socket
import sys
import tempfile
import time
import urllib.request
from typing import Any

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "sdk"))
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))

from dispatch import (
    BenchTimeout,
    Deadline,
    Proc,
    add_project,
    cpu_seconds,
    log_tail,
    pct,
    postgres_database,
    start_plane,
    wait_for,
)

from drover import Client

PER_CHANGE = 100
MAX_CHANGE_CAP = 1000
"""A project's per-Change caps go up to this (controlplane.domain.scheduling.MAX_CHANGE_CAP)."""


@dataclasses.dataclass
class Phase:
    name: str
    project: str = "sim"
    submitted: dict[str, float] = dataclasses.field(default_factory=dict)  # change id -> submit wall time
    runs: int = 0


@dataclasses.dataclass
class Figures:
    database: str
    rows: dict[str, float] = dataclasses.field(default_factory=dict)


class Bench:
    def __init__(self, args: argparse.Namespace, database: str, tmp: pathlib.Path, deadline: Deadline) -> None:
        self.args, self.database, self.tmp, self.deadline = args, database, tmp, deadline
        self.sims: list[Proc] = []
        self.phases: list[Phase] = []

    def start_plane(self, url: str) -> tuple[Proc, str]:
        env = dict(os.environ, DROVER_LOG_LEVEL="WARNING")
        env.pop("DROVER_DATABASE_URL", None)
        if url:
            env["DROVER_DATABASE_URL"] = url
        self.env = env
        data = self.tmp / "cp"
        config = self.tmp / "controlplane.toml"  # the budget phase's calls stay within every meter
        config.write_text(
            "[budgets]\nprovider_month_usd = 1000000.0\nagent_calls_per_day = 0\n"
            "[tiers.sonnet]\nmax_calls = 1000000\n"  # a simulated run makes --pairs calls
        )
        with socket.socket() as free:  # the Prometheus endpoint: the store's retries are read from it
            free.bind(("127.0.0.1", 0))
            self.metrics = f"127.0.0.1:{free.getsockname()[1]}"
        extra = ("--config", str(config), "--metrics-listen", self.metrics)
        plane, target = start_plane(data, self.tmp / "controlplane.log", env, self.deadline, *extra)
        add_project(data, env, "sim", timeout=60)
        # The budget phase's runs are all concurrent, so pairs/s measures the pair, not a per-Change cap.
        caps = str(min(max(self.args.budget_runs, 1), MAX_CHANGE_CAP))
        cap_flags = ("--max-active-runs-per-change", caps, "--max-open-sandboxes-per-change", caps)
        add_project(data, env, "simbudget", *cap_flags, timeout=60)
        return plane, target

    def start_sims(self, target: str) -> None:
        token = self.tmp / "cp" / "tokens" / "agent.token"
        per = [
            self.args.agents // self.args.procs + (i < self.args.agents % self.args.procs)
            for i in range(self.args.procs)
        ]
        for i, n in enumerate(per):
            out = self.tmp / f"sim{i}.json"
            argv = [sys.executable, "-m", "benchmarks.fleetsim.agents", "--target", target, "--token-file", str(token)]
            argv += ["--agents", str(n), "--prefix", f"p{i}", "--out", str(out)]
            self.sims.append(Proc(f"sim{i}", argv, self.tmp / f"sim{i}.log", self.env).start())

    def progress(self) -> tuple[int, int]:
        """(runs done, agent streams open) over the simulator processes."""
        done = streams = 0
        for i in range(len(self.sims)):
            with contextlib.suppress(OSError, ValueError):
                a, b = (self.tmp / f"sim{i}.json.progress").read_text().split()
                done, streams = done + int(a), streams + int(b)
        return done, streams

    def wait_done(self, target: int, what: str) -> None:
        wait_for(lambda: self.progress()[0] >= target, self.deadline, self.deadline.left(), what, interval=0.005)

    def submit(self, client: Client, phase: Phase, n: int, command: list[str]) -> None:
        for first in range(0, n, PER_CHANGE):
            tasks = [
                {"key": f"t{k}", "kind": "test", "objective": "sim", "command": command}
                for k in range(first, min(n, first + PER_CHANGE))
            ]
            sent = time.time()
            change = client.submit_change(phase.project, phase.name, tasks)
            phase.submitted[change.id] = sent
        phase.runs += n
        if phase not in self.phases:
            self.phases.append(phase)


def run_phases(bench: Bench, client: Client, plane: Proc, figures: Figures) -> None:
    args = bench.args
    wait_for(lambda: bench.progress()[1] >= args.agents, bench.deadline, 300, "every simulated agent")
    listed: list[int] = [0]

    def all_listed() -> bool:
        listed[0] = sum(a.connected for a in client.list_agents())
        return listed[0] >= args.agents

    try:
        wait_for(all_listed, bench.deadline, 300, "agents listed")
    except TimeoutError as err:
        raise TimeoutError(f"{err}: {listed[0]} of {args.agents} listed as connected") from None
    pid = plane.proc.pid  # type: ignore[union-attr]
    cpu0, t0 = cpu_seconds(pid)[0], time.monotonic()
    time.sleep(args.idle_seconds)
    figures.rows["idle cpu %"] = 100 * (cpu_seconds(pid)[0] - cpu0) / (time.monotonic() - t0)
    figures.rows["idle rss MiB"] = rss_mib(pid)
    figures.rows["connected agents"] = bench.progress()[1]
    done = 0
    low = Phase("low")
    for _ in range(args.low):
        bench.submit(client, low, 1, ["sim"])
        done += 1
        bench.wait_done(done, "a low-load run")
    for name, project, n, command in (
        ("saturation", "sim", args.runs, ["sim"]),
        ("output", "sim", args.output_runs, ["sim", f"lines={args.lines}", f"bytes={args.line_bytes}"]),
        ("budget", "simbudget", args.budget_runs, ["sim", f"pairs={args.pairs}"]),
    ):
        phase = Phase(name, project)
        cpu0 = cpu_seconds(pid)[0]
        began = time.monotonic()
        bench.submit(client, phase, n, command)
        done += n
        bench.wait_done(done, f"the {name} runs")
        figures.rows[f"{name} cpu s"] = cpu_seconds(pid)[0] - cpu0
        figures.rows[f"{name} wall s"] = time.monotonic() - began
    figures.rows["rss after MiB"] = rss_mib(pid)
    figures.rows.update(store_retries(bench.metrics))
    log = plane.log.read_text(errors="replace")
    figures.rows["store errors logged"] = sum(log.count(s) for s in ("DeadlockDetected", "SerializationFailure"))


def store_retries(metrics: str) -> dict[str, float]:
    """drover_store_retries_total by reason (deadlock, serialization, sqlite_locked, batch_split)."""
    with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=30) as response:
        text = response.read().decode()
    found = re.findall(r'^drover_store_retries_total\{reason="(\w+)"\} (\S+)$', text, re.MULTILINE)
    return {f"store retries {reason}": float(value) for reason, value in found}


def rss_mib(pid: int) -> float:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def collect(bench: Bench, figures: Figures) -> None:
    """Per phase, from the simulators' records: when each run's assignment arrived and it was done."""
    assigned: dict[str, list[Any]] = {}
    done: dict[str, float] = {}
    pairs = 0
    for i, sim in enumerate(bench.sims):
        sim.stop()
        record = json.loads((bench.tmp / f"sim{i}.json").read_text())
        assigned.update(record["assigned"])
        done.update(record["done"])
        pairs += record["pairs"]
        for error in record["errors"]:
            print(f"  ! {sim.name}: {error}", file=sys.stderr)
    by_change: dict[str, list[str]] = {}
    for run_id, (_, change_id) in assigned.items():
        by_change.setdefault(change_id, []).append(run_id)
    for phase in bench.phases:
        runs = [r for c in phase.submitted for r in by_change.get(c, [])]
        figures.rows[f"{phase.name} runs"] = len(runs)
        if not runs:  # a phase asked for 0 runs (--output-runs 0): nothing to time
            continue
        waits = [1000 * (assigned[r][0] - phase.submitted[assigned[r][1]]) for r in runs]
        first_submit = min(phase.submitted.values())
        first_assigned = min(assigned[r][0] for r in runs)
        last_assigned = max(assigned[r][0] for r in runs)
        last_done = max(done.get(r, float("nan")) for r in runs)
        f = figures.rows
        f[f"{phase.name} submit->assign p50 ms"] = pct(waits, 50)
        f[f"{phase.name} submit->assign p99 ms"] = pct(waits, 99)
        f[f"{phase.name} assignments/s"] = len(runs) / max(last_assigned - first_submit, 1e-9)
        f[f"{phase.name} runs/s"] = len(runs) / max(last_done - first_submit, 1e-9)
        f[f"{phase.name} busy s"] = last_done - first_assigned
    if "output busy s" in figures.rows:
        total = bench.args.output_runs * bench.args.lines
        figures.rows["output MB/s"] = total * bench.args.line_bytes / 1e6 / figures.rows["output busy s"]
        figures.rows["output lines/s"] = total / figures.rows["output busy s"]
    if "budget busy s" in figures.rows:
        figures.rows["budget pairs/s"] = pairs / figures.rows["budget busy s"]


def bench_database(args: argparse.Namespace, database: str, deadline: Deadline) -> Figures:
    figures = Figures(database)
    with tempfile.TemporaryDirectory(prefix="drover-fleet-") as tmp, contextlib.ExitStack() as stack:
        url = stack.enter_context(postgres_database()) if database == "postgresql" else ""
        bench = Bench(args, database, pathlib.Path(tmp), deadline)
        plane, target = bench.start_plane(url)
        stack.callback(plane.stop)
        stack.callback(lambda: [s.stop() for s in bench.sims])
        token = (bench.tmp / "cp" / "tokens" / "admin.token").read_text().strip()
        bench.start_sims(target)
        print(f"[{database}] control plane pid {plane.proc.pid} on {target}; {args.agents} simulated agents")  # type: ignore[union-attr]
        with Client(target, token=token) as client:
            try:
                run_phases(bench, client, plane, figures)
            except (TimeoutError, BenchTimeout):
                print_logs(bench, plane, client)
                raise
        collect(bench, figures)
    return figures


def print_logs(bench: Bench, plane: Proc, client: Client) -> None:
    """What the control plane and the simulators said, when a wait timed out: the test shows stderr."""
    print(f"progress (runs done, streams open): {bench.progress()}", file=sys.stderr)
    for sim in bench.sims:
        sim.stop()  # it writes what it was assigned and finished
    seen: dict[str, Any] = {}
    for i in range(len(bench.sims)):
        with contextlib.suppress(OSError, ValueError):
            record = json.loads((bench.tmp / f"sim{i}.json").read_text())
            seen.update({r: ("assigned", r in record["done"]) for r in record["assigned"]})
    for phase in bench.phases:
        for change_id in phase.submitted:
            for run in client.list_runs(change_id=change_id):
                if run.state != "succeeded":
                    print(
                        f"run {run.id} of {phase.name}: {run.state} on {run.agent!r}; simulator: {seen.get(run.id)}",
                        file=sys.stderr,
                    )
                    for event in client.list_events(run_id=run.id):
                        print(f"  event {event}", file=sys.stderr)
    for proc in (plane, *bench.sims):
        print(f"--- {proc.name} log:\n{log_tail(proc.log)}", file=sys.stderr)


def celery_figures(args: argparse.Namespace) -> dict[str, float]:
    if args.celery == "off":
        return {}
    try:
        from benchmarks.fleetsim import celery_baseline
    except ImportError as err:
        print(f"celery baseline skipped: {err} (pip install -e '.[bench]')", file=sys.stderr)
        return {}
    return celery_baseline.measure(low_tasks=args.low, burst_tasks=args.runs)


def report(results: list[Figures], celery: dict[str, float]) -> str:
    keys = sorted({k for r in results for k in r.rows}, key=_order)
    ratios = {
        "low submit->assign p50 ms": celery.get("low_p50_ms"),
        "low submit->assign p99 ms": celery.get("low_p99_ms"),
        "saturation submit->assign p50 ms": celery.get("burst_p50_ms"),
        "saturation submit->assign p99 ms": celery.get("burst_p99_ms"),
        "saturation assignments/s": celery.get("tasks_per_s"),
        "saturation runs/s": celery.get("tasks_per_s"),
    }
    head = f"{'':36}" + "".join(f"{r.database:>24}" for r in results) + (f"{'celery':>12}" if celery else "")
    lines = [head]
    for key in keys:
        cells = []
        for r in results:
            value = r.rows.get(key, float("nan"))
            base = ratios.get(key)
            ratio = f" ({value / base:5.2f}x)" if base else ""
            cells.append(f"{value:>14.1f}{ratio:>10}")
        lines.append(f"{key:36}" + "".join(cells) + (f"{ratios[key]:>12.1f}" if ratios.get(key) else ""))
    return "\n".join(lines)


def _order(key: str) -> tuple[int, str]:
    prefixes = ["connected", "idle", "low", "saturation", "output", "budget", "rss", "store"]
    return next((i for i, p in enumerate(prefixes) if key.startswith(p)), 99), key


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--agents", type=int, default=1000)
    p.add_argument("--procs", type=int, default=4)
    p.add_argument("--database", choices=["sqlite", "postgresql", "both"], default="both")
    p.add_argument("--low", type=int, default=50)
    p.add_argument("--runs", type=int, default=2000)
    p.add_argument("--output-runs", type=int, default=100)
    p.add_argument("--lines", type=int, default=20000)
    p.add_argument("--line-bytes", type=int, default=200)
    p.add_argument("--budget-runs", type=int, default=50)
    p.add_argument("--pairs", type=int, default=40)
    p.add_argument("--idle-seconds", type=float, default=10)
    p.add_argument("--celery", choices=["on", "off"], default="on")
    p.add_argument("--timeout", type=float, default=1800)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    deadline = Deadline(args.timeout)
    databases = ["sqlite", "postgresql"] if args.database == "both" else [args.database]
    results = [bench_database(args, db, deadline) for db in databases]
    celery = celery_figures(args)
    print(f"\nfleet: {args.agents} simulated agents in {args.procs} processes, {os.cpu_count()} cores")
    if celery:
        print(
            f"celery+rabbitmq (durable, acks late, confirms): apply->start p50 {celery['low_p50_ms']:.1f} ms"
            f" (low load), {celery['burst_p50_ms']:.1f} ms (burst), {celery['tasks_per_s']:.0f} tasks/s"
        )
    print(report(results, celery))
    return 0


if __name__ == "__main__":
    sys.exit(main())
