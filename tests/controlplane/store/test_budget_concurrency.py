"""No interleaving of concurrent reservers pushes a meter past its limit (DESIGN.md "Budgets and
meters"): 50 real processes, each with its own Store on one database (each a holder of escrow
slices, as each control-plane replica's writers are), reserve and settle model calls against one
Change budget until refused, on SQLite and on PostgreSQL; and the same with half of them killed
with SIGKILL mid-run, their slices and open reservations left behind for the sweep."""

from __future__ import annotations

import datetime as dt
import multiprocessing
import queue
import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import func, select

from controlplane.config import BudgetConfig, HarnessConfig, Tier
from controlplane.domain import graph, pricing
from controlplane.services import change_lifecycle, model_calls, run_lifecycle
from controlplane.services.projects import add_project
from controlplane.store import escrow, events, meters
from controlplane.store.engine import Store
from controlplane.store.models import Change, Meter, MeterSlice, ModelCall, Run

RESERVERS = 50
MODEL = "claude-sonnet-5-5"
ESTIMATE = 7500 + 1000 * 15  # 2,000 input tokens of sonnet at the cache-write rate, 1,000 output, in micro-dollars
BUDGET_MICROS = 100 * ESTIMATE
# Only the Change budget may bind here: the fleet-wide meters are set out of reach.
CONFIG = HarnessConfig(
    tiers={"sonnet": Tier(MODEL, 1_000_000, 1000)},
    default_tier="sonnet",
    budgets=BudgetConfig(provider_month_usd=1_000_000.0, agent_calls_per_day=0),
)


def reserver(url: str, run_id: str, seed: int, start: Any, out: Any) -> None:
    """One process: reserve, settle at most the estimate, until refused; report what happened."""
    rng = random.Random(seed)
    store = Store(url)
    granted, refusal, error = 0, "", ""
    try:
        start.wait(120)
        while True:
            r = store.transaction(
                model_calls.reserve, CONFIG, run_id, f"agent:1:{granted + 1}:1", MODEL, "agent", 1000, 2000
            )
            if not r.granted:
                refusal = r.refusal
                break
            # Even seeds cost exactly their estimate (all input written to the cache), odd ones anything up to it.
            usage = (
                pricing.Usage(0, 1000, 2000)
                if seed % 2 == 0
                else pricing.Usage(rng.randint(0, 2000), rng.randint(0, 1000))
            )
            store.transaction(model_calls.settle, CONFIG, r.reservation_id, usage, "")
            granted += 1
    except Exception as err:  # reported to the test, which fails on it
        error = repr(err)
    finally:
        store.close()
        out.put((run_id, granted, refusal, error))


def setup_change(store: Store, n: int = RESERVERS, budget_micros: int = BUDGET_MICROS) -> tuple[str, list[str]]:
    """A Change with one Task and n running runs of it."""

    def make(s) -> tuple[str, list[str]]:
        add_project(s, "p", "")
        change_id = change_lifecycle.submit_change(
            s,
            graph.ChangeSpec("p", "g", (graph.TaskSpec("t", "implement", "o"),), budget_usd=budget_micros / 1_000_000),
            "tester",
        )
        first = s.scalars(select(Run).where(Run.change_id == change_id)).one()
        for attempt in range(2, n + 1):
            s.add(
                Run(
                    id=events.new_id("run"),
                    change_id=change_id,
                    task_id=first.task_id,
                    attempt=attempt,
                    state="queued",
                    tier="sonnet",
                    model=MODEL,
                )
            )
        s.flush()
        runs = list(s.scalars(select(Run).where(Run.change_id == change_id).order_by(Run.attempt)))
        for run in runs:
            run_lifecycle.assign(s, run.id, "a1")
            run.tier, run.model = "sonnet", MODEL
        return change_id, [run.id for run in runs]

    return store.transaction(make)


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:
    yield f"sqlite:///{tmp_path / 'budget.db'}" if request.param == "sqlite" else request.getfixturevalue("pg_url")


