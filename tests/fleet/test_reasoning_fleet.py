"""Thinking per tier (seed 000's table), a member's ReasoningMode (seed 004) and the attempt ceiling, through a real
control plane, a real agentd and the scripted fake Messages API: what the fake received is what a provider would."""

from __future__ import annotations

import json
import pathlib

import pytest

from drover.testing import fake_anthropic as fake
from drover.testing import runtimes
from drover.testing.script import is_classifier_request
from tests.conftest import API_KEY, Fleet

OMITTED = {"type": "adaptive", "display": "omitted"}
MEMBER_HIGH = """
[[classes]]
id = "sonnet"
[[classes.members]]
agent = "anthropic"
billing = "PayPerApi"
quality_score = 100
reasoning = "high"
"""


def start(fleet: Fleet, model: fake.FakeAnthropic, repo: pathlib.Path, *args: str, agent: tuple[str, ...] = ()) -> None:
    fleet.plane.extra_env.update(ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=API_KEY)
    fleet.start_plane(*args)
    fleet.plane.add_project("calc", str(repo))
    fleet.agent("thinker", extra=agent)


def run_one(fleet: Fleet, task: dict) -> tuple[str, str]:
    """Submit one Task and watch it end; its Change's status and its run's outcome."""
    with fleet.plane.client() as client:
        change = client.submit_change("calc", "think", [task])
        list(client.watch(change.id))
        final = client.get_change(change.id)
        run = client.get_run(final.tasks[0].latest_run_id)
    return final.status, run.outcome


def config(tmp_path: pathlib.Path, text: str) -> tuple[str, str]:
    path = tmp_path / "controlplane.toml"
    path.write_text(text)
    return "--config", str(path)


SONNET_TASK = {"key": "m", "kind": "implement", "objective": "a medium change", "complexity": "medium"}


def test_a_sonnet_run_thinks_adaptively_at_medium_effort_and_the_classifier_does_not_think(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path
) -> None:
    model.extend([fake.tool_use("list_files", {}), fake.tool_use("complete_task", {"summary": "looked"})])
    start(fleet, model, calc_repo)
    # no complexity: the routing classifier (a one-shot haiku call) picks the tier, sonnet
    assert run_one(fleet, {"key": "look", "kind": "implement", "objective": "look"}) == ("succeeded", "completed")
    classifier, *loop = model.requests
    assert is_classifier_request(classifier.body)
    assert "thinking" not in classifier.body and "output_config" not in classifier.body
    assert len(loop) == 2 and {r.body["model"] for r in loop} == {"claude-sonnet-5-5"}
    assert all(r.body["thinking"] == OMITTED and r.body["output_config"] == {"effort": "medium"} for r in loop)


def test_a_members_reasoning_overrides_its_tiers_effort(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    model.extend([fake.tool_use("complete_task", {"summary": "done"})])
    start(fleet, model, calc_repo, *config(tmp_path, MEMBER_HIGH))
    assert run_one(fleet, SONNET_TASK) == ("succeeded", "completed")
    [request] = model.requests
    assert request.body["output_config"] == {"effort": "high"} and request.body["thinking"] == OMITTED


def test_a_tier_configured_off_sends_no_thinking_and_no_effort(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    model.extend([fake.tool_use("complete_task", {"summary": "done"})])
    start(fleet, model, calc_repo, *config(tmp_path, '[tiers.sonnet]\nthinking = "off"\neffort = "off"\n'))
    assert run_one(fleet, SONNET_TASK) == ("succeeded", "completed")
    [request] = model.requests
    assert "thinking" not in request.body and "output_config" not in request.body


def test_the_attempt_ceiling_in_the_toml_cuts_a_steadily_streaming_attempt_and_the_call_is_retried(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    # a piece every 0.5 s for 10 s: never silent for the 120 s stall timeout, but over a 2 s ceiling
    model.extend([fake.trickle("slowly the model explains", every=0.5, pieces=20)])
    model.extend([fake.tool_use("complete_task", {"summary": "done"})])
    start(fleet, model, calc_repo, *config(tmp_path, "[harness]\nattempt_ceiling_seconds = 2\n"))
    assert run_one(fleet, SONNET_TASK) == ("succeeded", "completed")
    first, second = model.requests
    assert first.body["messages"] == second.body["messages"]  # the same call, attempted again


@pytest.mark.timeout(300)
def test_claude_code_is_given_the_members_reasoning_as_its_effort(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    model.extend([fake.text("Nothing to do.")])
    agent = ("--claude-command", runtimes.executable("claude"))
    start(fleet, model, calc_repo, *config(tmp_path, MEMBER_HIGH), agent=agent)
    assert run_one(fleet, {**SONNET_TASK, "runtime": "claude-code"}) == ("succeeded", "completed")
    [request] = model.requests
    assert request.body["output_config"]["effort"] == "high", json.dumps(request.body)[:2000]
    assert request.body["thinking"] == OMITTED


@pytest.mark.timeout(300)
def test_opencode_is_given_the_tiers_effort_and_thinking(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path
) -> None:
    model.extend([fake.text("Nothing to do.")])
    start(fleet, model, calc_repo, agent=("--opencode-command", runtimes.executable("opencode")))
    assert run_one(fleet, {**SONNET_TASK, "runtime": "opencode"}) == ("succeeded", "completed")
    [request] = model.requests
    assert request.body["output_config"]["effort"] == "medium", json.dumps(request.body)[:2000]
    # opencode's Anthropic provider adds a block_binding of its own
    assert {k: request.body["thinking"][k] for k in OMITTED} == OMITTED
