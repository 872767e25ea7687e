"""The run's effort and its tier's thinking as Claude Code's options and opencode's model options (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from agentd.drivers.runtimes.reasoning import claude_code_args, claude_code_env, opencode_options
from controlplane.domain.reasoning import effort

OMITTED = {"type": "adaptive", "display": "omitted"}


@pytest.mark.parametrize(
    "run_effort, thinking, args",
    [
        ("medium", OMITTED, ["--effort", "medium", "--thinking", "adaptive", "--thinking-display", "omitted"]),
        ("low", {"type": "adaptive"}, ["--effort", "low", "--thinking", "adaptive"]),
        ("", {}, ["--thinking", "disabled"]),
        ("high", {"type": "enabled", "budget_tokens": 4000}, ["--effort", "high", "--thinking", "adaptive"]),
    ],
)
def test_claude_code_gets_effort_and_thinking_as_options(run_effort: str, thinking: Any, args: list[str]) -> None:
    assert claude_code_args(run_effort, thinking) == args


def test_claude_code_sends_the_effort_whatever_the_model_id() -> None:
    assert claude_code_env("high") == {"CLAUDE_CODE_ALWAYS_ENABLE_EFFORT": "1"} and claude_code_env("") == {}


@pytest.mark.parametrize(
    "run_effort, thinking, options",
    [
        ("medium", OMITTED, {"effort": "medium", "thinking": OMITTED}),
        ("", {"type": "adaptive"}, {"thinking": {"type": "adaptive"}}),
        ("max", {}, {"effort": "max"}),
        ("", {"type": "enabled", "budget_tokens": 4000}, {"thinking": {"type": "enabled", "budgetTokens": 4000}}),
    ],
)
def test_opencode_gets_them_as_its_models_provider_options(run_effort: str, thinking: Any, options: dict) -> None:
    assert opencode_options(run_effort, thinking) == options


@pytest.mark.parametrize(
    "tier, reasoning, expected",
    [("medium", "", "medium"), ("medium", "high", "high"), ("low", " HIGH ", "high"), ("high", "deep", "high")],
)
def test_a_members_reasoning_overrides_its_tiers_effort_when_it_is_an_effort_level(
    tier: str, reasoning: str, expected: str
) -> None:
    assert effort(tier, reasoning) == expected
