#!/usr/bin/env python3
"""Harness overhead: per tool round trip in-process, and whole scripted runs through real processes.

    python benchmarks/harness.py [--round-trips K] [--command-round-trips C] [--runs R]
                                 [--part inprocess|e2e|both] [--fake-as-shipped] [--timeout S] [--keep]

Both parts talk to the scripted fake Messages API (drover.testing.fake_anthropic) with zero model
latency, so every figure is Drover's own overhead. Nothing is asserted; figures are printed.

1. In-process (this process): the real Harness, AnthropicModel (the anthropic SDK, streamed) and
   TaskTools on a write workspace cloned by drover.core.gitspace from a temporary git repository, the
   sandbox (bubblewrap when its probe passes, as agentd starts), the transcript (written and fsynced per entry) and the
   supervisor's emit (output.jsonl) -- against FakeAnthropic served from a thread of this process
   (it shares the GIL with the harness, as a separate server would not). No control plane: the
   control-plane client's ReserveModelCall/SettleModelCall gRPC calls are not in these figures (part 2 has
   them). A round trip is one Harness.step(): build the conversation, one model call, the tool,
   the transcript entries (reply, tool_started, tool_done). The script is K cheap tool calls
   (read_file of a small file and list_files, alternating; the 12-reads-per-run cap is reset so
   every read really reads), then complete_task; then C round trips of run_command
   `python -m pytest -q` on a one-test suite, then complete_task. Reported per round trip: mean,
   p50, p99, and how it splits into model call, tool, transcript write (+fsync), emit and the rest
   (conversation rebuild, fold sizing). The sandbox cost is shown by running the same run_command
   tool C times with no wrapper at all, with the rlimits launcher only (PlainSandbox) and with
   the detected sandbox (bubblewrap when it works here), interleaved so drifting load hits each alike.

2. End to end (real processes): `controlplane serve` (SQLite, ANTHROPIC_BASE_URL pointing at a
   FakeAnthropic in this process), a project whose repository is a temporary git repository, one
   agentd (capacity 1). R times, one after the other: submit a Change with one implement Task whose
   script is 10 model calls (list_files, read_file x2, run_command, edit_file, run_command,
   write_file, run_command, list_files, complete_task) -> the harness supervisor clones, runs,
   publishes a ChangeSet -> the Change succeeds. Reported per run and as p50: submit -> change.finished
   wall time and its split from the run events (created_at, the control plane's clock, the same
   clock as this process) and the fake's request arrival times.

The fake as shipped leaves Nagle's algorithm on (http.server's StreamRequestHandler default) and
writes each server-sent event separately: on a kept-alive connection most replies then wait ~40 ms
for the client's delayed ACK, which is the fake's latency, not Drover's. So this benchmark sets
TCP_NODELAY on the fake's handler, in this process only (--fake-as-shipped leaves it as it is), and
part 1 prints a model call against both to show the difference.

Every process started here is stopped at the end (also on error or timeout), including the
detached harness supervisors of this benchmark's temporary directory.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import os
import pathlib
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Iterator
from typing import Any

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "sdk"))
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import itertools

import pygit2
from dispatch import BenchTimeout, Deadline, Proc, add_project, agentd_argv, log_tail, pct, start_plane, ts, wait_for

from agentd.drivers.harness.driver import HarnessDriver
from agentd.drivers.harness.loop import Harness, Limits
from agentd.drivers.harness.tools import Finished, TaskTools
from agentd.drivers.harness.transcript import Transcript
from agentd.run.launch import Launch
from agentd.run.output import Output
from agentd.run.sandbox import BubblewrapSandbox, PlainSandbox, Sandbox, SandboxPolicy
from drover import Client
from drover.core import (
    allowlist,
    gitspace,
)
from drover.core.model import AnthropicModel
from drover.core.retry import RetryPolicy
from drover.testing import fake_anthropic as fake

API_KEY = "sk-ant-bench-0123456789abcdef"
PYTEST = "python -m pytest -q"
# `python` inside the sandbox must be this interpreter (the one with pytest), as in tests/conftest.py.
CHILD_PATH = f"{os.path.dirname(sys.executable)}:{os.environ.get('PATH', '/usr/bin:/bin')}"


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def make_repo(path: pathlib.Path, fixed: bool) -> pathlib.Path:
    """A small Python project with a one-test suite (add() is wrong unless `fixed`)."""
    repo = pygit2.init_repository(str(path), initial_head="main")
    (path / "calc.py").write_text("def add(a, b):\n    return a %s b\n" % ("+" if fixed else "-"))
    (path / "test_calc.py").write_text("from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n")
    (path / "README.md").write_text("# calc\n\nA tiny calculator.\n")
    (path / "pkg").mkdir()
    for i in range(6):
        (path / "pkg" / f"mod{i}.py").write_text(f"VALUE = {i}\n")
    repo.index.add_all()
    repo.index.write()
    sig = pygit2.Signature("Bench", "bench@drover.invalid")
    repo.create_commit("HEAD", sig, sig, "calc", repo.index.write_tree(), [])
    return path


def summary(values_ms: list[float]) -> str:
    if not values_ms:
        return "n/a"
    return (
        f"mean {statistics.fmean(values_ms):7.2f} ms  p50 {pct(values_ms, 50):7.2f}  "
        f"p99 {pct(values_ms, 99):7.2f}  max {max(values_ms):7.2f}  (n={len(values_ms)})"
    )


# --- part 1: in-process -----------------------------------------------------------------------


class Clock:
    """Accumulated seconds per part of a round trip."""

    def __init__(self) -> None:
        self.total: dict[str, float] = collections.defaultdict(float)

    @contextlib.contextmanager
    def part(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.total[name] += time.perf_counter() - t0


class TimedModel(AnthropicModel):
    clock: Clock

    async def complete(self, **kwargs: Any) -> Any:  # type: ignore[override]
        with self.clock.part("model"):
            return await super().complete(**kwargs)


class BenchTools(TaskTools):
    """TaskTools, timed, with the per-run read cap reset so every read_file really reads."""

    clock: Clock

    async def call(self, name: str, args: dict[str, Any]) -> Any:
        with self.clock.part("tool"):
            return await super().call(name, args)

    async def _read_file(self, args: dict[str, Any]) -> Any:
        self.reads = 0
        return await super()._read_file(args)


class TimedTranscript(Transcript):
    clock: Clock

    def append(self, kind: str, **fields: Any) -> int:
        with self.clock.part("transcript"):
            return super().append(kind, **fields)


class NoSandbox:
    """No launcher, no bubblewrap: the command as it is (a baseline only)."""

    policy = SandboxPolicy()
    isolated = False

    def wrap(
        self,
        argv: list[str],
        cwd: pathlib.Path,
        env: dict[str, str],
        *,
        writable: object = None,
        ready_fd: int | None = None,
        binds: object = (),
    ) -> Launch:
        return Launch(list(argv), env=dict(env), cwd=str(cwd))


@dataclasses.dataclass
class Step:
    total: float
    parts: dict[str, float]


class TimedHarness(Harness):
    clock: Clock
    steps: list[Step]

    async def step(self) -> None:
        before = dict(self.clock.total)
        t0 = time.perf_counter()
        try:
            await super().step()
        except Finished:
            raise  # the complete_task step is not a round trip
        self.steps.append(
            Step(time.perf_counter() - t0, {k: v - before.get(k, 0.0) for k, v in self.clock.total.items()})
        )


def tool_env(home: pathlib.Path, root: pathlib.Path) -> dict[str, str]:
    """The environment the supervisor gives commands (agentd/drivers/harness/driver.py)."""
    return {
        "PATH": CHILD_PATH,
        "LANG": "C.UTF-8",
        "TZ": "UTC",
        "HOME": str(home),
        "DROVER_WORKSPACE": str(root),
        "DROVER_RUN_ID": "bench",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTEST_ADDOPTS": "-p no:cacheprovider",
    }


def make_tools(
    root: pathlib.Path, sandbox: Any, home: pathlib.Path, clock: Clock, calls_left: Any = lambda: 30
) -> BenchTools:
    tools = BenchTools(root, True, allowlist.DEFAULT_PYTHON_POLICY, sandbox, tool_env(home, root), calls_left)
    tools.clock = clock
    return tools


async def harness_run(
    server: fake.FakeAnthropic, root: pathlib.Path, sandbox: Any, run_dir: pathlib.Path, script: list[fake.Step]
) -> list[Step]:
    """One whole harness run of `script` (ending in complete_task); answers its round trips."""
    (run_dir / "home").mkdir(parents=True)
    clock = Clock()
    transcript = TimedTranscript(run_dir / "transcript.jsonl")
    transcript.clock = clock
    output = Output(run_dir / "output.jsonl", [API_KEY], 8 << 20)
    emitter = HarnessDriver()  # the driver's own emit, over this run's output and transcript
    emitter.run, emitter.already, emitter.transcript = types.SimpleNamespace(output=output), -1, transcript  # type: ignore[assignment]

    def emit(index: int, entry: dict[str, Any]) -> None:
        with clock.part("emit"):
            emitter.emit(index, entry)

    limits = Limits(max_calls=len(script) + 1, max_output_tokens=16_000)
    tools = make_tools(
        root, sandbox, run_dir / "home", clock, lambda: max(limits.max_calls - transcript.model_calls, 0)
    )
    model = TimedModel(server.base_url, API_KEY, "claude-bench", RetryPolicy())
    model.clock = clock

    async def summarise(request: list[dict[str, Any]]) -> str:
        return "summary"  # never called: the conversation stays far below the fold threshold

    harness = TimedHarness(
        model, tools, transcript, limits, "Benchmark task: look around, then finish.", emit, summarise
    )
    harness.clock, harness.steps = clock, []
    server.extend(script)
    try:
        ended = await harness.run()
    finally:
        await model.close()
        output.exit("succeeded", 0, "completed")
    if ended.outcome != "completed":
        raise RuntimeError(f"the in-process harness run ended {ended.outcome}: {ended.reason}")
    if server.pending:
        raise RuntimeError(f"{server.pending} script steps left unconsumed")
    return harness.steps


def cheap_script(k: int) -> list[fake.Step]:
    steps = [
        fake.tool_use("read_file", {"path": "calc.py"}) if i % 2 == 0 else fake.tool_use("list_files", {})
        for i in range(k)
    ]
    return steps + [fake.tool_use("complete_task", {"summary": "done"})]


def command_script(c: int) -> list[fake.Step]:
    return [fake.tool_use("run_command", {"command": PYTEST}) for _ in range(c)] + [
        fake.tool_use("complete_task", {"summary": "tests pass", "tests_run": [PYTEST]})
    ]


def describe_steps(label: str, steps: list[Step]) -> list[str]:
    totals = [s.total * 1000 for s in steps]
    lines = [f"  {label}", f"    round trip   {summary(totals)}"]
    for part in ("model", "tool", "transcript", "emit"):
        values = [s.parts.get(part, 0.0) * 1000 for s in steps]
        lines.append(
            f"      {part:<10} mean {statistics.fmean(values):7.2f} ms  p50 {pct(values, 50):7.2f}  "
            f"p99 {pct(values, 99):7.2f}"
        )
    rest = [(s.total - sum(s.parts.get(p, 0.0) for p in ("model", "tool", "transcript", "emit"))) * 1000 for s in steps]
    lines.append(
        f"      {'rest':<10} mean {statistics.fmean(rest):7.2f} ms  p50 {pct(rest, 50):7.2f}  "
        f"p99 {pct(rest, 99):7.2f}   (conversation rebuild, fold sizing, bookkeeping)"
    )
    if len(totals) >= 20:
        tenth = max(1, len(totals) // 10)
        lines.append(
            f"    growth: first {tenth} round trips mean {statistics.fmean(totals[:tenth]):.2f} ms, "
            f"last {tenth} mean {statistics.fmean(totals[-tenth:]):.2f} ms "
            f"(the conversation sent grows by one exchange per step)"
        )
    return lines


async def time_command(tools: BenchTools, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        result = await tools.call("run_command", {"command": PYTEST})
        out.append((time.perf_counter() - t0) * 1000)
        if result.error or "1 passed" not in result.text:
            raise RuntimeError(f"run_command did not pass:\n{result.text}")
    return out


async def model_call_ms(nodelay: bool, n: int = 30) -> list[float]:
    """Bare AnthropicModel.complete() calls against the fake, with or without TCP_NODELAY on its side."""
    shipped = fake._Handler.disable_nagle_algorithm
    fake._Handler.disable_nagle_algorithm = nodelay
    try:
        with fake.FakeAnthropic(api_key=API_KEY) as server:
            server.extend([fake.tool_use("read_file", {"path": "calc.py"}) for _ in range(n + 3)])
            async with AnthropicModel(server.base_url, API_KEY, "claude-bench", RetryPolicy()) as model:
                out = []
                for _ in range(n + 3):
                    t0 = time.perf_counter()
                    await model.complete(
                        system=[{"type": "text", "text": "s"}],
                        tools=[],
                        max_tokens=100,
                        messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
                    )
                    out.append((time.perf_counter() - t0) * 1000)
                return out[3:]  # the first ones open the connection
    finally:
        fake._Handler.disable_nagle_algorithm = shipped


async def part_inprocess(args: argparse.Namespace, tmp: pathlib.Path) -> None:
    print(f"\n== 1. in-process harness round trips ({load()})", flush=True)
    shipped = await model_call_ms(False)
    nodelay = await model_call_ms(True)
    print(
        f"  one bare model call (AnthropicModel.complete, streamed, back to back on one connection):\n"
        f"    fake as shipped (Nagle on)    {summary(shipped)}\n"
        f"    fake with TCP_NODELAY         {summary(nodelay)}\n"
        f"    figures below: {'fake as shipped' if args.fake_as_shipped else 'fake with TCP_NODELAY'}",
        flush=True,
    )
    origin = make_repo(tmp / "origin", fixed=True)
    t0 = time.perf_counter()
    workspace = gitspace.open_workspace(tmp / "ws" / "repo", str(origin), "main", [])
    clone_ms = (time.perf_counter() - t0) * 1000
    root = workspace.path
    t0 = time.perf_counter()
    bubblewrap = BubblewrapSandbox(SandboxPolicy())
    why_not = bubblewrap.probe()
    detect_ms = (time.perf_counter() - t0) * 1000
    sandbox: Sandbox = PlainSandbox(SandboxPolicy()) if why_not else bubblewrap
    name = type(sandbox).__name__
    warning = f": {why_not}" if why_not else ""
    print(
        f"  workspace: gitspace.open_workspace clone {clone_ms:.1f} ms; bubblewrap probe -> {name} "
        f"in {detect_ms:.1f} ms (the bubblewrap probe, once per run){warning}",
        flush=True,
    )
    with fake.FakeAnthropic(api_key=API_KEY) as server:
        await harness_run(server, root, sandbox, tmp / "run-warmup", cheap_script(3))  # imports, first connection
        steps = await harness_run(server, root, sandbox, tmp / "run-cheap", cheap_script(args.round_trips))
        for line in describe_steps(
            f"{args.round_trips} cheap round trips (read_file calc.py / list_files alternating), then complete_task:",
            steps,
        ):
            print(line, flush=True)
        c = args.command_round_trips
        steps = await harness_run(server, root, sandbox, tmp / "run-command", command_script(c))
        for line in describe_steps(
            f"{c} run_command round trips (`{PYTEST}`, 1 test, {name}), then complete_task:", steps
        ):
            print(line, flush=True)
    print(
        f"  the run_command tool alone, {c} calls each (same tool code, different wrappers, interleaved):", flush=True
    )
    clock = Clock()
    (tmp / "home").mkdir(exist_ok=True)
    layers = [
        ("no wrapper at all", NoSandbox()),
        ("rlimits launcher only", PlainSandbox(SandboxPolicy())),
        (f"launcher + {name}", sandbox),
    ]
    tools = [make_tools(root, box, tmp / "home", clock) for _, box in layers]
    values: list[list[float]] = [[] for _ in layers]
    for i in range(c):  # round robin, rotating who goes first, so drifting load hits every layer alike
        for j in range(len(layers)):
            k = (i + j) % len(layers)
            values[k] += await time_command(tools[k], 1)
    medians = [pct(v, 50) for v in values]
    for (label, _), v in zip(layers, values, strict=True):
        print(f"    {label:<31} {summary(v)}", flush=True)
    print(
        f"    sandbox cost per command (difference of p50s): launcher {medians[1] - medians[0]:+.1f} ms, "
        f"bubblewrap {medians[2] - medians[1]:+.1f} ms, total {medians[2] - medians[0]:+.1f} ms "
        f"over {medians[0]:.1f} ms for the bare command",
        flush=True,
    )
    print(f"  ({load()})", flush=True)


# --- part 2: end to end -----------------------------------------------------------------------


class TimedFake(fake.FakeAnthropic):
    """The fake, noting when each request arrived (epoch seconds)."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.arrivals: list[float] = []

    def _record(self, request: fake.Request) -> None:
        self.arrivals.append(time.time())
        super()._record(request)


