"""Exact cost from usage, and reserve/settle of model calls, on SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses
import datetime as dt
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controlplane.config import BudgetConfig, HarnessConfig, Tier
from controlplane.domain import graph, pricing
from controlplane.services import change_lifecycle, model_calls, run_lifecycle
from controlplane.services.projects import add_project
from controlplane.store import meters
from controlplane.store.engine import Store
from controlplane.store.models import Agent, Event, ModelCall, Project, Run, Token
from drover.errors import NotFound

SONNET = pricing.Price.of(3, 15)


@pytest.mark.parametrize(
    "usage, micros",
    [
        (pricing.Usage(), 0),
        (pricing.Usage(input_tokens=1_000_000), 3_000_000),  # $3 per million input tokens
        (pricing.Usage(output_tokens=1_000), 15_000),  # thinking is output
        (pricing.Usage(cache_creation_input_tokens=1_000_000), 3_750_000),  # 1.25x input
        (pricing.Usage(cache_read_input_tokens=1_000_000), 300_000),  # 0.1x input
        (pricing.Usage(1, 1, 1, 1), 22),  # 3 + 15 + 3.75 + 0.3 = 22.05, half up
        (pricing.Usage(1000, 200, 500, 3000), 3000 + 3000 + 1875 + 900),
    ],
)
def test_cost_is_exact_in_micro_dollars(usage: pricing.Usage, micros: int) -> None:
    assert pricing.cost_micros(usage, SONNET) == micros


PRICES = st.builds(
    pricing.Price,
    *(st.fractions(0, 100, max_denominator=1000) for _ in range(4)),
)


@given(
    price=PRICES,
    prompt=st.integers(0, 10_000_000),
    split=st.tuples(st.floats(0, 1), st.floats(0, 1)),
    max_tokens=st.integers(0, 1_000_000),
    output=st.floats(0, 1),
)
def test_no_split_of_the_prompt_costs_more_than_the_worst_case(
    price: pricing.Price, prompt: int, split: tuple[float, float], max_tokens: int, output: float
) -> None:
    """Whatever a usage report does with the prompt's tokens (input, cache writes, cache reads) and
    however much output it used, its cost is within the reservation."""
    written = int(prompt * split[0])
    read = int((prompt - written) * split[1])
    usage = pricing.Usage(prompt - written - read, int(max_tokens * output), written, read)
    assert pricing.cost_micros(usage, price) <= pricing.worst_case_micros(prompt, max_tokens, price)


def test_the_worst_case_prices_every_input_token_as_a_cache_write() -> None:
    assert pricing.worst_case_micros(2000, 1000, SONNET) == 2000 * 3.75 + 1000 * 15
    assert pricing.worst_case_micros(-5, -1, SONNET) == 0  # never negative
    dear_reads = pricing.Price.of(1, 5, cache_write=1, cache_read=2)  # an operator's odd prices: still the dearest
    assert pricing.worst_case_micros(1000, 0, dear_reads) == 2000


@pytest.mark.parametrize(
    "reported, reserved, applied, excess",
    [(100, 200, 100, 0), (200, 200, 200, 0), (105_750, 100_000, 100_000, 5_750), (-3, 10, 0, 0), (5, -1, 0, 5)],
)
def test_a_settle_applies_at_most_its_reservation(reported: int, reserved: int, applied: int, excess: int) -> None:
    assert pricing.settled_micros(reported, reserved) == pricing.Settled(applied, excess)


def test_prices_fall_back_to_the_defaults_then_the_most_expensive() -> None:
    configured = {"my-model": pricing.Price.of("0.5", "1.5")}
    assert pricing.price_for("my-model", configured).input == Fraction(1, 2)
    assert pricing.price_for("claude-haiku-5-5", configured) == pricing.DEFAULT_PRICES["claude-haiku-5-5"]
    assert pricing.price_for("unknown", configured) == pricing.FALLBACK_PRICE


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path) -> Store:
    url = f"sqlite:///{tmp_path / 'm.db'}" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    s = Store(url)
    s.migrate()
    yield s
    s.close()


def running_run(store: Store) -> str:
    def make(s) -> str:
        add_project(s, "p", "")
        change_id = change_lifecycle.submit_change(
            s, graph.ChangeSpec("p", "g", (graph.TaskSpec("t", "implement", "o"),)), "tester"
        )
        run = s.query(Run).filter(Run.change_id == change_id).one()
        run_lifecycle.assign(s, run.id, "a1")
        run.tier, run.model = "sonnet", "claude-sonnet-5-5"
        return run.id

    return store.transaction(make)


CONFIG = HarnessConfig(tiers={"sonnet": Tier("claude-sonnet-5-5", 2, 1000)}, default_tier="sonnet")


def test_reserve_settle_cap_and_idempotence(store: Store) -> None:
    run_id = running_run(store)
    r1 = store.transaction(model_calls.reserve, CONFIG, run_id, "agent:1:1:1", "claude-sonnet-5-5", "agent", 1000, 2000)
    assert r1.granted and r1.calls_used == 1 and r1.calls_cap == 2
    assert r1.estimate_micros == 2000 * 3.75 + 1000 * 15  # the input at the cache-write rate: the worst case
    again = store.transaction(model_calls.reserve, CONFIG, run_id, "agent:1:1:1", "claude-sonnet-5-5", "agent", 1000, 0)
    assert again.reservation_id == r1.reservation_id  # the same attempt asked twice is one reservation
    cost, run_cost = store.transaction(model_calls.settle, CONFIG, r1.reservation_id, pricing.Usage(100, 10), "")
    assert cost == 100 * 3 + 10 * 15 == run_cost
    assert store.transaction(model_calls.settle, CONFIG, r1.reservation_id, pricing.Usage(9999, 9999), "")[0] == cost
    r2 = store.transaction(model_calls.reserve, CONFIG, run_id, "agent:1:2:1", "claude-sonnet-5-5", "agent", 1000, 0)
    assert r2.granted and r2.calls_used == 2
    fold = store.transaction(model_calls.reserve, CONFIG, run_id, "fold:1:3:1", "claude-haiku-5-5", "fold", 100, 0)
    assert fold.granted  # a fold's summary call is metered but not a model call of the run
    refused = store.transaction(model_calls.reserve, CONFIG, run_id, "agent:1:3:1", "claude-sonnet-5-5", "agent", 1, 0)
    assert not refused.granted and refused.refusal == "run_call_cap"


def test_a_reservation_never_settled_settles_at_its_estimate(store: Store) -> None:
    run_id = running_run(store)
    r = store.transaction(model_calls.reserve, CONFIG, run_id, "agent:1:1:1", "claude-sonnet-5-5", "agent", 1000, 0)
    assert store.transaction(model_calls.settle_expired, dt.timedelta(minutes=15)) == 0
    assert store.transaction(model_calls.settle_expired, dt.timedelta(0)) == 1
    call = store.transaction(lambda s: s.get(ModelCall, r.reservation_id))
    assert (call.state, call.cost_micros, call.error) == ("settled", r.estimate_micros, "expired")


def test_a_finished_run_gets_no_reservation(store: Store) -> None:
    run_id = running_run(store)
    store.transaction(run_lifecycle.cancel_run, run_id, "stop")
    store.transaction(
        lambda s: run_lifecycle.apply_run_message(
            s, "a1", run_lifecycle.RunMessage(run_id, 1, "finished", status="cancelled"), 1 << 20
        )
    )
    r = store.transaction(model_calls.reserve, CONFIG, run_id, "agent:1:1:1", "m", "agent", 1, 0)
    assert not r.granted and r.refusal == "run_not_running"


# --- meters: every budget of the Change, all or none ----------------------------------------------

ESTIMATE = 7500 + 1000 * 15  # 2,000 input tokens of sonnet at the cache-write rate, 1,000 output, in micro-dollars
COST = 2000 * 3 + 1000 * 15  # what they cost uncached


def budgeted_run(
    store: Store, budget_usd: float = 0.0, project_usd: float = 0.0, user_usd: float | None = None, tasks: int = 1
) -> str:
    def make(s) -> str:
        add_project(s, "p", "")
        s.get(Project, "p").monthly_budget_usd = project_usd
        if user_usd is not None:
            s.add(Token(name="tester", kind="user", role="submit", token_hash="h", monthly_budget_usd=user_usd))
        spec = graph.ChangeSpec(
            "p", "g", tuple(graph.TaskSpec(f"t{i}", "implement", "o") for i in range(tasks)), budget_usd=budget_usd
        )
        change_id = change_lifecycle.submit_change(s, spec, "tester")
        run = s.query(Run).filter(Run.change_id == change_id).order_by(Run.id).first()
        run_lifecycle.assign(s, run.id, "a1")
        run.tier, run.model = "sonnet", "claude-sonnet-5-5"
        return run.id

    return store.transaction(make)


def reserve(store: Store, run_id: str, key: str, budgets: BudgetConfig | None = None) -> model_calls.Reservation:
    config = dataclasses.replace(BIG, budgets=budgets or BudgetConfig())
    return store.transaction(model_calls.reserve, config, run_id, key, "claude-sonnet-5-5", "agent", 1000, 2000)


BIG = HarnessConfig(tiers={"sonnet": Tier("claude-sonnet-5-5", 100, 1000)}, default_tier="sonnet")


@pytest.mark.parametrize(
    "setup, budgets, refusal, meter",
    [
        ({}, BudgetConfig(provider_month_usd=0.05), "monthly_budget", "provider-usd:"),
        ({}, BudgetConfig(agent_calls_per_day=2), "daily_calls", "agent-calls:"),
        ({"budget_usd": 0.05}, None, "change_budget", "change-usd:"),
        ({"project_usd": 0.05}, None, "project_budget", "project-usd:p:"),
        ({"user_usd": 0.05}, None, "user_budget", "user-usd:tester:"),
    ],
)
def test_each_budget_refuses_by_its_name(
    store: Store, setup: dict, budgets: BudgetConfig | None, refusal: str, meter: str
) -> None:
    run_id = budgeted_run(store, **setup)
    assert reserve(store, run_id, "agent:1:1:1", budgets).granted
    assert reserve(store, run_id, "agent:1:2:1", budgets).granted  # 2 x 22,500 fits in 50,000
    before = store.transaction(meters.usage)
    refused = reserve(store, run_id, "agent:1:3:1", budgets)
    assert (refused.granted, refused.refusal, refused.reservation_id) == (False, refusal, "")
    assert refused.meter.startswith(meter) and refused.limit in (2, 50_000)
    assert store.transaction(meters.usage) == before  # a refusal holds nothing anywhere
    event = store.transaction(lambda s: s.query(Event).filter(Event.kind == "run.spend_limited").one())
    assert event.data["refusal"] == refusal and event.data["reserved"] == 2 * event.data["amount"]


def test_a_run_is_held_to_its_share_of_the_change_budget(store: Store) -> None:
    run_id = budgeted_run(store, budget_usd=0.1, tasks=2)  # two open Tasks: a share of 50,000
    for i in (1, 2):
        r = reserve(store, run_id, f"agent:1:{i}:1")
        assert r.granted
        store.transaction(model_calls.settle, BIG, r.reservation_id, pricing.Usage(2000, 1000), "")
    capped = reserve(store, run_id, "agent:1:3:1")  # 42,000 + 22,500 > 50,000, the Change meter has room
    assert (capped.granted, capped.refusal, capped.limit) == (False, "run_cost_cap", 50_000)
    change_meter = store.transaction(meters.usage, "change-usd:")[0]
    assert (change_meter["used"], change_meter["reserved"], change_meter["limit"]) == (2 * COST, 0, 100_000)


def test_settle_and_expiry_move_every_meter(store: Store) -> None:
    run_id = budgeted_run(store, budget_usd=1.0)
    r1 = reserve(store, run_id, "agent:1:1:1")
    held = {m["kind"]: (m["used"], m["reserved"]) for m in store.transaction(meters.usage)}
    assert held == {
        "provider_month": (0, ESTIMATE),
        "agent_calls_day": (0, 1),
        "change": (0, ESTIMATE),
        "project": (0, ESTIMATE),
        "user": (0, ESTIMATE),
    }
    cost, _ = store.transaction(model_calls.settle, CONFIG, r1.reservation_id, pricing.Usage(100, 10), "")
    store.transaction(model_calls.settle, CONFIG, r1.reservation_id, pricing.Usage(9999, 9999), "")
    settled = {m["kind"]: (m["used"], m["reserved"]) for m in store.transaction(meters.usage)}
    assert settled == {
        "provider_month": (cost, 0),
        "agent_calls_day": (1, 0),
        "change": (cost, 0),
        "project": (cost, 0),
        "user": (cost, 0),
    }
    reserve(store, run_id, "agent:1:2:1")
    assert store.transaction(model_calls.settle_expired, dt.timedelta(0)) == 1
    expired = {m["kind"]: (m["used"], m["reserved"]) for m in store.transaction(meters.usage)}
    assert expired["change"] == (cost + ESTIMATE, 0) and expired["agent_calls_day"] == (2, 0)


def test_a_settle_above_its_reservation_is_capped_and_recorded(store: Store) -> None:
    run_id = budgeted_run(store, budget_usd=0.1)
    r = reserve(store, run_id, "agent:1:1:1")
    # The report: cache writes counted on top of the whole input.
    claimed = pricing.Usage(input_tokens=2000, output_tokens=1000, cache_creation_input_tokens=2000)
    cost, run_cost = store.transaction(model_calls.settle, BIG, r.reservation_id, claimed, "")
    assert cost == run_cost == ESTIMATE  # 28,500 reported, 22,500 applied
    change_meter = store.transaction(meters.usage, "change-usd:")[0]
    assert (change_meter["used"], change_meter["reserved"]) == (ESTIMATE, 0)
    event = store.transaction(lambda s: s.query(Event).filter(Event.kind == "run.over_reservation").one())
    assert (event.data["reported"], event.data["reserved"], event.data["excess"]) == (28_500, ESTIMATE, 6_000)
    assert event.run_id == run_id
    assert store.transaction(lambda s: s.get(ModelCall, r.reservation_id)).cost_micros == ESTIMATE


def test_an_agent_reserves_and_settles_only_for_the_runs_it_holds(store: Store) -> None:
    """With an agent's token, the reservation's and the settle's own first read check tenancy: another
    token's agent, or a run whose agent is unknown, is NOT_FOUND naming the field, and nothing is held."""
    run_id = running_run(store)
    model = "claude-sonnet-5-5"

    def reserve(token_id: int, key: str = "agent:1:1:1") -> model_calls.Reservation:
        return store.transaction(
            lambda s: model_calls.reserve(s, CONFIG, run_id, key, model, "agent", 1000, 0, token_id=token_id)
        )

    with pytest.raises(NotFound, match="no run") as caught:
        reserve(7)  # a1 is not registered yet
    assert caught.value.field == "run_id"
    store.transaction(lambda s: s.add_all([Agent(name="a1", token_id=7), Agent(name="thief", token_id=8)]))
    with pytest.raises(NotFound) as caught:
        reserve(8, key="")  # tenancy before the arguments, as before
    assert caught.value.field == "run_id"
    assert store.read_now(lambda s: s.query(ModelCall).count()) == 0
    r = reserve(7)
    assert r.granted
    settle = model_calls.settle_for_agent
    with pytest.raises(NotFound, match="no reservation") as caught:
        store.transaction(settle, CONFIG, r.reservation_id, pricing.Usage(100, 10), "", 8)
    assert caught.value.field == "reservation_id"
    assert store.read_now(lambda s: s.get(ModelCall, r.reservation_id).state) == "reserved"
    ran, cost, spent = store.transaction(settle, CONFIG, r.reservation_id, pricing.Usage(100, 10), "", 7)
    assert (ran, cost, spent) == (run_id, 450, 450)
