#!/usr/bin/env python3
"""Dispatch throughput and latency of a real control plane with real agentd processes.

    python benchmarks/dispatch.py [--runs N] [--agents M] [--capacity C]
                                  [--database sqlite|postgresql|both] [--changes K]

For each database: start `controlplane serve` (SQLite in a temporary data dir, or a fresh
PostgreSQL database created on 127.0.0.1:5432 and dropped at the end), add a project
without repository, start M agentd processes of capacity C, wait until all are connected,
submit N no-op command runs (Tasks running `true`, no dependencies) as K Changes, and wait
until every run has finished. Measured from the run.* Events (their created_at is the
control plane's clock, the same clock as this process on one machine):

  wall        first submit call -> last run.finished event
  runs/s      N / wall
  q->started  run.queued -> run.started per run (includes waiting for a free slot)
  q->assigned run.queued -> run.assigned (waiting in the queue, dispatch)
  a->started  run.assigned -> run.started (assignment to agentd and its "started" back)
  s->finished run.started -> run.finished (supervisor process, `true`, result back)

Every process started here is stopped at the end, also on error; the whole benchmark fails
after --timeout seconds (default 600).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "sdk"))

import sqlalchemy

from drover import Client
from drover.models import Event

T = TypeVar("T")
PG_ADMIN_URL = os.environ.get("DROVER_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
MAX_TASKS_PER_CHANGE = 500  # controlplane.domain.graph.MAX_TASKS


class BenchTimeout(Exception):
    pass


class Deadline:
    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds
        self.seconds = seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def check(self, what: str) -> None:
        if self.left() <= 0:
            raise BenchTimeout(f"benchmark exceeded {self.seconds:.0f} s ({what})")


def wait_for(check: Callable[[], T], deadline: Deadline, timeout: float, what: str, interval: float = 0.05) -> T:
    end = min(time.monotonic() + timeout, deadline.end)
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > end:
            deadline.check(what)
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def start_plane(
    data_dir: pathlib.Path, log: pathlib.Path, env: dict[str, str], deadline: Deadline, *extra: str
) -> tuple[Proc, str]:
    """A control plane on a free loopback port, and its target once it listens."""
    argv = [sys.executable, "-m", "controlplane.cli", "serve", "--listen", "127.0.0.1:0", "--data-dir", str(data_dir)]
    plane = Proc("controlplane", [*argv, *extra], log, env).start()

    def listening() -> int:
        if not plane.alive():
            raise RuntimeError(f"control plane exited:\n{log_tail(plane.log)}")
        found = re.search(
            r"drover control plane listening on 127\.0\.0\.1:(\d+)", plane.log.read_text(errors="replace")
        )
        return int(found.group(1)) if found else 0

    try:
        return plane, f"127.0.0.1:{wait_for(listening, deadline, 60, 'the control plane to listen')}"
    except BaseException:
        plane.stop()
        raise


def add_project(data_dir: pathlib.Path, env: dict[str, str], name: str, *extra: str, timeout: float = 120) -> None:
    cli = [sys.executable, "-m", "controlplane.cli", "project", "add", name, *extra, "--data-dir", str(data_dir)]
    subprocess.run(cli, env=env, cwd=REPO, check=True, capture_output=True, text=True, timeout=timeout)


def agentd_argv(
    target: str, name: str, data_dir: pathlib.Path, root: pathlib.Path, capacity: int, *extra: str
) -> list[str]:
    """agentd with the control plane's agent token, its spool and work dirs under `root`."""
    token = data_dir / "tokens" / "agent.token"
    argv = [sys.executable, "-m", "agentd.cli", "--control-plane", target, "--name", name, "--token-file", str(token)]
    return [
        *argv,
        "--capacity",
        str(capacity),
        "--spool-dir",
        str(root / "spool"),
        "--work-dir",
        str(root / "work"),
        *extra,
    ]


def log_tail(path: pathlib.Path, n: int = 3000) -> str:
    return path.read_text(errors="replace")[-n:] if path.exists() else "(no log)"