@pytest.mark.timeout(150)
def test_fifty_processes_never_push_the_change_meter_past_its_limit(url: str) -> None:
    store = Store(url)
    store.migrate()
    change_id, run_ids = setup_change(store)
    key = f"change-usd:{change_id}"
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Barrier(RESERVERS + 1), ctx.Queue()
    procs = [
        ctx.Process(target=reserver, args=(url, run_id, seed, start, out), daemon=True)
        for seed, run_id in enumerate(run_ids)
    ]
    seen: list[tuple[int, int, int]] = []
    broken: list[str] = []
    done = threading.Event()

    def watch() -> None:
        # Sample the meter while the reservers run: admitted plus held never passes the limit.
        while not done.is_set():
            row = store.transaction(lambda s: s.get(Meter, key))
            if row is not None:
                seen.append((row.used, row.reserved, row.limit_amount))
            broken.extend(store.transaction(escrow.violations))
            time.sleep(0.02)

    try:
        for proc in procs:
            proc.start()
        start.wait(120)
        began = time.monotonic()
        watcher = threading.Thread(target=watch)
        watcher.start()
        results = []
        for _ in procs:
            try:
                results.append(out.get(timeout=90))
            except queue.Empty:
                pytest.fail(f"only {len(results)} of {RESERVERS} reservers reported")
        elapsed = time.monotonic() - began
        done.set()
        watcher.join()
        for proc in procs:
            proc.join(10)
    finally:
        done.set()
        for proc in procs:
            if proc.is_alive():
                proc.kill()

    assert [r for r in results if r[3]] == []  # no process failed (no deadlock, no lost update)
    assert {r[2] for r in results} == {"change_budget"}  # every reserver stopped at the Change meter
    granted = sum(r[1] for r in results)

    def final(s) -> dict[str, Any]:
        calls = list(
            s.scalars(select(ModelCall).join(Run, Run.id == ModelCall.run_id).where(Run.change_id == change_id))
        )
        return {
            "meters": {m["kind"]: m for m in meters.usage(s)},
            "calls": calls,
            "budget": s.get(Change, change_id).budget_usd,
            "reservations": s.scalar(select(func.count()).select_from(ModelCall)),
        }

    state = store.transaction(final)
    store.close()
    change_meter = state["meters"]["change"]
    costs = sum(call.cost_micros for call in state["calls"])
    print(
        f"\n{url.split(':')[0]}: {granted} reserve+settle pairs by {RESERVERS} processes in {elapsed:.1f} s, "
        f"{len(seen)} samples, settled {change_meter['used']} of {change_meter['limit']}"
    )
    assert change_meter["limit"] == BUDGET_MICROS
    assert change_meter["used"] <= change_meter["limit"]  # exact <= estimate: never past the limit
    assert change_meter["reserved"] == 0 and all(m["reserved"] == 0 for m in state["meters"].values())
    assert costs == change_meter["used"] == state["meters"]["provider_month"]["used"]
    assert len(state["calls"]) == granted == state["meters"]["agent_calls_day"]["used"]
    assert all(call.state == "settled" for call in state["calls"])
    # The last refusal came with nothing else held: the budget was used to within one estimate.
    assert change_meter["used"] > BUDGET_MICROS - ESTIMATE
    assert seen and all(used + reserved <= limit for used, reserved, limit in seen)
    assert broken == []  # no meter row and no escrow slice ever held more than it had


KILLED_RESERVERS = 16
KILLED_BUDGET = 600 * ESTIMATE


@pytest.mark.timeout(150)
def test_reservers_killed_mid_run_leave_nothing_overspent_and_the_sweep_returns_their_slices(url: str) -> None:
    store = Store(url)
    store.migrate()
    _, run_ids = setup_change(store, KILLED_RESERVERS, KILLED_BUDGET)
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Barrier(KILLED_RESERVERS + 1), ctx.Queue()
    procs = [
        ctx.Process(target=reserver, args=(url, run_id, seed, start, out), daemon=True)
        for seed, run_id in enumerate(run_ids)
    ]
    broken: list[str] = []
    try:
        for proc in procs:
            proc.start()
        start.wait(120)
        time.sleep(1.0)  # a quarter to a half of the budget is spent by now
        victims = procs[::2]
        for proc in victims:
            proc.kill()  # SIGKILL: mid-transaction, holding slices and an open reservation or two
        # The survivors spend the rest, taking back the dead holders' unused grants.
        broken.extend(store.transaction(escrow.violations))
        results = [out.get(timeout=90) for _ in procs[1::2]]
        for proc in procs:
            proc.join(10)
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
    assert [r for r in results if r[3]] == []
    assert {r[2] for r in results} == {"change_budget"}
    assert all(victim.exitcode == -9 for victim in victims)
    broken.extend(store.transaction(escrow.violations))

    # The sweep: the dead processes' open reservations settle at their estimates; every slice is
    # folded back into its meter and dropped.
    store.transaction(model_calls.settle_expired, dt.timedelta(0))
    for key in store.transaction(escrow.idle_meters, dt.timedelta(0)):
        store.transaction(escrow.return_idle, key, dt.timedelta(0))
    state = store.transaction(
        lambda s: {
            "meters": {m["kind"]: m for m in meters.usage(s)},
            "rows": {m.kind: (m.used, m.reserved) for m in s.scalars(select(Meter))},
            "costs": s.scalar(select(func.sum(ModelCall.cost_micros))),
            "calls": s.scalar(select(func.count()).select_from(ModelCall)),
            "open": s.scalar(select(func.count()).select_from(ModelCall).where(ModelCall.state != "settled")),
            "slices": s.scalar(select(func.count()).select_from(MeterSlice)),
        }
    )
    broken.extend(store.transaction(escrow.violations))
    store.close()
    change_meter = state["meters"]["change"]
    assert broken == []
    assert state["open"] == 0 and state["slices"] == 0
    assert change_meter["reserved"] == 0 and change_meter["used"] <= KILLED_BUDGET
    assert int(state["costs"]) == change_meter["used"] == state["meters"]["provider_month"]["used"]
    assert state["calls"] == state["meters"]["agent_calls_day"]["used"]
    # With every slice folded back the rows themselves read the same: nothing is left in escrow.
    assert state["rows"]["change"] == (change_meter["used"], 0)
    assert change_meter["used"] > KILLED_BUDGET - 2 * ESTIMATE  # the survivors spent what the dead left
