"""What happens after a failed run (seed 000, Escalation): retry, escalate, replan, stop or fail. Pure.

`decide` applies `next_step` and then `limit_attempts` to the Task's failures
in its current attempt window (`window`). Two intelligence failures at one
tier move the Task up one tier, and so does one run that outgrew its context
window; a transport failure retries once at the same tier; a budget failure
stops the Task at once; at most 2 attempts per tier.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import Counter
from collections.abc import Sequence

TIERS = ("haiku", "sonnet", "opus")
"""Tiers from cheapest to strongest."""

TRANSPORT = frozenset({"rate_limited", "timeout", "transient", "agent_lost", "agent_restarted", "supervisor_lost"})
"""The run never got a fair chance: retried once at the same tier, never escalated."""
BUDGET = frozenset({"spend_limited", "change_budget", "project_budget", "user_budget", "monthly_budget", "daily_calls"})
"""A budget refused the run's call: the Task stops at once with that budget as its limit."""
OUTGREW = frozenset({"compaction_exhausted"})
"""The run's conversation outgrew the context window even after folding: the same tier would most likely grow
the same way, so it moves up at once (replan at the top) instead of retrying there."""
INTELLIGENCE = frozenset({"failed", "no_outcome", "run_call_cap", "run_cost_cap"}) | OUTGREW
"""The tier was not good enough; reaching a per-run cap counts as a failure at the tier."""
TERMINAL = frozenset({"cancelled", "dependency_merge_conflict", "setup_failed"})
"""No other attempt can help: the Task fails at once (a failed setup is the project's, not the model's)."""
OUTCOMES = TRANSPORT | BUDGET | INTELLIGENCE | TERMINAL | {"completed"}

ACTIONS = ("retry", "escalate", "replan", "stop", "fail")
RETRY_DELAY_SECONDS = 5.0
"""A retry or an escalation starts this long after the failed run."""
MAX_ATTEMPTS_PER_TIER = 2
ATTEMPT_LIMIT = "max_attempts_per_tier"
"""The budget-stop limit of a replan."""


def _moment(at: str | dt.datetime) -> dt.datetime:
    if isinstance(at, str):
        at = dt.datetime.fromisoformat(at)
    elif not isinstance(at, dt.datetime):
        raise TypeError(f"at must be an ISO 8601 string or a datetime, not {type(at).__name__}")
    return at if at.tzinfo is not None else at.replace(tzinfo=dt.UTC)  # naive means UTC