E2E_TOOLS = [
    "list_files",
    "read_file",
    "read_file",
    "run_command",
    "edit_file",
    "run_command",
    "write_file",
    "run_command",
    "list_files",
    "complete_task",
]


def e2e_script() -> list[fake.Step]:
    test_more = "from calc import add\n\n\ndef test_zero():\n    assert add(0, 0) == 0\n"
    return [
        fake.tool_use("list_files", {}),
        fake.tool_use("read_file", {"path": "calc.py"}, text="Let me look at calc.py."),
        fake.tool_use("read_file", {"path": "test_calc.py"}),
        fake.tool_use("run_command", {"command": PYTEST}),
        fake.tool_use(
            "edit_file", {"path": "calc.py", "edits": [{"old_text": "return a - b", "new_text": "return a + b"}]}
        ),
        fake.tool_use("run_command", {"command": PYTEST}),
        fake.tool_use("write_file", {"path": "test_more.py", "content": test_more}),
        fake.tool_use("run_command", {"command": PYTEST}),
        fake.tool_use("list_files", {}),
        fake.tool_use(
            "complete_task",
            {"summary": "add adds", "files_changed": ["calc.py", "test_more.py"], "tests_run": [PYTEST]},
        ),
    ]


@dataclasses.dataclass
class E2ERun:
    wall: float  # submit call -> change.finished
    split: dict[str, float]  # name -> seconds
    gaps_cheap: list[float]  # model request -> next model request, around a cheap tool
    gaps_command: list[float]  # ... around run_command