def _die_with_parent() -> None:
    """Children get SIGTERM if this process dies without cleaning up (Linux)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


# --- processes ----------------------------------------------------------------------------------


@dataclasses.dataclass
class Proc:
    name: str
    argv: list[str]
    log: pathlib.Path
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, env=self.env, cwd=REPO, preexec_fn=_die_with_parent
            )
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 15) -> None:
        if not self.alive():
            return
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(own user+system CPU, reaped children's user+system CPU) of a process, in seconds."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0, 0.0
    fields = stat[stat.rindex(")") + 2 :].split()
    tick = os.sysconf("SC_CLK_TCK")
    own, children = (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick
    return own, children + sum(sum(cpu_seconds(t)) for t in templates(pid))


def templates(agentd: int) -> list[int]:
    """agentd's supervisor template (agentd/daemon/prefork.py): the run supervisors it forks are its
    children, not agentd's, so their CPU is in its own reaped children's figure."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        try:
            if not entry.name.isdigit() or b"agentd.daemon.prefork" not in (entry / "cmdline").read_bytes():
                continue
            if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == agentd:
                found.append(int(entry.name))
        except (OSError, IndexError, ValueError):
            continue
    return found


def kill_leftovers(root: pathlib.Path) -> int:
    """Run supervisors are detached from agentd on purpose: end, by pid, the ones whose command
    line names a run directory under `root` (this benchmark's temporary directory)."""
    killed = 0
    needle = str(root).encode()
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"supervisor" in cmdline and needle in cmdline:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)
                killed += 1
    return killed


@contextlib.contextmanager
def postgres_database(keep: bool = False) -> Iterator[str]:
    name = f"drover_bench_{uuid.uuid4().hex[:12]}"
    admin = sqlalchemy.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    finally:
        if not keep:
            with admin.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


# --- one benchmark ------------------------------------------------------------------------------


@dataclasses.dataclass
class Result:
    database: str
    runs: int
    agents: int
    capacity: int
    changes: int
    wall_s: float
    observed_s: float
    submit_s: float
    succeeded: int
    requeued: int
    q_started: list[float]
    q_assigned: list[float]
    a_started: list[float]
    s_finished: list[float]
    cpu: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.runs / self.wall_s if self.wall_s > 0 else float("nan")


def pct(values: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(p / 100 * len(ordered) + 0.5) - 1))
    return ordered[k]


def ts(event: Event) -> float:
    return event.created_at.timestamp() if event.created_at else float("nan")


def all_events(client: Client, kind: str, after_id: int) -> list[Any]:
    out: list[Any] = []
    while True:
        page = client.list_events(kind=kind, after_id=after_id, limit=1000)
        if not page:
            return out
        out.extend(page)
        after_id = page[-1].id