@dataclasses.dataclass(frozen=True)
class Policy:
    """The configuration the escalation decision follows; the control plane's comes from [anthropic]."""

    allow_opus: bool = False
    """Whether a failed sonnet attempt may escalate to opus."""
    retry_delay_seconds: float = RETRY_DELAY_SECONDS
    """How long after the failed run a retry or an escalation starts (`--retry-delay-seconds`)."""


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One ended run of a Task."""

    tier: str
    """The routed tier: "haiku", "sonnet" or "opus" (opus runs on Sonnet while Opus is off)."""
    outcome: str
    """How the run ended: a harness outcome, a transport failure or the name of the budget that refused it."""
    at: str | dt.datetime
    """When it ended; orders the history (naive times are UTC)."""

    def __post_init__(self) -> None:
        if self.tier not in TIERS:
            raise ValueError(f"unknown tier {self.tier!r}")
        if self.outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {self.outcome!r}")
        _moment(self.at)


@dataclasses.dataclass(frozen=True)
class Step:
    """What the Task does next."""

    action: str
    """"retry", "escalate", "replan" (a budget stop a person resolves), "stop" (a budget stop) or "fail"."""
    tier: str = ""
    """The tier of the next attempt; "" when there is none."""
    reason: str = ""
    """Why, e.g. "two_failures_at_haiku", "max_attempts_at_sonnet", "transport_retry", "budget_stop"."""
    limit: str = ""
    """For "replan" and "stop": the exact limit the Change is budget_blocked on."""
    delay_seconds: float = 0.0
    """How long after the failed run the next attempt starts."""
    escalated_from: str = ""
    escalated_to: str = ""

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"unknown action {self.action!r}")


def _retry(tier: str, reason: str) -> Step:
    return Step("retry", tier, reason, delay_seconds=RETRY_DELAY_SECONDS)


def _escalate(origin: str, target: str, reason: str) -> Step:
    return Step(
        "escalate", target, reason, delay_seconds=RETRY_DELAY_SECONDS, escalated_from=origin, escalated_to=target
    )


def _above(tier: str, allow_opus: bool) -> str | None:
    """The next tier up, or None at the top (sonnet is the top while Opus is off)."""
    if tier == "haiku":
        return "sonnet"
    if tier == "sonnet" and allow_opus:
        return "opus"
    return None


def _ordered(history: Sequence[Attempt]) -> list[Attempt]:
    if not history:
        raise ValueError("there is no failed run to decide on")
    attempts = sorted(history, key=lambda a: _moment(a.at))  # stable: equal times keep the given order
    if attempts[-1].outcome == "completed":
        raise ValueError("the latest run completed; there is nothing to decide")
    return attempts


def next_step(history: Sequence[Attempt], allow_opus: bool) -> Step:
    """The seed's state machine over the window's failures (newest last), before the attempt limit."""
    attempts = _ordered(history)
    latest = attempts[-1]
    if latest.outcome in TERMINAL:
        return Step("fail", reason=latest.outcome)
    if latest.outcome in BUDGET:
        return Step("stop", reason="budget_stop", limit=latest.outcome)
    if latest.outcome in TRANSPORT:
        if len(attempts) > 1 and attempts[-2].outcome in TRANSPORT:
            return Step("fail", reason="transport_twice")
        return _retry(latest.tier, "transport_retry")
    failures = sum(1 for a in attempts if a.tier == latest.tier and a.outcome in INTELLIGENCE)
    if failures < 2 and latest.outcome not in OUTGREW:
        return _retry(latest.tier, f"first_failure_at_{latest.tier}")
    reason = f"{latest.outcome}_at_{latest.tier}" if latest.outcome in OUTGREW else f"two_failures_at_{latest.tier}"
    target = _above(latest.tier, allow_opus)
    if target is None:
        return Step("replan", reason=reason, limit=ATTEMPT_LIMIT)
    return _escalate(latest.tier, target, reason)


def limit_attempts(
    step: Step, history: Sequence[Attempt], max_per_tier: int = MAX_ATTEMPTS_PER_TIER, *, allow_opus: bool = False
) -> Step:
    """Cap `step` at `max_per_tier` attempts per tier, counting every run at that tier in the window.

    A retry at a full tier escalates (replan at the top); a transport retry at
    a full tier stops the Task without escalation. An attempt-limit stop whose
    latest failure is run_cost_cap is a request budget stop (change_budget).
    `allow_opus` says whether sonnet may escalate to opus (off by default).
    """
    attempts = _ordered(history)
    latest = attempts[-1]
    used = Counter(a.tier for a in attempts)
    if step.action == "retry" and used[step.tier] >= max_per_tier:
        reason = f"max_attempts_at_{step.tier}"
        if latest.outcome in TRANSPORT:
            step = Step("stop", reason=reason, limit=ATTEMPT_LIMIT)
        else:
            step = _climb(step.tier, step.tier, reason, used, max_per_tier, allow_opus)
    elif step.action == "escalate" and used[step.tier] >= max_per_tier:
        step = _climb(step.escalated_from, step.tier, f"max_attempts_at_{step.tier}", used, max_per_tier, allow_opus)
    if step.limit == ATTEMPT_LIMIT and latest.outcome == "run_cost_cap":
        # Runs that keep overspending their share need a bigger Change budget, not a new plan.
        return dataclasses.replace(step, action="stop", limit="change_budget")
    return step


def _climb(origin: str, full: str, reason: str, used: Counter[str], max_per_tier: int, allow_opus: bool) -> Step:
    """Escalate from `origin` to the first tier above `full` with attempts left, or replan at the top."""
    target = _above(full, allow_opus)
    while target is not None and used[target] >= max_per_tier:
        target = _above(target, allow_opus)
    if target is None:
        return Step("replan", reason=reason, limit=ATTEMPT_LIMIT)
    return _escalate(origin, target, reason)


def decide(history: Sequence[Attempt], allow_opus: bool, retry_delay_seconds: float = RETRY_DELAY_SECONDS) -> Step:
    """The next step after the latest failed run: `next_step`, then `limit_attempts`; a retry or an
    escalation starts `retry_delay_seconds` after the failed run."""
    step = limit_attempts(next_step(history, allow_opus), history, allow_opus=allow_opus)
    if step.action in ("retry", "escalate"):
        return dataclasses.replace(step, delay_seconds=retry_delay_seconds)
    return step


def receipt_reason(step: Step) -> str:
    """What the next run's Decision Receipt records as its escalation; "" when the step is not one."""
    return step.reason if step.action == "escalate" else ""


def window(history_with_resets: Sequence[Attempt], reset_at: str | dt.datetime | None) -> list[Attempt]:
    """The attempts after the last budget raise (`tasks.attempts_reset_at`), oldest first.

    A run that ended at the very moment of the raise belongs to the old window.
    """
    attempts = sorted(history_with_resets, key=lambda a: _moment(a.at))
    if reset_at is None:
        return attempts
    start = _moment(reset_at)
    return [a for a in attempts if _moment(a.at) > start]