SPLIT = [
    ("submit->queued", "submit", "run.queued"),
    ("queued->assigned", "run.queued", "run.assigned"),
    ("assigned->started", "run.assigned", "run.started"),
    ("started->1st model request", "run.started", "first_request"),
    ("model loop (1st->10th request)", "first_request", "last_request"),
    ("10th request->cs.published", "last_request", "changeset.published"),
    ("cs.published->run.finished", "changeset.published", "run.finished"),
    ("run.finished->change.finished", "run.finished", "change.finished"),
]


def kill_supervisors(root: pathlib.Path) -> int:
    """Harness (and command) supervisors are detached from agentd on purpose: end, by pid, those
    whose command line names a run directory under `root` (this benchmark's temporary directory)."""
    killed = 0
    needle = str(root).encode()
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"supervisor" in cmdline and b"agentd" in cmdline and needle in cmdline:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)
                killed += 1
    return killed


def one_e2e_run(client: Client, server: TimedFake, i: int, deadline: Deadline) -> E2ERun:
    script = e2e_script()
    first_arrival = len(server.arrivals)
    server.extend(script)
    t0 = time.time()
    change = client.submit_change(
        "calc",
        f"bench run {i}: make add correct",
        [{"key": "fix", "kind": "implement", "objective": "add() must add", "complexity": "medium"}],
        criteria=["tests pass"],
    )

    def finished() -> list[Any]:
        return list(client.list_events(change_id=change.id, kind="change.finished", limit=10))

    wait_for(finished, deadline, 300, f"change {change.id} to finish", interval=0.1)
    events = []
    after = 0
    while True:
        page = client.list_events(change_id=change.id, after_id=after, limit=1000)
        if not page:
            break
        events.extend(page)
        after = page[-1].id
    final = client.get_change(change.id)
    run = client.get_run(final.tasks[0].latest_run_id)
    changesets = client.list_changesets(change.id)
    arrivals = server.arrivals[first_arrival:]
    problems = []
    if final.status != "succeeded":
        problems.append(f"change {final.status}")
    if run.outcome != "completed" or run.model_calls != len(script):
        problems.append(f"run outcome {run.outcome!r} with {run.model_calls} model calls")
    if len(changesets) != 1:
        problems.append(f"{len(changesets)} ChangeSets")
    if len(arrivals) != len(script) or server.pending:
        problems.append(f"{len(arrivals)} model requests, {server.pending} script steps left")
    if problems:
        raise RuntimeError(f"run {i} did not go as scripted: {'; '.join(problems)}; events: {[e.kind for e in events]}")
    at: dict[str, float] = {"submit": t0, "first_request": arrivals[0], "last_request": arrivals[-1]}
    for e in events:
        at.setdefault(e.kind, ts(e))  # the first of each kind (one run, no requeue expected)
    if sum(e.kind == "run.requeued" for e in events):
        print(f"  ! run {i} was requeued", file=sys.stderr)
    split = {name: at[b] - at[a] for name, a, b in SPLIT if a in at and b in at}
    split["queued->started"] = at["run.started"] - at["run.queued"]
    split["started->finished"] = at["run.finished"] - at["run.started"]
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]  # gap j: reply j streamed, tool j, gate calls
    cheap = [g for g, tool in zip(gaps, E2E_TOOLS, strict=False) if tool != "run_command"]
    command = [g for g, tool in zip(gaps, E2E_TOOLS, strict=False) if tool == "run_command"]
    return E2ERun(at["change.finished"] - t0, split, cheap, command)


