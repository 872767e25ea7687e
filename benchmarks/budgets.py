#!/usr/bin/env python3
"""Budget reservations under contention, and routing decisions, per second.

    python benchmarks/budgets.py [--reservers N] [--seconds S] [--database sqlite|postgresql|both]
                                 [--routing-iterations K]

For each database: a fresh store (SQLite in a temporary directory, or a fresh PostgreSQL
database on 127.0.0.1:5432, dropped at the end), one Change without a budget and one whose
budget is spent, and N running runs on each. N reserver processes (multiprocessing, spawn),
each with its own Store, first warm up (one reserve+settle, one refusal: connection and
statement caches), wait at a barrier, then for S seconds loop `model_calls.reserve` then
`model_calls.settle` on the open Change (every call holds on five meters: provider month,
daily calls, Change, Project, user; all contend on the same rows), then for S seconds loop
`model_calls.reserve` on the spent Change (refused by its Change meter, nothing held).

  pairs/s     reserve+settle pairs of all processes / phase wall time
  pair ms     one process's reserve+settle latency: p50 p90 p99 max
  refusals/s  refused reservations / phase wall time, and their latency

Then routing decisions per second in this process: `tiers.decide_tier` over a mix of
Task traits, and `members.select` over a six-member class with capabilities, time-of-day
modifiers and quota snapshots (printed as "not built yet" when the module is missing).
"""

from __future__ import annotations

import argparse
import datetime as dt
import multiprocessing
import os
import pathlib
import statistics
import sys
import tempfile
import time
import uuid
from typing import Any

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import sqlalchemy
from sqlalchemy import select

from controlplane.config import BudgetConfig, HarnessConfig, Tier
from controlplane.domain import graph, pricing
from controlplane.services import change_lifecycle, model_calls, run_lifecycle
from controlplane.services.projects import add_project
from controlplane.store import events, meters
from controlplane.store.engine import Store
from controlplane.store.models import Run

PG_ADMIN_URL = os.environ.get("DROVER_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
MODEL = "claude-sonnet-5-5"
CONFIG = HarnessConfig(
    tiers={"sonnet": Tier(MODEL, 10_000_000, 1000)},
    default_tier="sonnet",
    budgets=BudgetConfig(provider_month_usd=1e9, agent_calls_per_day=0),
)


def reserver(url: str, open_run: str, spent_run: str, seconds: float, barrier: Any, out: Any) -> None:
    store = Store(url)
    pairs: list[float] = []
    refusals: list[float] = []
    spans: list[tuple[float, float]] = []
    error = ""
    try:

        def reserve(run_id: str, key: str) -> model_calls.Reservation:
            return store.transaction(model_calls.reserve, CONFIG, run_id, key, MODEL, "agent", 1000, 2000)

        warm = reserve(open_run, "warm")
        store.transaction(model_calls.settle, CONFIG, warm.reservation_id, pricing.Usage(2000, 1000), "")
        assert not reserve(spent_run, "warm").granted
        for phase, (run_id, sink) in enumerate(((open_run, pairs), (spent_run, refusals))):
            barrier.wait(300)
            begin = time.time()
            end = begin + seconds
            n = 0
            while time.time() < end:
                n += 1
                t0 = time.perf_counter()
                r = reserve(run_id, f"p{phase}:{n}")
                if r.granted:
                    store.transaction(model_calls.settle, CONFIG, r.reservation_id, pricing.Usage(2000, 1000), "")
                elif phase == 0:
                    raise AssertionError(f"refused on the open Change: {r.refusal}")
                sink.append(time.perf_counter() - t0)
            spans.append((begin, time.time()))
    except Exception as err:
        error = repr(err)
    finally:
        store.close()
        out.put((pairs, refusals, spans, error))


def setup(store: Store, n: int) -> list[tuple[str, str]]:
    """Two Changes (no budget; budget spent) with n running runs each; the run ids, paired."""

    def make(s: Any) -> list[tuple[str, str]]:
        add_project(s, "bench", "")
        runs = []
        for budget in (0.0, 0.000001):
            change_id = change_lifecycle.submit_change(
                s, graph.ChangeSpec("bench", "g", (graph.TaskSpec("t", "implement", "o"),), budget_usd=budget), "bench"
            )
            first = s.scalars(select(Run).where(Run.change_id == change_id)).one()
            for attempt in range(2, n + 1):
                s.add(Run(id=events.new_id("run"), change_id=change_id, task_id=first.task_id, attempt=attempt))
            s.flush()
            ids = []
            for run in s.scalars(select(Run).where(Run.change_id == change_id).order_by(Run.attempt)):
                run_lifecycle.assign(s, run.id, "bench")
                run.tier, run.model = "sonnet", MODEL
                ids.append(run.id)
            runs.append(ids)
        return list(zip(*runs, strict=True))

    return store.transaction(make)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def latency(values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return f"p50 {pct(ms, 0.5):.1f}  p90 {pct(ms, 0.9):.1f}  p99 {pct(ms, 0.99):.1f}  max {max(ms, default=0):.1f} ms"


def bench_database(name: str, url: str, n: int, seconds: float) -> None:
    store = Store(url)
    store.migrate()
    pairs = setup(store, n)
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=reserver, args=(url, a, b, seconds, barrier, out), daemon=True) for a, b in pairs]
    started = time.monotonic()
    try:
        for proc in procs:
            proc.start()
        results = [out.get(timeout=300 + 4 * seconds) for _ in procs]
        for proc in procs:
            proc.join(30)
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
    errors = [r[3] for r in results if r[3]]
    if errors:
        raise SystemExit(f"{name}: {len(errors)} reservers failed, first: {errors[0]}")
    held = [t for r in results for t in r[0]]
    refused = [t for r in results for t in r[1]]
    walls = [max(r[2][phase][1] for r in results) - min(r[2][phase][0] for r in results) for phase in (0, 1)]
    change_meter = next(m for m in store.transaction(meters.usage, "change-usd:") if m["limit"] == 0)
    store.close()
    per_process = [len(r[0]) for r in results]
    print(
        f"{name}: {n} reserver processes, {seconds:g} s per phase (whole run {time.monotonic() - started:.1f} s "
        f"with spawning)"
    )
    print(
        f"  reserve+settle  {len(held) / walls[0]:8.1f} pairs/s     ({len(held)} pairs in {walls[0]:.2f} s; "
        f"per process min {min(per_process)} median {statistics.median(per_process):g} max {max(per_process)})"
    )
    print(f"  pair latency    {latency(held)}")
    print(f"  refused         {len(refused) / walls[1]:8.1f} refusals/s  ({len(refused)} in {walls[1]:.2f} s)")
    print(f"  refusal latency {latency(refused)}")
    print(
        f"  open Change meter: used {change_meter['used']} reserved {change_meter['reserved']} "
        f"(every pair settled: {change_meter['used'] == (len(held) + n) * 21_000})"
    )


