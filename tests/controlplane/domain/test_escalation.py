"""Escalation after a failed run (seed 000), as tables over failure histories."""

from __future__ import annotations

import datetime as dt

import pytest

from controlplane.domain.escalation import (
    Attempt,
    Step,
    decide,
    limit_attempts,
    next_step,
    receipt_reason,
    window,
)

pytestmark = pytest.mark.timeout(10)

T0 = dt.datetime(2025, 3, 1, 12, 0, tzinfo=dt.UTC)


def _history(*runs: str) -> list[Attempt]:
    """Runs written "tier:outcome", oldest first, one minute apart."""
    out = []
    for i, run in enumerate(runs):
        tier, outcome = run.split(":")
        out.append(Attempt(tier, outcome, T0 + dt.timedelta(minutes=i)))
    return out


def _summary(step: Step) -> tuple[str, str, str, str]:
    return step.action, step.tier, step.reason, step.limit


# (failures in the window, allow_opus, (action, next tier, reason, limit)) for decide().
DECISIONS = [
    # intelligence failures: retry once, the second escalates
    (["haiku:failed"], False, ("retry", "haiku", "first_failure_at_haiku", "")),
    (["haiku:failed", "haiku:failed"], False, ("escalate", "sonnet", "two_failures_at_haiku", "")),
    (["haiku:failed", "haiku:no_outcome"], True, ("escalate", "sonnet", "two_failures_at_haiku", "")),
    (["haiku:failed", "haiku:failed", "sonnet:failed"], False, ("retry", "sonnet", "first_failure_at_sonnet", "")),
    (["sonnet:failed", "sonnet:failed"], False, ("replan", "", "two_failures_at_sonnet", "max_attempts_per_tier")),
    (["sonnet:failed", "sonnet:failed"], True, ("escalate", "opus", "two_failures_at_sonnet", "")),
    (["opus:failed"], False, ("retry", "opus", "first_failure_at_opus", "")),
    (["opus:failed"], True, ("retry", "opus", "first_failure_at_opus", "")),
    (["opus:failed", "opus:failed"], True, ("replan", "", "two_failures_at_opus", "max_attempts_per_tier")),
    (["opus:failed", "opus:failed"], False, ("replan", "", "two_failures_at_opus", "max_attempts_per_tier")),
    # a run that outgrew its context window even after folding moves up at once (replan at the top)
    (["haiku:compaction_exhausted"], False, ("escalate", "sonnet", "compaction_exhausted_at_haiku", "")),
    (["sonnet:compaction_exhausted"], True, ("escalate", "opus", "compaction_exhausted_at_sonnet", "")),
    (["sonnet:compaction_exhausted"], False, ("replan", "", "compaction_exhausted_at_sonnet", "max_attempts_per_tier")),
    (["opus:compaction_exhausted"], True, ("replan", "", "compaction_exhausted_at_opus", "max_attempts_per_tier")),
    (["haiku:failed", "sonnet:compaction_exhausted"], True, ("escalate", "opus", "compaction_exhausted_at_sonnet", "")),
    # and counts as a failure at its tier for a later one there
    (
        ["sonnet:compaction_exhausted", "opus:failed", "sonnet:failed"],
        True,
        ("escalate", "opus", "two_failures_at_sonnet", ""),
    ),
    # per-run caps count as failures at the tier
    (["haiku:run_call_cap"], False, ("retry", "haiku", "first_failure_at_haiku", "")),
    (["haiku:run_call_cap", "haiku:run_call_cap"], False, ("escalate", "sonnet", "two_failures_at_haiku", "")),
    (["sonnet:no_outcome", "sonnet:run_cost_cap"], True, ("escalate", "opus", "two_failures_at_sonnet", "")),
    # the attempt limit stops a Task whose latest failure is run_cost_cap: a request budget stop
    (["sonnet:failed", "sonnet:run_cost_cap"], False, ("stop", "", "two_failures_at_sonnet", "change_budget")),
    (["opus:run_cost_cap", "opus:run_cost_cap"], True, ("stop", "", "two_failures_at_opus", "change_budget")),
    (["sonnet:timeout", "sonnet:run_cost_cap"], False, ("stop", "", "max_attempts_at_sonnet", "change_budget")),
    (
        ["sonnet:run_cost_cap", "sonnet:failed"],
        False,
        ("replan", "", "two_failures_at_sonnet", "max_attempts_per_tier"),
    ),
    # transport failures retry once at the same tier; two in a row fail the Task
    (["haiku:rate_limited"], False, ("retry", "haiku", "transport_retry", "")),
    (["sonnet:agent_lost"], False, ("retry", "sonnet", "transport_retry", "")),
    (["haiku:timeout", "haiku:transient"], False, ("fail", "", "transport_twice", "")),
    (
        ["haiku:failed", "haiku:failed", "sonnet:agent_restarted", "sonnet:supervisor_lost"],
        False,
        ("fail", "", "transport_twice", ""),
    ),
    # transport then intelligence: the tier is full, so the retry becomes an escalation
    (["haiku:timeout", "haiku:failed"], False, ("escalate", "sonnet", "max_attempts_at_haiku", "")),
    (["sonnet:rate_limited", "sonnet:failed"], True, ("escalate", "opus", "max_attempts_at_sonnet", "")),
    (
        ["sonnet:rate_limited", "sonnet:failed"],
        False,
        ("replan", "", "max_attempts_at_sonnet", "max_attempts_per_tier"),
    ),
    (["opus:transient", "opus:failed"], True, ("replan", "", "max_attempts_at_opus", "max_attempts_per_tier")),
    # a transport retry at a tier with no attempts left stops without escalation
    (["haiku:failed", "haiku:timeout"], False, ("stop", "", "max_attempts_at_haiku", "max_attempts_per_tier")),
    (["sonnet:failed", "sonnet:rate_limited"], True, ("stop", "", "max_attempts_at_sonnet", "max_attempts_per_tier")),
    # budget failures stop at once, never escalate, and name the budget
    (["haiku:spend_limited"], True, ("stop", "", "budget_stop", "spend_limited")),
    (["haiku:failed", "haiku:spend_limited"], True, ("stop", "", "budget_stop", "spend_limited")),
    (["sonnet:rate_limited", "sonnet:daily_calls"], True, ("stop", "", "budget_stop", "daily_calls")),
    (["opus:monthly_budget"], True, ("stop", "", "budget_stop", "monthly_budget")),
    (["haiku:change_budget"], False, ("stop", "", "budget_stop", "change_budget")),
    (["haiku:project_budget"], False, ("stop", "", "budget_stop", "project_budget")),
    (["haiku:user_budget"], False, ("stop", "", "budget_stop", "user_budget")),
    # a budget failure between two transport failures breaks the row
    (["haiku:timeout", "haiku:spend_limited", "sonnet:timeout"], False, ("retry", "sonnet", "transport_retry", "")),
    # nothing helps a cancelled run or a merge conflict
    (["haiku:cancelled"], True, ("fail", "", "cancelled", "")),
    (["haiku:dependency_merge_conflict"], True, ("fail", "", "dependency_merge_conflict", "")),
    # a failed setup is the project's, not the model's: a bigger model would fail the same way
    (["haiku:setup_failed"], True, ("fail", "", "setup_failed", "")),
    (["sonnet:failed", "sonnet:setup_failed"], True, ("fail", "", "setup_failed", "")),
]