def submit_and_wait(
    client: Client, project: str, n: int, changes: int, deadline: Deadline, label: str
) -> tuple[list[str], float, float, float, int]:
    """Submit n no-op runs as `changes` Changes; answers the change ids, the submit start time
    (epoch), the submit duration, the time (epoch) their completion was observed and the id of the
    last Event before submitting."""
    baseline = all_events(client, "", 0)
    after = baseline[-1].id if baseline else 0
    sizes = [n // changes + (1 if i < n % changes else 0) for i in range(changes)]
    specs = []
    counter = 0
    for size in sizes:
        specs.append(
            [
                {"key": f"t{counter + i}", "kind": "bench", "objective": "no-op", "command": ["true"]}
                for i in range(size)
            ]
        )
        counter += size
    t0 = time.time()
    ids = [client.submit_change(project, f"{label} {i}", tasks).id for i, tasks in enumerate(specs)]
    submit_s = time.time() - t0
    pending = set(ids)
    end = min(time.monotonic() + 600, deadline.end)
    seen = seen_run = after
    finished_runs: set[str] = set()
    all_finished_at = 0.0
    while pending:
        if time.monotonic() > end:
            deadline.check(f"{len(pending)} changes of {label} to finish")
            raise TimeoutError(f"{len(pending)} changes of {label} did not finish")
        for event in all_events(client, "change.finished", seen):
            seen = event.id
            pending.discard(event.change_id)
        if not pending:
            break
        for event in all_events(client, "run.finished", seen_run):
            seen_run = event.id
            if event.change_id in ids:
                finished_runs.add(event.run_id)
        if len(finished_runs) >= n and not all_finished_at:
            all_finished_at = time.monotonic()
        if all_finished_at and time.monotonic() - all_finished_at > 10:
            stuck = []
            for change_id in sorted(pending):
                change = client.get_change(change_id)
                counts: dict[str, int] = {}
                for t in change.tasks:
                    counts[t.status] = counts.get(t.status, 0) + 1
                stuck.append(f"{change_id} status {change.status!r}, tasks {counts}")
            raise RuntimeError(
                f"all {n} runs of {label} finished more than 10 s ago but {len(pending)} "
                f"Change(s) did not: " + "; ".join(stuck)
            )
        time.sleep(0.25)  # detection lag only; the figures come from Event timestamps
    return ids, t0, submit_s, time.time(), after


def bench_one(database: str, args: argparse.Namespace, deadline: Deadline, tmp: pathlib.Path) -> Result:
    data_dir = tmp / "cp"
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(postgres_database(args.keep)) if database == "postgresql" else ""
        env = dict(os.environ, DROVER_LOG_LEVEL=args.log_level)
        env.pop("DROVER_DATABASE_URL", None)
        if url:
            env["DROVER_DATABASE_URL"] = url
        procs: list[Proc] = []

        def stop_all() -> None:
            left = signal.alarm(0)  # cleanup is bounded by its own waits; no alarm in the middle of it
            for p in reversed(procs):  # agents first, then the control plane
                try:
                    p.stop()
                except Exception as err:  # keep stopping the others
                    print(f"  ! stopping {p.name}: {err}", file=sys.stderr)
            killed = kill_leftovers(tmp)
            if killed:
                print(f"  ! killed {killed} leftover run supervisors", file=sys.stderr)
            if left:
                signal.alarm(max(1, int(deadline.left()) + 1))

        stack.callback(stop_all)

        plane, target = start_plane(data_dir, tmp / "controlplane.log", env, deadline)
        procs.append(plane)
        print(
            f"[{database}] control plane pid {plane.proc.pid} on {target}"  # type: ignore[union-attr]
            f" (data dir {data_dir}{', ' + url.rsplit('/', 1)[1] if url else ''})",
            flush=True,
        )

        add_project(data_dir, env, "bench", timeout=max(5.0, min(120.0, deadline.left())))
        token = (data_dir / "tokens" / "admin.token").read_text().strip()
        names = [f"bench-{i}" for i in range(args.agents)]
        for name in names:
            root = tmp / f"agent-{name}"
            procs.append(
                Proc(name, agentd_argv(target, name, data_dir, root, args.capacity), root / "agentd.log", env).start()
            )

        with Client(target, token=token) as client:

            def all_connected() -> bool:
                for p in procs[1:]:
                    if not p.alive():
                        raise RuntimeError(f"agentd {p.name} exited:\n{log_tail(p.log)}")
                connected = {a.name for a in client.list_agents() if a.connected}
                return connected >= set(names)

            wait_for(all_connected, deadline, 60, f"{args.agents} agents to connect", interval=0.1)
            print(f"[{database}] {args.agents} agents connected (capacity {args.capacity} each)", flush=True)

            if args.warmup:
                submit_and_wait(client, "bench", args.warmup, 1, deadline, "warmup")
                print(f"[{database}] warmup of {args.warmup} runs done", flush=True)

            deadline.check("before submitting")
            profiler = start_profiler(args, plane, tmp, database)
            pids = {p.name: p.proc.pid for p in procs if p.proc is not None}
            cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
            try:
                ids, t0, submit_s, t_seen, after = submit_and_wait(
                    client, "bench", args.runs, args.changes, deadline, "bench"
                )
            finally:
                stop_profiler(profiler)
            cpu_after = {name: cpu_seconds(pid) for name, pid in pids.items()}
            cpu = {
                "controlplane": cpu_after["controlplane"][0] - cpu_before["controlplane"][0],
                "agentd": sum(cpu_after[n][0] - cpu_before[n][0] for n in names),
                "supervisors": sum(cpu_after[n][1] - cpu_before[n][1] for n in names),
            }
            events = all_events(client, "run.", after)
            changes = set(ids)
            events = [e for e in events if e.change_id in changes]

        by_kind: dict[str, dict[str, float]] = {}
        requeued = 0
        succeeded = 0
        for e in events:
            if e.kind == "run.requeued":
                requeued += 1
                continue
            if e.kind == "run.finished" and e.data.get("status") == "succeeded":
                succeeded += 1
            by_kind.setdefault(e.kind, {})[e.run_id] = ts(e)  # the latest of each kind per run
        queued, assigned = by_kind.get("run.queued", {}), by_kind.get("run.assigned", {})
        started, finished = by_kind.get("run.started", {}), by_kind.get("run.finished", {})
        if len(finished) != args.runs:
            raise RuntimeError(f"expected {args.runs} finished runs, the events show {len(finished)}")

        def deltas(a: dict[str, float], b: dict[str, float]) -> list[float]:
            return [(b[r] - a[r]) * 1000 for r in a if r in b]

        return Result(
            database=database,
            runs=args.runs,
            agents=args.agents,
            capacity=args.capacity,
            changes=args.changes,
            wall_s=max(finished.values()) - t0,
            observed_s=t_seen - t0,
            submit_s=submit_s,
            succeeded=succeeded,
            requeued=requeued,
            q_started=deltas(queued, started),
            q_assigned=deltas(queued, assigned),
            a_started=deltas(assigned, started),
            s_finished=deltas(started, finished),
            cpu=cpu,
        )
    raise AssertionError("unreachable")


# --- optional profiling of the control plane -----------------------------------------------------


def start_profiler(args: argparse.Namespace, plane: Proc, tmp: pathlib.Path, database: str) -> Proc | None:
    if not args.py_spy:
        return None
    py_spy = shutil.which("py-spy")
    if py_spy is None:
        print("  (py-spy not found on PATH: no profile)", file=sys.stderr)
        return None
    assert plane.proc is not None
    out = pathlib.Path(args.py_spy) / f"controlplane-{database}.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    print(f"[{database}] py-spy recording the control plane to {out}", flush=True)
    return Proc(
        "py-spy",
        [
            py_spy,
            "record",
            "--pid",
            str(plane.proc.pid),
            "--format",
            "raw",
            "--threads",
            "--rate",
            "200",
            "--output",
            str(out),
        ],
        tmp / "py-spy.log",
        dict(os.environ),
    ).start()


def stop_profiler(profiler: Proc | None) -> None:
    if profiler is not None and profiler.proc is not None and profiler.alive():
        profiler.proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        try:
            profiler.proc.wait(30)
        except subprocess.TimeoutExpired:
            profiler.stop()


# --- reporting ----------------------------------------------------------------------------------


def describe(r: Result) -> str:
    def line(name: str, values: list[float]) -> str:
        return (
            f"    {name:<12} p50 {pct(values, 50):8.1f} ms  p90 {pct(values, 90):8.1f}  "
            f"p99 {pct(values, 99):8.1f}  max {max(values, default=float('nan')):8.1f}"
        )

    return "\n".join(
        [
            f"[{r.database}] {r.runs} runs ({r.changes} change{'s' if r.changes != 1 else ''}), {r.agents} agents x "
            f"capacity {r.capacity}: {r.succeeded} succeeded, {r.requeued} requeued",
            f"    wall {r.wall_s:.2f} s (submit calls {r.submit_s * 1000:.0f} ms, completion observed after "
            f"{r.observed_s:.2f} s) -> {r.rate:.1f} runs/s",
            line("q->started", r.q_started),
            line("q->assigned", r.q_assigned),
            line("a->started", r.a_started),
            line("s->finished", r.s_finished),
            f"    CPU while measuring (until completion observed, {r.observed_s:.1f} s x {os.cpu_count()} CPUs): "
            + ", ".join(f"{k} {v:.1f} s" for k, v in r.cpu.items())
            + (f"; machine load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""),
        ]
    )


def table(results: list[Result]) -> str:
    head = (
        "database",
        "runs",
        "agents",
        "cap",
        "changes",
        "wall s",
        "runs/s",
        "q->start p50 ms",
        "q->start p99 ms",
        "a->start p50 ms",
        "a->start p99 ms",
    )
    rows = [head] + [
        (
            r.database,
            str(r.runs),
            str(r.agents),
            str(r.capacity),
            str(r.changes),
            f"{r.wall_s:.2f}",
            f"{r.rate:.1f}",
            f"{pct(r.q_started, 50):.0f}",
            f"{pct(r.q_started, 99):.0f}",
            f"{pct(r.a_started, 50):.0f}",
            f"{pct(r.a_started, 99):.0f}",
        )
        for r in results
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]

    def fmt(row: tuple[str, ...]) -> str:
        return "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))

    return "\n".join([fmt(rows[0]), fmt(tuple("-" * w for w in widths)), *map(fmt, rows[1:])])


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=200, help="no-op runs to submit (default 200)")
    p.add_argument("--agents", type=int, default=4, help="agentd processes (default 4)")
    p.add_argument("--capacity", type=int, default=4, help="capacity of each agentd (default 4)")
    p.add_argument("--database", choices=("sqlite", "postgresql", "both"), default="both")
    p.add_argument(
        "--changes",
        type=int,
        default=0,
        help=f"split the runs over this many Changes (default: 1, or as many as needed for at most "
        f"{MAX_TASKS_PER_CHANGE} Tasks each)",
    )
    p.add_argument("--warmup", type=int, default=0, help="no-op runs to finish before measuring (default 0)")
    p.add_argument("--timeout", type=float, default=600, help="fail after this many seconds in all (default 600)")
    p.add_argument("--log-level", default="INFO", help="DROVER_LOG_LEVEL of the processes (default INFO)")
    p.add_argument(
        "--py-spy",
        metavar="DIR",
        default="",
        help="record the control plane with py-spy (raw folded stacks) into DIR during the runs",
    )
    p.add_argument("--keep", action="store_true", help="keep the temporary directory and PostgreSQL database")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.runs < 1 or args.agents < 1 or args.capacity < 1 or args.changes < 0 or args.warmup < 0:
        parser().error("--runs, --agents and --capacity must be at least 1; --changes and --warmup not negative")
    min_changes = -(-args.runs // MAX_TASKS_PER_CHANGE)
    args.changes = max(args.changes or 1, min_changes)
    if args.changes > args.runs:
        parser().error("--changes must not exceed --runs")
    databases = ["sqlite", "postgresql"] if args.database == "both" else [args.database]
    deadline = Deadline(args.timeout)

    def on_alarm(_signum: int, _frame: Any) -> None:
        raise BenchTimeout(f"benchmark exceeded {args.timeout:.0f} s")

    def on_term(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGALRM, on_alarm)
    signal.signal(signal.SIGTERM, on_term)
    signal.alarm(int(args.timeout) + 1)

    print(
        f"dispatch benchmark: {args.runs} no-op runs, {args.agents} agents x capacity {args.capacity}, "
        f"{args.changes} change(s), on {', '.join(databases)}; {os.cpu_count()} CPUs, "
        f"Python {sys.version.split()[0]}",
        flush=True,
    )
    results: list[Result] = []
    failed = False
    for database in databases:
        tmp = pathlib.Path(tempfile.mkdtemp(prefix=f"drover-bench-{database}-"))
        ok = False
        try:
            result = bench_one(database, args, deadline, tmp)
            results.append(result)
            print(describe(result), flush=True)
            ok = True
        except (Exception, KeyboardInterrupt) as err:
            failed = True
            print(
                f"[{database}] FAILED: {type(err).__name__}: {err}\n  logs kept in {tmp}", file=sys.stderr, flush=True
            )
            if isinstance(err, (BenchTimeout, KeyboardInterrupt)):
                break
        finally:
            if ok and not args.keep:
                shutil.rmtree(tmp, ignore_errors=True)
    signal.alarm(0)
    if results:
        print("\n" + table(results))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