def rate(fn: Any, iterations: int) -> tuple[float, float]:
    t0 = time.perf_counter()
    for i in range(iterations):
        fn(i)
    elapsed = time.perf_counter() - t0
    return iterations / elapsed, elapsed / iterations * 1e6


def bench_routing(iterations: int) -> None:
    from controlplane.domain import members, tiers

    traits = [
        tiers.TaskTraits(kind="implement", size="small", complexity="low", risk="low"),
        tiers.TaskTraits(kind="implement", size="medium", complexity="medium", risk="medium", billing=True),
        tiers.TaskTraits(kind="summarize"),
        tiers.TaskTraits(kind="plan", size="large", complexity="high", risk="high"),
        tiers.TaskTraits(kind="migrate", destructive_migration=True, resources=("db", "api")),
        tiers.TaskTraits(kind="implement", authorization=True, attempt=2),
    ]
    answers = [
        None,
        tiers.ClassifierAnswer("haiku", 0.9, False, "answered"),
        tiers.ClassifierAnswer.abstain("low_confidence", 0.3),
    ]
    per_s, us = rate(
        lambda i: tiers.decide_tier(traits[i % len(traits)], answers[i % len(answers)], i % 2 == 0), iterations
    )
    print(
        f"tiers.decide_tier  {per_s:12,.0f} decisions/s  ({us:.2f} µs each, {iterations} over "
        f"{len(traits)} traits x {len(answers)} classifier answers)"
    )

    cls = members.TierClass(
        "sonnet",
        tuple(
            members.Member(
                agent=agent,
                instance_id=inst,
                billing=billing,
                model=MODEL,
                quality_score=score,
                capabilities=frozenset(caps),
                max_concurrent=2,
                order=order,
            )
            for order, (agent, inst, billing, score, caps) in enumerate(
                [
                    ("anthropic", "acct-a", members.SUBSCRIPTION, 120, {"sensitive"}),
                    ("anthropic", "acct-b", members.SUBSCRIPTION, 120, {"sensitive"}),
                    ("anthropic", "acct-c", members.SUBSCRIPTION, 120, set()),
                    ("anthropic", "", members.PAY_PER_API, 100, {"sensitive"}),
                    ("bedrock", "eu", members.PAY_PER_API, 90, set()),
                    ("vertex", "us", members.SUBSCRIPTION, 110, {"sensitive", "pci"}),
                ]
            )
        ),
    )
    modifiers = (
        members.TodModifier(route_key="anthropic/acct-a", start="22:00", end="06:00", delta=-1),
        members.TodModifier(model=MODEL, start="09:00", end="17:00", delta=2),
    )
    snapshots = {
        "anthropic/acct-a": members.QuotaSnapshot(40.0, 0.0),
        "anthropic/acct-b": members.QuotaSnapshot(5.0),
        "vertex/us": members.QuotaSnapshot(80.0),
    }
    now = dt.datetime(2026, 11, 30, 12, tzinfo=dt.UTC)
    observed = {"anthropic/acct-c": (now - dt.timedelta(minutes=3),)}
    policies = [
        members.QuotaPolicy(),
        members.QuotaPolicy(intra_kind_policy="RoundRobin"),
        members.QuotaPolicy(unknown_policy="FailCautious"),
    ]
    required = [(), ("sensitive",), ("pci",), ("sensitive", "pci")]
    counters: dict[str, int] = {}
    per_s, us = rate(
        lambda i: members.select(
            cls,
            required[i % 4],
            modifiers,
            snapshots,
            observed,
            {"anthropic": i % 3},
            policies[i % 3],
            now,
            rr_counters=counters,
        ),
        iterations,
    )
    print(
        f"members.select       {per_s:12,.0f} selections/s ({us:.2f} µs each, {iterations} over a "
        f"{len(cls.members)}-member class, {len(required)} capability sets x {len(policies)} quota policies)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reservers", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--database", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--routing-iterations", type=int, default=20_000)
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.database in ("postgresql", "both"):
        db = f"drover_bench_{uuid.uuid4().hex[:10]}"
        admin = sqlalchemy.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{db}"')
        try:
            bench_database("postgresql", PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{db}", args.reservers, args.seconds)
        finally:
            with admin.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
            admin.dispose()
    if args.database in ("sqlite", "both"):
        with tempfile.TemporaryDirectory(prefix="drover-budgets-") as tmp:
            bench_database("sqlite", f"sqlite:///{tmp}/budgets.db", args.reservers, args.seconds)
    bench_routing(args.routing_iterations)


if __name__ == "__main__":
    main()