def part_e2e(args: argparse.Namespace, tmp: pathlib.Path, deadline: Deadline) -> None:
    print(f"\n== 2. whole scripted runs through real processes ({load()})", flush=True)
    origin = make_repo(tmp / "origin", fixed=False)
    data_dir = tmp / "cp"
    procs: list[Proc] = []
    server = TimedFake(api_key=API_KEY).start()
    try:
        env = dict(
            os.environ, DROVER_LOG_LEVEL=args.log_level, ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY=API_KEY
        )
        env.pop("DROVER_DATABASE_URL", None)
        plane, target = start_plane(data_dir, tmp / "controlplane.log", env, deadline)
        procs.append(plane)
        add_project(data_dir, env, "calc", "--repo", str(origin), "--branch", "main")
        token = (data_dir / "tokens" / "admin.token").read_text().strip()
        agent_root = tmp / "agent"
        argv = agentd_argv(target, "bench-1", data_dir, agent_root, 1)
        agent = Proc("agentd", argv, agent_root / "agentd.log", dict(env, PATH=CHILD_PATH)).start()
        procs.append(agent)
        with Client(target, token=token) as client:

            def connected() -> bool:
                if not agent.alive():
                    raise RuntimeError(f"agentd exited:\n{log_tail(agent.log)}")
                return any(a.name == "bench-1" and a.connected for a in client.list_agents())

            wait_for(connected, deadline, 60, "agentd to connect", interval=0.1)
            pids = (plane.proc.pid if plane.proc else 0, agent.proc.pid if agent.proc else 0)
            print(
                f"  control plane pid {pids[0]} on {target} (SQLite), agentd pid {pids[1]} capacity 1, "
                f"fake Messages API {server.base_url} in this process; "
                f"{len(E2E_TOOLS)} model calls per run ({E2E_TOOLS.count('run_command')} of them run_command)",
                flush=True,
            )
            runs: list[E2ERun] = []
            for i in range(args.runs):
                deadline.check(f"before run {i + 1}")
                r = one_e2e_run(client, server, i + 1, deadline)
                runs.append(r)
                s = r.split
                print(
                    f"  run {i + 1}: submit->change.finished {r.wall * 1000:7.0f} ms | queued->started "
                    f"{s['queued->started'] * 1000:6.0f} ms, started->finished "
                    f"{s['started->finished'] * 1000:6.0f} ms | {load()}",
                    flush=True,
                )
        imports = []
        for _ in range(3):
            t0 = time.perf_counter()
            subprocess.run(
                [sys.executable, "-c", "import agentd.drivers.harness.driver"], cwd=REPO, check=True, timeout=120
            )
            imports.append((time.perf_counter() - t0) * 1000)
        print(f"  p50 over {len(runs)} runs (ms):", flush=True)
        rows = [
            ("submit->change.finished (wall)", [r.wall for r in runs]),
            ("queued->started", [r.split["queued->started"] for r in runs]),
            ("started->finished", [r.split["started->finished"] for r in runs]),
        ]
        rows += [(f"  {name}", [r.split[name] for r in runs if name in r.split]) for name, _, _ in SPLIT]
        for name, values in rows:
            ms = [v * 1000 for v in values]
            print(f"    {name:<36} p50 {pct(ms, 50):7.0f}  min {min(ms):7.0f}  max {max(ms):7.0f}", flush=True)
        print(
            f"    (of started->1st model request: `python -c 'import agentd.drivers.harness.driver'` alone takes "
            f"p50 {pct(imports, 50):.0f} ms, min {min(imports):.0f} ms, over 3 fresh processes)",
            flush=True,
        )
        cheap = [g * 1000 for r in runs for g in r.gaps_cheap]
        command = [g * 1000 for r in runs for g in r.gaps_command]
        print(
            "  model request -> next model request inside the supervisor (reply streamed, tool, transcript, "
            "events, the gate's Settle + Reserve gRPC calls):",
            flush=True,
        )
        print(f"    after a cheap tool   {summary(cheap)}", flush=True)
        print(f"    after run_command    {summary(command)}", flush=True)
    finally:
        left = signal.alarm(0)
        for p in reversed(procs):  # agentd first, then the control plane
            try:
                p.stop()
            except Exception as err:
                print(f"  ! stopping {p.name}: {err}", file=sys.stderr)
        killed = kill_supervisors(tmp)
        if killed:
            print(f"  ! killed {killed} leftover supervisors", file=sys.stderr)
        server.stop()
        if left:
            signal.alarm(max(1, int(deadline.left()) + 1))
    print(f"  ({load()})", flush=True)


