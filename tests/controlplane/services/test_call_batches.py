"""A batch of model-call reservations and settles (`call_batches.apply_many`, what one group-commit
transaction of ReserveModelCall and SettleModelCall runs) answers and writes exactly what the same
units answer and write one by one (`model_calls.reserve`, `settle_for_agent`), in far fewer statements.
Two stores of the same world, on SQLite and on PostgreSQL: one takes the batch, the other the units
alone in the batch's order; their answers, calls, events and meters are compared."""

from __future__ import annotations

import contextlib
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event, func, select
from sqlalchemy.orm import Session

from controlplane.config import HarnessConfig, Tier
from controlplane.domain import graph, pricing
from controlplane.services import call_batches, change_lifecycle, model_calls, run_lifecycle
from controlplane.services.projects import add_project
from controlplane.store import escrow, meters
from controlplane.store.engine import Store, sqlite_url
from controlplane.store.models import Agent, Event, ModelCall, Run
from drover.errors import DroverError
from tests.conftest import fresh_pg_database

MODEL = "claude-sonnet-5-5"
CONFIG = HarnessConfig(tiers={"sonnet": Tier(MODEL, 3, 1000)}, default_tier="sonnet")
COST = 2000 * 3 + 1000 * 15  # 2,000 input and 1,000 output tokens of sonnet, uncached (estimate 22,500)
WORLD = {  # run name: (Change budget in USD, Tasks of the Change, agent)
    "shared": (0.1, 2, "a1"),  # a share of 50,000 with 21,000 spent: room for a call
    "spent": (0.1, 2, "a1"),  # 42,000 spent of its 50,000 share: the next call is refused by the share
    "capped": (0.0, 1, "a1"),  # two calls made of its cap of three
    "ended": (0.0, 1, "a1"),
    "theirs": (0.0, 1, "a2"),  # another token's agent
    "held": (0.0, 1, "a1"),  # holds a reservation under a key, and one to settle
}


@contextlib.contextmanager
def two_stores(kind: str, tmp_path: pathlib.Path) -> Iterator[tuple[Store, Store]]:
    with contextlib.ExitStack() as stack:
        stores = []
        for name in ("batched", "alone"):
            (tmp_path / name).mkdir()
            url = sqlite_url(tmp_path / name) if kind == "sqlite" else stack.enter_context(fresh_pg_database())
            store = Store(url)
            stack.callback(store.close)
            store.migrate()
            stores.append(store)
        yield stores[0], stores[1]


def build(store: Store) -> dict[str, str]:
    """The world: its run ids by name, and the ids of the reservations made before the batch."""

    def make(s: Session) -> dict[str, str]:
        add_project(s, "p", "")
        s.add_all([Agent(name="a1", token_id=7), Agent(name="a2", token_id=8)])
        ids: dict[str, str] = {}
        for name, (budget, tasks, agent) in WORLD.items():
            specs = tuple(graph.TaskSpec(f"t{i}", "implement", "o") for i in range(tasks))
            change_id = change_lifecycle.submit_change(
                s, graph.ChangeSpec("p", name, specs, budget_usd=budget), "tester"
            )
            run = s.scalars(select(Run).where(Run.change_id == change_id).order_by(Run.id)).first()
            assert run is not None
            run_lifecycle.assign(s, run.id, agent)
            run.tier, run.model = "sonnet", MODEL
            ids[name] = run.id
        return ids

    ids = store.transaction(make)

    def reserve(name: str, key: str) -> str:
        purpose = key.split(":")[0]
        r = store.transaction(model_calls.reserve, CONFIG, ids[name], key, MODEL, purpose, 1000, 2000)
        assert r.granted
        return r.reservation_id

    for name, calls in (("shared", 1), ("spent", 2)):
        for n in range(calls):
            rid = reserve(name, f"agent:before:{n}")
            store.transaction(model_calls.settle, CONFIG, rid, pricing.Usage(2000, 1000), "")
    reserve("capped", "agent:before:0")
    reserve("capped", "agent:before:1")
    ids["held:key"] = reserve("held", "agent:held")
    ids["held:settle"] = reserve("shared", "fold:settle")  # a fold call: not counted against the cap
    ids["over"] = reserve("capped", "fold:over")
    store.transaction(run_lifecycle.cancel_run, ids["ended"], "stop")
    finished = run_lifecycle.RunMessage(ids["ended"], 1, "finished", status="cancelled")
    store.transaction(lambda s: run_lifecycle.apply_run_message(s, "a1", finished, 1 << 20))
    ids["events:before"] = str(store.read_now(lambda s: s.scalar(select(func.max(Event.id)))))
    return ids


