"""Routing, escalation and budgets through real processes and the scripted fake model."""

from __future__ import annotations

import pathlib

import pytest

from drover.testing import fake_anthropic as fake
from tests.conftest import Fleet
from tests.test_harness_run import API_KEY, calc_repo, model  # noqa: F401  (fixtures)


def start(fleet: Fleet, model: fake.FakeAnthropic, repo: pathlib.Path, *plane_args: str) -> None:
    fleet.plane.extra_env.update(ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=API_KEY)
    fleet.start_plane(*plane_args)
    fleet.plane.add_project("calc", str(repo))
    fleet.agent("router-agent")


def test_two_failures_at_haiku_escalate_the_third_attempt_to_sonnet(
        fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path) -> None:
    model.extend([fake.tool_use("fail_task", {"reason": "too hard"}),
                  fake.tool_use("fail_task", {"reason": "still too hard"}),
                  fake.tool_use("complete_task", {"summary": "done on sonnet"})])
    start(fleet, model, calc_repo)
    with fleet.plane.client() as client:
        change = client.submit_change("calc", "escalate", [
            {"key": "tiny", "kind": "implement", "objective": "a small fix", "size": "small", "risk": "low"}])
        seen = list(client.watch(change.id))
        runs = sorted(client.list_runs(change_id=change.id), key=lambda r: r.attempt)
        spend = client.get_spend(change.id)
        final = client.get_change(change.id)
    assert final.status == "succeeded"
    assert [(r.tier, r.model, r.outcome) for r in runs] == [
        ("haiku", "claude-haiku-5-5", "failed"), ("haiku", "claude-haiku-5-5", "failed"),
        ("sonnet", "claude-sonnet-5-5", "completed")]
    assert [r.body["model"] for r in model.requests] == ["claude-haiku-5-5"] * 2 + ["claude-sonnet-5-5"]
    escalated = [e for e in seen if e.kind == "agent.escalated"]
    assert len(escalated) == 1 and escalated[0].data["from"] == "haiku" and escalated[0].data["to"] == "sonnet"
    receipts = {r.run_id: r for r in spend.receipts}
    first, second, third = (receipts[r.id].data for r in runs)
    assert first["rule"] == "small_low_risk_first_attempt" and first["member"] == "anthropic"
    assert second["escalation"] == "first_failure_at_haiku"
    assert third["escalation"] == "two_failures_at_haiku" and third["tier"] == "sonnet"
    assert all(d["agent"] == "router-agent" for d in (first, second, third))
    assert "reasoning" not in str(spend.receipts)
    assert {line.tier for line in spend.lines} == {"haiku", "sonnet"} and spend.spent_micros > 0


def test_opus_runs_on_the_sonnet_model_unless_allowed(fleet: Fleet, model: fake.FakeAnthropic,
                                                      calc_repo: pathlib.Path) -> None:
    model.extend([fake.tool_use("complete_task", {"summary": "migrated"})])
    start(fleet, model, calc_repo)
    with fleet.plane.client() as client:
        change = client.submit_change("calc", "migrate", [
            {"key": "drop", "kind": "migrate", "objective": "drop a column", "flags": {"destructive_migration": True}}])
        list(client.watch(change.id))
        [receipt] = client.list_receipts(change_id=change.id)
        [run] = client.list_runs(change_id=change.id)
    assert run.tier == "opus" and run.model == "claude-sonnet-5-5"
    assert receipt.data["opus_disabled"] and receipt.data["rule"] == "destructive_migration"


def test_no_eligible_member_fails_the_task_naming_the_gate(fleet: Fleet, model: fake.FakeAnthropic,
                                                           calc_repo: pathlib.Path) -> None:
    start(fleet, model, calc_repo)
    with fleet.plane.client() as client:
        change = client.submit_change("calc", "sensitive", [
            {"key": "auth", "kind": "implement", "objective": "rewrite auth", "complexity": "medium",
             "required_capabilities": ["sensitive"]}])
        list(client.watch(change.id))
        final = client.get_change(change.id)
    assert final.status == "failed"
    assert final.tasks[0].reason.startswith("ROUTING_NO_ELIGIBLE: no member of class 'sonnet'")
    assert "RequiredCapabilities=[sensitive]" in final.tasks[0].reason
    assert model.requests == []