@pytest.mark.parametrize("runs, allow_opus, expected", DECISIONS)
def test_decide(runs: list[str], allow_opus: bool, expected: tuple) -> None:
    assert _summary(decide(_history(*runs), allow_opus)) == expected


# (failures, allow_opus, next_step alone, after limit_attempts): the limit changes only these.
LIMITED = [
    (
        ["haiku:timeout", "haiku:failed"],
        False,
        ("retry", "haiku", "first_failure_at_haiku", ""),
        ("escalate", "sonnet", "max_attempts_at_haiku", ""),
    ),
    (
        ["haiku:failed", "haiku:timeout"],
        False,
        ("retry", "haiku", "transport_retry", ""),
        ("stop", "", "max_attempts_at_haiku", "max_attempts_per_tier"),
    ),
    (
        ["opus:failed", "opus:run_cost_cap"],
        True,
        ("replan", "", "two_failures_at_opus", "max_attempts_per_tier"),
        ("stop", "", "two_failures_at_opus", "change_budget"),
    ),
    (
        ["haiku:failed"],
        False,
        ("retry", "haiku", "first_failure_at_haiku", ""),
        ("retry", "haiku", "first_failure_at_haiku", ""),
    ),
]


@pytest.mark.parametrize("runs, allow_opus, before, after", LIMITED)
def test_limit_attempts_after_next_step(runs: list[str], allow_opus: bool, before: tuple, after: tuple) -> None:
    history = _history(*runs)
    step = next_step(history, allow_opus)
    assert _summary(step) == before
    assert _summary(limit_attempts(step, history, allow_opus=allow_opus)) == after