def units(ids: dict[str, str]) -> list[call_batches.Unit]:
    def reserve(name: str, key: str, token: int = 7, purpose: str = "agent") -> call_batches.ReserveUnit:
        return call_batches.ReserveUnit(CONFIG, ids.get(name, name), key, MODEL, purpose, 1000, 2000, token)

    def settle(rid: str, usage: pricing.Usage, token: int = 7) -> call_batches.SettleUnit:
        return call_batches.SettleUnit(CONFIG, rid, usage, "", token)

    over = pricing.Usage(input_tokens=2000, output_tokens=1000, cache_creation_input_tokens=2000)
    return [
        reserve("shared", "agent:1"),  # within its share: admitted in the batch
        settle(ids["held:settle"], pricing.Usage(100, 10)),
        reserve("capped", "agent:1"),  # its third call of three
        reserve("capped", "agent:2"),  # the same run again: alone, and refused at the cap with its event
        settle(ids["held:settle"], pricing.Usage(9999, 9999)),  # settled twice: the first settle stands
        reserve("spent", "agent:1"),  # refused by its share of the Change budget, with its event
        reserve("ended", "agent:1"),  # run_not_running
        reserve("theirs", "agent:1"),  # NOT_FOUND: its agent is another token's
        reserve("held", "agent:held"),  # the reservation already held under this key
        reserve("held", ""),  # INVALID_ARGUMENT key
        reserve("held", "agent:x", purpose="other"),  # INVALID_ARGUMENT purpose
        reserve("mc-none", "agent:1"),  # NOT_FOUND run_id
        settle("mc-none", pricing.Usage(1, 1)),  # NOT_FOUND reservation_id
        settle(ids["held:key"], pricing.Usage(1, 1), token=8),  # NOT_FOUND: another token's agent
        settle(ids["over"], over),  # above its reservation: capped, with its event
        reserve("held", "agent:2"),
        reserve("shared", "fold:2", purpose="fold"),  # the same run again: alone
    ]


def normal(store: Store, ids: dict[str, str], answers: list[Any]) -> list[Any]:
    """Answers with the ids that differ between the stores replaced by run names and keys."""
    names = {v: k for k, v in ids.items() if ":" not in k}
    calls = store.read_now(lambda s: {c.id: (names[c.run_id], c.key) for c in s.scalars(select(ModelCall))})
    out: list[Any] = []
    for a in answers:
        if isinstance(a, DroverError):
            message = str(a)
            for value, name in [*names.items(), (ids["held:key"], "held:key")]:
                message = message.replace(value, name)
            out.append((type(a).__name__, a.field, message))
        elif isinstance(a, model_calls.Reservation):
            out.append((calls.get(a.reservation_id, a.reservation_id), *dataclasses_tail(a)))
        else:
            run_id, cost, run_cost = a
            out.append((names[run_id], cost, run_cost))
    return out


def dataclasses_tail(r: model_calls.Reservation) -> tuple[Any, ...]:
    return r.granted, r.refusal, r.calls_used, r.calls_cap, r.estimate_micros, r.meter.split(":")[0], r.limit


