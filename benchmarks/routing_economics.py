#!/usr/bin/env python3
"""Cost per solved Task under each routing policy, measured by simulation (issue 13). Simulated figures.

    python benchmarks/routing_economics.py [--tasks N] [--seed S] [--budget-usd USD]
        [--classifier-accuracy A] [--tasks-per-day D] [--retry-correlation R] [--png PATH] [--sweep]

Every policy runs the same synthetic suite (same seed) through Drover's real decision code in
process: `tiers.decide_tier` (rules, floor, opus gating), `needs_classifier`, `classifier.classify`
and `parse_classifier` (low confidence and the daily cap abstain), `tiers.escalated` and
`escalation.decide`, `HarnessConfig.tier_class` + `members.select` (member and model),
`pricing.price_for` / `cost_micros` / `worst_case_micros` for every call, `meters.daily_calls_meter`.
Simulated, because they need a network or a database: the classifier's model (a fake
CompletionModel answering from --classifier-accuracy), the agent's runs (solved or not, calls,
tokens), the meter store (a dict per day key), and `model_calls._hold`'s run-share check, redone
in arithmetic: each Task is a one-Task Change, and a call is refused (run_cost_cap) when run cost +
estimate > budget - the Task's earlier runs' spend. No transport failures, no quota waits.

Assumptions (defaults; flags change the starred ones):
- Traits: complexity low/medium/high 39/52/9 % (SWE-bench Verified's difficulty annotations:
  <15 min, 15 min-1 h, >1 h); size, risk, kind and flags as in TRAITS below (assumed); 10 % of
  Tasks leave each of size, complexity and risk unknown to routing ("").
- Solve chance per attempt (SOLVE): public SWE-bench Verified scores of the models whose list prices
  Drover's table carries (Haiku 4.5 73.3 %, Sonnet 4.5 77.2 %, Opus 4.5 80.9 %), spread over the
  complexities by a logit offset of +1.3 / 0 / -1.6 (assumed) so the 39/52/9 mix gives the score.
- *Retries are correlated (--retry-correlation 0.5, assumed): with that chance an attempt reuses the
  Task's own difficulty draw (shared by all tiers), else draws afresh.
- Calls per attempt: geometric, mean 8 at every tier (assumed), cut by Drover's per-run caps
  (haiku 16, sonnet/opus 32: run_call_cap); 15,000 input and 1,000 output tokens a call (assumed),
  priced by Drover's table (haiku 1/5, sonnet 3/15, opus 5/25 USD per MTok), no cache.
- *Classifier: right (the cheapest tier that solves this Task) with --classifier-accuracy 0.75
  (assumed), else half the time one tier off, half a confidence < 0.6 (abstains); its haiku call
  (chars/4 tokens) is added to the Task's cost, though Drover does not meter it against the budget.
- *Classifier cap: Drover's 200 calls a UTC day; at --tasks-per-day 250 (~85 asks a day) it never
  binds; all 1,000 Tasks in one day (--tasks-per-day 1000) abstain "capped" on 133 of 333 asks.
- *--budget-usd 3 per Change. "always X" and the no-escalation policies keep escalation's retry at
  the same tier (2 attempts a tier) but end the Task where it would escalate.

Columns: success (solved / Tasks), cost per solved Task (all spend / solved), mean attempts (runs a
Task), budget stops (Tasks ended by the Change budget), p95 of one Task's cost. --png: cost per solved
against success; --sweep: scaled haiku/sonnet solve chances, shipped vs always-sonnet at each.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime as dt
import json
import math
import pathlib
import random
import sys
import time
from collections.abc import Mapping
from typing import Any

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from controlplane.config import HarnessConfig
from controlplane.dispatch import classifier
from controlplane.dispatch.own_model import MeterRefused
from controlplane.domain import escalation, members, pricing, tiers
from controlplane.store import meters
from drover.core.model import ModelReply
from drover.core.usage import Usage

COMPLEXITIES = ("low", "medium", "high")
SOLVE: Mapping[str, tuple[float, ...]] = {
    "haiku": (0.890, 0.689, 0.309),
    "sonnet": (0.912, 0.738, 0.363),
    "opus": (0.930, 0.785, 0.424),
}
CALLS_MEAN = 8.0
TOKENS = (15_000, 1_000)
TRAITS: Mapping[str, tuple[tuple[str, ...], tuple[float, ...]]] = {
    "complexity": (COMPLEXITIES, (0.39, 0.52, 0.09)),
    "size": (("small", "medium", "large"), (0.40, 0.40, 0.20)),
    "risk": (("low", "medium", "high"), (0.50, 0.35, 0.15)),
    "kind": (
        ("implement", "fix", "test", "refactor", "summarize", "transform", "plan", "migrate"),
        (0.40, 0.20, 0.10, 0.10, 0.05, 0.03, 0.05, 0.07),
    ),
}
FLAGS = {"billing": 0.05, "authorization": 0.08, "design_conflict": 0.03, "destructive_migration": 0.2}  # last: migrate
UNKNOWN = 0.10
START = dt.datetime(2030, 1, 7, 9, tzinfo=dt.UTC)
Blocks = list[dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class Params:
    solve: Mapping[str, tuple[float, ...]] = dataclasses.field(default_factory=lambda: dict(SOLVE))
    classifier_accuracy: float = 0.75
    budget_usd: float = 3.0
    tasks_per_day: int = 250
    retry_correlation: float = 0.5

    def scaled(self, haiku: float, sonnet: float) -> Params:
        scale = {"haiku": haiku, "sonnet": sonnet, "opus": 1.0}
        solve = {t: tuple(min(1.0, p * scale[t]) for p in ps) for t, ps in self.solve.items()}
        return dataclasses.replace(self, solve=solve)


@dataclasses.dataclass(frozen=True)
class SimTask:
    traits: tiers.TaskTraits
    complexity: int
    """The true complexity (index into COMPLEXITIES), known to the simulation even when routing sees ""."""
    difficulty: float
    objective: str


@dataclasses.dataclass(frozen=True)
class Policy:
    name: str
    fixed: str = ""
    classifier: bool = False
    escalate: bool = False
    allow_opus: bool = False


POLICIES = (
    Policy("always haiku", fixed="haiku"),
    Policy("always sonnet", fixed="sonnet"),
    Policy("always opus", fixed="opus", allow_opus=True),
    Policy("rules only"),
    Policy("rules + classifier", classifier=True),
    Policy("shipped: rules+cls+esc", classifier=True, escalate=True),
    Policy("shipped, allow_opus", classifier=True, escalate=True, allow_opus=True),
)
SHIPPED, SONNET = POLICIES[5], POLICIES[1]


@dataclasses.dataclass(frozen=True)
class Outcome:
    solved: bool
    cost_micros: int
    attempts: int
    budget_stop: bool


def _pick(r: random.Random, trait: str) -> str:
    values, weights = TRAITS[trait]
    return r.choices(values, weights)[0]


def make_suite(n: int, seed: int) -> list[SimTask]:
    """n Tasks with traits drawn from TRAITS and FLAGS; routing sees a trait as "" with chance UNKNOWN."""
    r = random.Random(seed)
    suite = []
    for _ in range(n):
        kind, size, complexity, risk = (_pick(r, t) for t in ("kind", "size", "complexity", "risk"))
        seen = {k: ("" if r.random() < UNKNOWN else v) for k, v in (("size", size), ("c", complexity), ("risk", risk))}
        conflict = r.random() < FLAGS["design_conflict"]
        traits = tiers.TaskTraits(
            kind=kind,
            size=seen["size"],
            complexity=seen["c"],
            risk=seen["risk"],
            resources=("api", "db") if conflict else ("api",),
            billing=r.random() < FLAGS["billing"],
            authorization=r.random() < FLAGS["authorization"],
            authorization_trivial=seen["size"] == "small" and seen["risk"] == "low",  # as router.traits_of
            design_conflict=conflict,
            destructive_migration=kind == "migrate" and r.random() < FLAGS["destructive_migration"],
        )
        objective = f"{kind} a {size} change. " + "Details of the work. " * r.randint(10, 150)
        suite.append(SimTask(traits, COMPLEXITIES.index(complexity), r.random(), objective))
    return suite


class SimClassifierModel:
    """The classifier's haiku model, simulated: answers `reply`; usage is chars/4 of what it was sent.
    With `refused` set it is the metered model a full meter refuses (own_model.MeterRefused, no call)."""

    def __init__(self) -> None:
        self.reply = ""
        self.usage = Usage()
        self.refused = ""

    async def complete(self, *, system: Blocks, tools: Blocks, messages: Blocks, max_tokens: int) -> ModelReply:
        if self.refused:
            raise MeterRefused(self.refused)
        chars = sum(len(b["text"]) for b in system) + sum(len(m["content"]) for m in messages)
        self.usage = Usage(input_tokens=chars // 4, output_tokens=len(self.reply) // 4 + 1)
        return ModelReply([{"type": "text", "text": self.reply}], "end_turn", self.usage, 1)


class Simulation:
    """One policy over one suite: Drover's decisions, simulated runs, per-Task cost in micro-dollars."""

    def __init__(self, params: Params, seed: int) -> None:
        self.params, self.seed = params, seed
        self.harness = HarnessConfig()
        self.model = SimClassifierModel()
        self.calls_by_day: dict[str, int] = {}
        self.loop = asyncio.new_event_loop()
        self.haiku_price = pricing.price_for(self.harness.tiers["haiku"].model, self.harness.prices)

    def close(self) -> None:
        self.loop.close()

    def solves(self, task: SimTask, tier: str) -> float:
        return self.params.solve[tier][task.complexity]

    def right_tier(self, task: SimTask) -> str:
        """What a perfect classifier answers: the cheapest tier that would solve this Task."""
        return next((t for t in tiers.TIERS if task.difficulty < self.solves(task, t)), tiers.OPUS)

    def verdict(self, task: SimTask, r: random.Random) -> str:
        right = tiers.TIERS.index(self.right_tier(task))
        roll, confidence = r.random(), 0.6 + 0.4 * r.random()
        if roll >= self.params.classifier_accuracy:
            if r.random() < 0.5:
                confidence = 0.59 * r.random()  # abstains: low_confidence
            else:
                right = 1 + r.choice((-1, 1)) if right == 1 else 1  # one tier off
        return json.dumps({"tier": tiers.TIERS[right], "confidence": round(confidence, 3)})

    def classify(self, task: SimTask, index: int) -> tuple[tiers.ClassifierAnswer, int]:
        """The real classifier call over the fake model and a dict-backed daily meter; answer and its cost."""
        day = START + dt.timedelta(days=index // max(self.params.tasks_per_day, 1))
        cap = self.harness.budgets.classifier_calls_per_day
        key = meters.daily_calls_meter(meters.CLASSIFIER_CALLS_DAY, day, cap).key
        made = not cap or self.calls_by_day.get(key, 0) < cap
        if made:
            self.calls_by_day[key] = self.calls_by_day.get(key, 0) + 1
        self.model.refused = "" if made else meters.CLASSIFIER_CALLS_DAY
        self.model.reply = self.verdict(task, random.Random(f"{self.seed}:{index}:classifier"))
        answer = self.loop.run_until_complete(classifier.classify(self.model, task.traits, task.objective))
        return answer, pricing.cost_micros(self.model.usage, self.haiku_price) if made else 0

    def first_tier(self, task: SimTask, policy: Policy, index: int) -> tuple[str, str, int]:
        """The first attempt's tier, the tier whose model runs it, and the classifier's cost."""
        if policy.fixed:
            return policy.fixed, tiers.model_tier(policy.fixed, policy.allow_opus), 0
        answer, cost = None, 0
        if policy.classifier and tiers.needs_classifier(task.traits):
            answer, cost = self.classify(task, index)
        decision = tiers.decide_tier(task.traits, answer, policy.allow_opus)
        return decision.tier, decision.model_tier, cost

    def run(self, task: SimTask, runs_on: str, left: int, r: random.Random) -> tuple[str, int]:
        """One simulated run on the member `members.select` picks: its outcome and exact cost."""
        h, needs = self.harness, task.traits.required_capabilities
        chosen = members.select(h.tier_class(runs_on), needs, (), {}, {}, {}, h.quota, START).chosen
        assert chosen is not None, runs_on
        price = pricing.price_for(chosen.model, self.harness.prices)
        tier = self.harness.tiers[runs_on]
        estimate = pricing.worst_case_micros(TOKENS[0], tier.max_output_tokens, price)
        per_call = pricing.cost_micros(Usage(input_tokens=TOKENS[0], output_tokens=TOKENS[1]), price)
        draw = task.difficulty if r.random() < self.params.retry_correlation else r.random()
        solved = draw < self.solves(task, runs_on)
        calls = 1 + int(math.log(1.0 - r.random()) / math.log(1.0 - 1.0 / CALLS_MEAN))
        cost = 0
        for _ in range(min(calls, tier.max_calls)):
            if self.params.budget_usd > 0 and cost + estimate > left:
                return "run_cost_cap", cost
            cost += per_call
        if calls > tier.max_calls:
            return "run_call_cap", cost
        return ("completed" if solved else "failed"), cost

    def task(self, task: SimTask, policy: Policy, index: int) -> Outcome:
        """Attempts until solved or `escalation.decide` ends the Task."""
        tier, runs_on, spent = self.first_tier(task, policy, index)
        budget = meters.usd_micros(self.params.budget_usd)
        history: list[escalation.Attempt] = []
        metered = 0  # what the Change meter saw: the runs, not the classifier
        while True:
            r = random.Random(f"{self.seed}:{index}:{len(history)}")
            outcome, cost = self.run(task, runs_on, budget - metered, r)
            spent, metered = spent + cost, metered + cost
            if outcome == "completed":
                return Outcome(True, spent, len(history) + 1, False)
            history.append(escalation.Attempt(tier, outcome, START + dt.timedelta(minutes=len(history))))
            step = escalation.decide(history, policy.allow_opus)
            if step.action not in ("retry", "escalate") or (step.action == "escalate" and not policy.escalate):
                stopped = step.limit in escalation.BUDGET or outcome == "run_cost_cap"
                return Outcome(False, spent, len(history), stopped)
            tier = step.tier
            later = dataclasses.replace(task.traits, attempt=len(history) + 1)
            runs_on = tiers.escalated(later, tier, policy.allow_opus).model_tier


@dataclasses.dataclass(frozen=True)
class Row:
    policy: str
    success: float
    cost_per_solved: float
    mean_attempts: float
    budget_stops: int
    p95: float


def simulate(suite: list[SimTask], policy: Policy, params: Params, seed: int) -> Row:
    sim = Simulation(params, seed)
    try:
        outcomes = [sim.task(task, policy, i) for i, task in enumerate(suite)]
    finally:
        sim.close()
    solved = sum(o.solved for o in outcomes)
    costs = sorted(o.cost_micros / 1e6 for o in outcomes)
    return Row(
        policy.name,
        solved / len(outcomes),
        sum(costs) / solved if solved else math.inf,
        sum(o.attempts for o in outcomes) / len(outcomes),
        sum(o.budget_stop for o in outcomes),
        costs[min(len(costs) - 1, math.ceil(0.95 * len(costs)) - 1)],
    )


def print_table(rows: list[Row]) -> None:
    print(f"{'policy':<24} {'success':>8} {'$/solved':>9} {'attempts':>9} {'budget stops':>13} {'p95 $/Task':>11}")
    for row in rows:
        print(
            f"{row.policy:<24} {row.success:>7.1%} {row.cost_per_solved:>9.3f} {row.mean_attempts:>9.2f} "
            f"{row.budget_stops:>13} {row.p95:>11.3f}"
        )


def write_png(rows: list[Row], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for row in rows:
        ax.scatter(row.success * 100, row.cost_per_solved)
        ax.annotate(row.policy, (row.success * 100, row.cost_per_solved), textcoords="offset points", xytext=(5, 4))
    ax.set_xlabel("success rate, % of Tasks solved")
    ax.set_ylabel("cost per solved Task, USD")
    ax.set_title("Drover routing policies (simulated)")
    ax.grid(alpha=0.3)
    ax.margins(x=0.2, y=0.1)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}")


def sweep(suite: list[SimTask], params: Params, seed: int) -> None:
    """Scale haiku's and sonnet's solve chances; shipped vs always-sonnet at each setting."""
    print("\nsweep: solve chances scaled (opus unchanged); shipped vs always-sonnet")
    print(f"{'haiku x':>7} {'sonnet x':>8} {'shipped $/solved':>17} {'sonnet $/solved':>16} {'ratio':>6}  success")
    for sonnet_scale in (1.0, 0.85):
        for haiku_scale in (1.1, 1.0, 0.8, 0.6, 0.4, 0.2, 0.0):
            scaled = params.scaled(haiku_scale, sonnet_scale)
            ship, son = (simulate(suite, p, scaled, seed) for p in (SHIPPED, SONNET))
            cheaper = ship.cost_per_solved < son.cost_per_solved and ship.success >= son.success - 0.005
            verdict = "pays off" if cheaper else "does not pay off"
            print(
                f"{haiku_scale:>7.2f} {sonnet_scale:>8.2f} {ship.cost_per_solved:>17.3f} {son.cost_per_solved:>16.3f} "
                f"{ship.cost_per_solved / son.cost_per_solved:>6.2f}  {ship.success:.1%} vs {son.success:.1%}  "
                f"{verdict}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--budget-usd", type=float, default=Params.budget_usd, help="per Change; 0: no limit")
    parser.add_argument("--classifier-accuracy", type=float, default=Params.classifier_accuracy)
    parser.add_argument("--tasks-per-day", type=int, default=Params.tasks_per_day)
    parser.add_argument("--retry-correlation", type=float, default=Params.retry_correlation)
    parser.add_argument("--png", help="write a scatter of cost per solved Task against success rate")
    parser.add_argument("--sweep", action="store_true", help="also scale haiku's and sonnet's solve chances")
    args = parser.parse_args()
    names = ("classifier_accuracy", "budget_usd", "tasks_per_day", "retry_correlation")
    params = Params(**{name: getattr(args, name) for name in names})
    started = time.perf_counter()
    suite = make_suite(args.tasks, args.seed)
    print(
        f"SIMULATED: {args.tasks} Tasks, seed {args.seed}, budget ${args.budget_usd:g} per Change, classifier "
        f"accuracy {args.classifier_accuracy:g}, {args.tasks_per_day} Tasks a day, retry correlation "
        f"{args.retry_correlation:g}"
    )
    rows = [simulate(suite, policy, params, args.seed) for policy in POLICIES]
    print_table(rows)
    if args.png:
        write_png(rows, args.png)
    if args.sweep:
        sweep(suite, params, args.seed)
    ship, son = rows[POLICIES.index(SHIPPED)], rows[POLICIES.index(SONNET)]
    print(f"({time.perf_counter() - started:.1f} s)")
    print(
        f"shipped vs always-sonnet: cost per solved x{ship.cost_per_solved / son.cost_per_solved:.2f} "
        f"success {ship.success:.1%} vs {son.success:.1%}"
    )


if __name__ == "__main__":
    main()
