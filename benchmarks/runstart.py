#!/usr/bin/env python3
"""Run start on an idle agent: how long from the control plane's assignment to the command running.

    python benchmarks/runstart.py [--runs N] [--sandbox bubblewrap|none]

Starts a real control plane (SQLite) and one real agentd of capacity 1, then submits N Changes one
after another, each one command Task, `date +%s.%N` (a program that starts in about a millisecond
and prints the time it runs), and waits for each to finish before the next. Per run:

  a->exec     run.assigned (the control plane's clock) -> the time the command printed: the
              assignment sent over gRPC, agentd's spool write, the supervisor's start, the sandbox
              and the command's own start
  a->started  run.assigned -> run.started (agentd's "started" back, before the supervisor runs)

Both clocks are this machine's. The figures are p50/p90/max over the runs after the first
(--warmup runs are not counted).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "sdk"))
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))

from dispatch import Deadline, Proc, add_project, agentd_argv, pct, start_plane, wait_for

from drover import Client


def event_time(client: Client, run_id: str, kind: str) -> float:
    for event in client.list_events(run_id=run_id, limit=100):
        if event.kind == kind:
            assert event.created_at is not None
            return event.created_at.timestamp()
    raise RuntimeError(f"run {run_id} has no {kind} event")


def one_run(client: Client, i: int, deadline: Deadline) -> tuple[float, float]:
    change = client.submit_change(
        "bench", f"start {i}", [{"key": "t", "kind": "bench", "objective": "clock", "command": ["date", "+%s.%N"]}]
    )
    for event in client.watch(change.id):
        deadline.check("a run to finish")
        if event.kind == "change.finished":
            break
    run = client.list_runs(change_id=change.id)[0]
    if run.state != "succeeded":
        said = "".join(line.text for line in client.run_logs(run.id))
        raise RuntimeError(f"run {run.id} ended {run.state}: {run.reason}\n{said}")
    printed = [line.text for line in client.run_logs(run.id) if line.stream == "stdout"]
    executed = float(printed[0].strip())
    assigned = event_time(client, run.id, "run.assigned")
    started = event_time(client, run.id, "run.started")
    return (executed - assigned) * 1000, (started - assigned) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--sandbox", default="bubblewrap", choices=["bubblewrap", "none"])
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args()
    deadline = Deadline(args.timeout)
    with tempfile.TemporaryDirectory(prefix="drover-runstart-") as tmp_name:
        tmp = pathlib.Path(tmp_name)
        tmp.chmod(0o711)  # the session user (agentd as root: nobody) passes through to its workspace
        data_dir = tmp / "cp"
        plane, target = start_plane(data_dir, tmp / "controlplane.log", dict(os.environ), deadline)
        procs = [plane]
        try:
            add_project(data_dir, dict(os.environ), "bench")
            extra = ["--unsafe-no-sandbox"] if args.sandbox == "none" else []
            argv = agentd_argv(target, "bench", data_dir, tmp, 1, *extra)
            agent = Proc("agentd", argv, tmp / "agentd.log", dict(os.environ)).start()
            procs.append(agent)
            token = (data_dir / "tokens" / "admin.token").read_text().strip()
            with Client(target, token=token) as client:
                wait_for(lambda: any(a.connected for a in client.list_agents()), deadline, 60, "agentd to connect")
                execs, starts = [], []
                for i in range(args.warmup + args.runs):
                    executed, started = one_run(client, i, deadline)
                    if i >= args.warmup:
                        execs.append(executed)
                        starts.append(started)
                    time.sleep(0.05)  # an idle agent: nothing of the previous run is still going
        finally:
            for p in reversed(procs):
                p.stop()
    for name, values in (("a->exec", execs), ("a->started", starts)):
        print(
            f"{name:<11} p50 {pct(values, 50):6.1f} ms  p90 {pct(values, 90):6.1f} ms  max {max(values):6.1f} ms"
            f"  ({len(values)} runs, sandbox {args.sandbox})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