def written(store: Store, ids: dict[str, str]) -> dict[str, Any]:
    names = {v: k for k, v in ids.items() if ":" not in k}

    def read(s: Session) -> dict[str, Any]:
        calls = sorted(
            (names[c.run_id], c.key, c.state, c.cost_micros, c.estimate_micros, c.purpose)
            for c in s.scalars(select(ModelCall))
        )
        events = sorted(
            (e.kind, names.get(e.run_id or "", ""), sorted((k, v) for k, v in e.data.items() if k != "reservation_id"))
            for e in s.scalars(select(Event).where(Event.id > int(ids["events:before"])))
        )
        metered = sorted((m["kind"], m["used"], m["reserved"]) for m in meters.usage(s))
        return {"calls": calls, "events": events, "meters": metered, "violations": escrow.violations(s)}

    return store.read_now(read)


def counted(store: Store) -> list[str]:
    statements: list[str] = []
    event.listen(store.engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    return statements


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_batch_answers_and_writes_what_its_units_do_alone(kind: str, tmp_path: pathlib.Path) -> None:
    with two_stores(kind, tmp_path) as (batched, alone):
        ids_b, ids_a = build(batched), build(alone)
        got = batched.transaction(lambda s: call_batches.apply_many(s, units(ids_b)))
        want = alone.transaction(lambda s: [call_batches_alone(s, u) for u in units(ids_a)])
        assert normal(batched, ids_b, got) == normal(alone, ids_a, want)
        assert written(batched, ids_b) == written(alone, ids_a)
        assert written(batched, ids_b)["violations"] == []
        kinds = {e[0] for e in written(batched, ids_b)["events"]}
        assert {"run.call_cap", "run.cost_cap", "run.over_reservation"} <= kinds  # the units that went alone
        granted = [a for a in got if isinstance(a, model_calls.Reservation) and a.granted]
        assert len(granted) == 5


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_the_statements_of_a_batch_do_not_grow_with_its_calls(kind: str, tmp_path: pathlib.Path) -> None:
    """Reservations within their slices and settles at or under their estimate: the batch's statements
    are the same for 4 calls as for 16, where one by one they are about five a call."""
    with two_stores(kind, tmp_path) as (store, _):
        runs = store.transaction(lambda s: [running(s, f"c{i}") for i in range(16)])
        for run in runs:  # the holder's slices of each Change's meters, taken from the meters once
            store.transaction(call_batches.ReserveUnit(CONFIG, run, "agent:0", MODEL, "agent", 1000, 2000, 7).alone)
        sent = counted(store)
        per_batch: dict[int, tuple[int, int]] = {}
        for n, batch in ((4, runs[:4]), (16, runs)):
            key = f"agent:{n}"
            reserves = [call_batches.ReserveUnit(CONFIG, r, key, MODEL, "agent", 1000, 2000, 7) for r in batch]
            sent.clear()
            held = store.transaction(call_batches.apply_many, reserves)
            reserving = len(sent)
            assert all(isinstance(r, model_calls.Reservation) and r.granted for r in held)
            usage = pricing.Usage(2000, 1000)
            settles = [call_batches.SettleUnit(CONFIG, r.reservation_id, usage, "", 7) for r in held]
            sent.clear()
            settled = store.transaction(call_batches.apply_many, settles)
            assert [c for _, c, _ in settled] == [COST] * n
            per_batch[n] = (reserving, len(sent))
        assert per_batch[4] == per_batch[16], per_batch
        reserving, settling = per_batch[16]
        assert reserving <= 7 and settling <= 4, per_batch  # the reads and the writes (SQLite: and its BEGIN)
        assert store.read_now(escrow.violations) == []


def running(s: Session, name: str) -> str:
    if name == "c0":
        add_project(s, "p", "")
        s.add(Agent(name="a1", token_id=7))
    spec = graph.ChangeSpec("p", name, (graph.TaskSpec("t", "implement", "o"),))
    change_id = change_lifecycle.submit_change(s, spec, "tester")
    run = s.scalars(select(Run).where(Run.change_id == change_id)).one()
    run_lifecycle.assign(s, run.id, "a1")
    run.tier, run.model = "sonnet", MODEL
    return run.id


def call_batches_alone(s: Session, unit: call_batches.Unit) -> Any:
    """A unit alone, in a savepoint, its error as a value: what GroupCommit does for a unit by itself."""
    try:
        with s.begin_nested():
            return call_batches.alone(s, unit)
    except DroverError as err:
        return err