# --- main -------------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--round-trips", type=int, default=50, help="cheap tool round trips in part 1 (default 50)")
    p.add_argument(
        "--command-round-trips",
        type=int,
        default=20,
        help="run_command round trips in part 1, and calls per sandbox layer (default 20)",
    )
    p.add_argument("--runs", type=int, default=5, help="whole scripted runs in part 2 (default 5)")
    p.add_argument("--part", choices=("inprocess", "e2e", "both"), default="both")
    p.add_argument("--timeout", type=float, default=900, help="fail after this many seconds in all (default 900)")
    p.add_argument("--log-level", default="INFO", help="DROVER_LOG_LEVEL of the processes (default INFO)")
    p.add_argument(
        "--fake-as-shipped",
        action="store_true",
        help="leave Nagle's algorithm on in the fake server (adds ~40 ms to most model calls)",
    )
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.round_trips < 1 or args.command_round_trips < 1 or args.runs < 1:
        parser().error("--round-trips, --command-round-trips and --runs must be at least 1")
    deadline = Deadline(args.timeout)

    def on_alarm(_signum: int, _frame: Any) -> None:
        raise BenchTimeout(f"benchmark exceeded {args.timeout:.0f} s")

    def on_term(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGALRM, on_alarm)
    signal.signal(signal.SIGTERM, on_term)
    signal.alarm(int(args.timeout) + 1)
    print(
        f"harness benchmark: Python {sys.version.split()[0]}, {load()}; zero model latency (scripted fake)", flush=True
    )
    if not args.fake_as_shipped:
        fake._Handler.disable_nagle_algorithm = True  # this process only; see the module docstring
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="drover-bench-harness-"))
    ok = False
    try:
        if args.part in ("inprocess", "both"):
            asyncio.run(part_inprocess(args, tmp / "inprocess"))
        if args.part in ("e2e", "both"):
            part_e2e(args, tmp / "e2e", deadline)
        ok = True
    except (Exception, KeyboardInterrupt) as err:
        print(f"FAILED: {type(err).__name__}: {err}\n  logs kept in {tmp}", file=sys.stderr, flush=True)
    finally:
        signal.alarm(0)
        kill_supervisors(tmp)
        if ok and not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