def test_a_larger_attempt_limit_keeps_retrying_a_transport_failure() -> None:
    history = _history("haiku:failed", "haiku:timeout")
    step = limit_attempts(next_step(history, False), history, max_per_tier=3)
    assert _summary(step) == ("retry", "haiku", "transport_retry", "")


def test_an_escalation_skips_a_tier_with_no_attempts_left() -> None:
    # Sonnet used up its attempts earlier in the window, so two haiku failures go straight to opus.
    history = _history("sonnet:timeout", "sonnet:timeout", "haiku:failed", "haiku:failed")
    step = limit_attempts(
        Step(
            "escalate",
            "sonnet",
            "two_failures_at_haiku",
            delay_seconds=5.0,
            escalated_from="haiku",
            escalated_to="sonnet",
        ),
        history,
        allow_opus=True,
    )
    assert (step.action, step.tier, step.escalated_from, step.escalated_to, step.reason) == (
        "escalate",
        "opus",
        "haiku",
        "opus",
        "max_attempts_at_sonnet",
    )
    replan = limit_attempts(
        Step(
            "escalate",
            "sonnet",
            "two_failures_at_haiku",
            delay_seconds=5.0,
            escalated_from="haiku",
            escalated_to="sonnet",
        ),
        history,
    )
    assert _summary(replan) == ("replan", "", "max_attempts_at_sonnet", "max_attempts_per_tier")


# The full path of a Task routed to haiku: each step's tier is the tier of the next run.
PATHS = [
    (
        False,
        ["failed", "failed", "failed", "failed"],
        [
            ("retry", "haiku", "first_failure_at_haiku", ""),
            ("escalate", "sonnet", "two_failures_at_haiku", ""),
            ("retry", "sonnet", "first_failure_at_sonnet", ""),
            ("replan", "", "two_failures_at_sonnet", "max_attempts_per_tier"),
        ],
    ),
    (
        True,
        ["failed", "no_outcome", "run_call_cap", "failed", "failed", "failed"],
        [
            ("retry", "haiku", "first_failure_at_haiku", ""),
            ("escalate", "sonnet", "two_failures_at_haiku", ""),
            ("retry", "sonnet", "first_failure_at_sonnet", ""),
            ("escalate", "opus", "two_failures_at_sonnet", ""),
            ("retry", "opus", "first_failure_at_opus", ""),
            ("replan", "", "two_failures_at_opus", "max_attempts_per_tier"),
        ],
    ),
    (
        False,
        ["rate_limited", "failed", "timeout", "failed"],
        [
            ("retry", "haiku", "transport_retry", ""),
            ("escalate", "sonnet", "max_attempts_at_haiku", ""),
            ("retry", "sonnet", "transport_retry", ""),
            ("replan", "", "max_attempts_at_sonnet", "max_attempts_per_tier"),
        ],
    ),
    (
        False,
        ["failed", "transient", "agent_lost"],
        [
            ("retry", "haiku", "first_failure_at_haiku", ""),
            ("stop", "", "max_attempts_at_haiku", "max_attempts_per_tier"),
            ("fail", "", "transport_twice", ""),  # only if someone runs it again anyway
        ],
    ),
]


@pytest.mark.parametrize("allow_opus, outcomes, steps", PATHS)
def test_a_task_path(allow_opus: bool, outcomes: list[str], steps: list[tuple]) -> None:
    history: list[Attempt] = []
    tier = "haiku"
    for i, (outcome, expected) in enumerate(zip(outcomes, steps, strict=True)):
        history.append(Attempt(tier, outcome, T0 + dt.timedelta(minutes=i)))
        step = decide(history, allow_opus)
        assert _summary(step) == expected, (i, outcome)
        tier = step.tier or tier


@pytest.mark.parametrize(
    "runs, allow_opus, delay",
    [
        (["haiku:failed"], False, 5),
        (["haiku:rate_limited"], False, 5),
        (["haiku:failed", "haiku:failed"], False, 5),
        (["haiku:timeout", "haiku:failed"], False, 5),
        (["sonnet:failed", "sonnet:failed"], False, 0),
        (["haiku:timeout", "haiku:timeout"], False, 0),
        (["haiku:spend_limited"], False, 0),
        (["haiku:failed", "haiku:timeout"], False, 0),
    ],
)
def test_retries_and_escalations_start_5_seconds_later(runs: list[str], allow_opus: bool, delay: float) -> None:
    assert decide(_history(*runs), allow_opus).delay_seconds == delay
    # `--retry-delay-seconds` sets the delay of a retry or escalation; a stop or a failure has none.
    assert decide(_history(*runs), allow_opus, retry_delay_seconds=0.25).delay_seconds == (0.25 if delay else 0)


@pytest.mark.parametrize(
    "runs, allow_opus, fields, receipt",
    [
        (["haiku:failed", "haiku:failed"], False, ("haiku", "sonnet"), "two_failures_at_haiku"),
        (["sonnet:failed", "sonnet:failed"], True, ("sonnet", "opus"), "two_failures_at_sonnet"),
        (["haiku:timeout", "haiku:failed"], False, ("haiku", "sonnet"), "max_attempts_at_haiku"),
        (["haiku:failed"], False, ("", ""), ""),
        (["sonnet:failed", "sonnet:failed"], False, ("", ""), ""),
        (["haiku:spend_limited"], False, ("", ""), ""),
    ],
)
def test_escalation_fields_and_receipt_reason(runs: list[str], allow_opus: bool, fields: tuple, receipt: str) -> None:
    step = decide(_history(*runs), allow_opus)
    assert (step.escalated_from, step.escalated_to) == fields
    assert receipt_reason(step) == receipt


def test_a_fresh_window_after_a_budget_raise_ignores_older_failures() -> None:
    history = _history("haiku:failed", "haiku:failed", "sonnet:failed", "sonnet:failed", "sonnet:failed")
    raised = T0 + dt.timedelta(minutes=3, seconds=30)  # after the replan, before the last run
    fresh = window(history, raised)
    assert fresh == history[4:]
    assert _summary(decide(fresh, False)) == ("retry", "sonnet", "first_failure_at_sonnet", "")
    assert _summary(decide(history, False)) == ("replan", "", "two_failures_at_sonnet", "max_attempts_per_tier")


def test_a_budget_stop_then_a_raise_lets_the_task_retry() -> None:
    history = _history("sonnet:failed", "sonnet:change_budget", "sonnet:failed")
    assert _summary(decide(history[:2], False)) == ("stop", "", "budget_stop", "change_budget")
    fresh = window(history, (T0 + dt.timedelta(minutes=1, seconds=1)).isoformat())
    assert _summary(decide(fresh, False)) == ("retry", "sonnet", "first_failure_at_sonnet", "")


@pytest.mark.parametrize(
    "reset_at, kept",
    [
        (None, 3),
        (T0 - dt.timedelta(hours=1), 3),
        (T0, 2),  # a run that ended at the raise is old
        ("2025-03-01T12:00:30+00:00", 2),
        ("2025-03-01T12:01:30Z", 1),
        (dt.datetime(2025, 3, 1, 12, 1, 30), 1),  # naive is UTC
        ("2025-03-01T13:01:30+01:00", 1),  # the same moment in another zone
        (T0 + dt.timedelta(hours=1), 0),
    ],
)
def test_window_keeps_attempts_after_the_last_raise(reset_at: object, kept: int) -> None:
    history = _history("haiku:failed", "haiku:failed", "sonnet:failed")
    assert window(history, reset_at) == history[3 - kept :]


def test_history_is_ordered_by_time_not_by_position() -> None:
    newest_first = list(reversed(_history("haiku:failed", "haiku:timeout")))
    assert _summary(decide(newest_first, False)) == ("stop", "", "max_attempts_at_haiku", "max_attempts_per_tier")
    strings = [Attempt("haiku", "timeout", "2025-03-01T12:00:00Z"), Attempt("haiku", "failed", "2025-03-01T12:01:00Z")]
    assert _summary(decide(strings, False)) == ("escalate", "sonnet", "max_attempts_at_haiku", "")


@pytest.mark.parametrize(
    "build",
    [
        lambda: Attempt("gpt", "failed", T0),
        lambda: Attempt("haiku", "exploded", T0),
        lambda: Attempt("haiku", "failed", "yesterday"),
        lambda: Step("retry_later"),
        lambda: decide([], False),
        lambda: decide(_history("haiku:failed", "haiku:completed"), False),
    ],
)
def test_bad_input_is_refused(build) -> None:
    with pytest.raises(ValueError):
        build()
