"""The control plane's own model calls (the routing classifier, failure-log compaction) on the fleet's
meters: the real control plane and agentd against the scripted fake Messages API."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

from drover.testing import fake_anthropic as fake
from tests.conftest import API_KEY, Fleet

NOISY = "x" * 30_000  # a tool result of ~7,500 tokens: the failed run's log is compacted before the retry
CLASSIFIER_USAGE = {"input_tokens": 400, "output_tokens": 12}
COMPACTION_USAGE = {"input_tokens": 7_000, "output_tokens": 300, "cache_read_input_tokens": 1_000}
# Haiku's list price: $1 input, $5 output, $0.10 cache reads per million tokens (micro-dollars per token).
CLASSIFIER_MICROS = 400 * 1 + 12 * 5
COMPACTION_MICROS = 7_000 * 1 + 300 * 5 + 1_000 // 10


def start(fleet: Fleet, model: fake.FakeAnthropic, repo: pathlib.Path, tmp: pathlib.Path, budgets: str) -> None:
    config = tmp / "controlplane.toml"
    config.write_text(f"[budgets]\n{budgets}\n")
    fleet.plane.extra_env.update(ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=API_KEY)
    fleet.start_plane("--config", str(config))
    fleet.plane.add_project("calc", str(repo))
    fleet.agent("own-calls-agent")


def failing_run() -> list[fake.Step]:
    """A first attempt that leaves a long log and fails."""
    return [
        fake.tool_use("write_file", {"path": "noise.txt", "content": NOISY}),
        fake.tool_use("read_file", {"path": "noise.txt"}),
        fake.tool_use("fail_task", {"reason": "gave up"}),
    ]


def posts(model: fake.FakeAnthropic) -> list[fake.Request]:
    return [r for r in model.requests if r.method == "POST"]


def test_the_classifier_and_compaction_calls_are_priced_on_the_provider_meter(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    model.extend(
        [
            fake.classification("sonnet", 0.9, usage=CLASSIFIER_USAGE),  # the Task leaves its tier to the classifier
            *failing_run(),
            fake.text("Wrote and read noise.txt; gave up.", usage=COMPACTION_USAGE),  # the compaction
            fake.tool_use("complete_task", {"summary": "second time lucky"}),
        ]
    )
    start(fleet, model, calc_repo, tmp_path, "provider_month_usd = 10")
    with fleet.plane.client() as client:
        change = client.submit_change("calc", "own", [{"key": "t", "kind": "implement", "objective": "t"}])
        list(client.watch(change.id))
        final = client.get_change(change.id)
        runs = sorted(client.list_runs(change_id=change.id), key=lambda r: r.attempt)
        retry_packet = client.get_packet(runs[1].id)
        spend = client.get_spend(change.id)
        own = client.list_events(change_id=change.id, kind="model.own_call")
        usage = {m.kind: m for m in client.get_usage()}
    assert final.status == "succeeded" and model.pending == 0
    assert posts(model)[0].body["max_tokens"] == 100  # the classifier's call came first
    assert "[compacted log]" in retry_packet["prior_failures"][0]["text"]
    assert [(e.data["purpose"], e.data["outcome"], e.data["cost_micros"]) for e in own] == [
        ("classifier", "settled", CLASSIFIER_MICROS),
        ("compaction", "settled", COMPACTION_MICROS),
    ]
    assert all(e.run_id and e.data["model"] == "claude-haiku-5-5" and e.data["excess"] == 0 for e in own)
    assert own[0].run_id == runs[0].id and own[1].run_id == runs[1].id
    provider = usage["provider_month"]
    # The provider meter holds the runs' calls (the Change's spend) and the control plane's own, exactly.
    assert provider.used == spend.spent_micros + CLASSIFIER_MICROS + COMPACTION_MICROS and provider.reserved == 0
    assert usage["classifier_calls_day"].used == 1
    assert usage["agent_calls_day"].used == 4 + 1  # the runs' four calls and the compaction
    shown = subprocess.run(  # docs/configuration.md's `drover usage --prefix provider-usd:`
        [sys.executable, "-m", "drover.cli", "usage", "--prefix", "provider-usd:"],
        capture_output=True,
        text=True,
        env={**os.environ, "DROVER_TARGET": fleet.plane.target, "DROVER_TOKEN": fleet.plane.admin_token},
        timeout=60,
        check=True,
    ).stdout
    assert f"{provider.key} " in shown and f"${provider.used / 1e6:.6f}" in shown


def test_a_full_provider_meter_sends_no_classifier_request_and_routing_goes_on_by_the_rules(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    model.extend([fake.tool_use("complete_task", {"summary": "never asked"})])
    start(fleet, model, calc_repo, tmp_path, "provider_month_usd = 0.0001")  # 100 micro-dollars: less than a call
    with fleet.plane.client() as client:
        change = client.submit_change("calc", "broke", [{"key": "t", "kind": "implement", "objective": "t"}])
        list(client.watch(change.id))
        final = client.get_change(change.id)
        [receipt] = client.get_spend(change.id).receipts
        decided = client.list_events(change_id=change.id, kind="model.route.decided")
        [refused] = client.list_events(change_id=change.id, kind="model.own_call")
        [provider] = client.get_usage("provider-usd:")
    assert posts(model) == [] and model.pending == 1  # no request reached the Messages API
    assert receipt.data["classifier"] == {"tier": None, "confidence": 0.0, "reason": "budget"}
    assert receipt.data["rule"] == "default" and receipt.data["tier"] == "sonnet"  # the abstention's tier
    assert len(decided) == 1  # routing went on without the classifier
    assert refused.data["purpose"] == "classifier" and refused.data["outcome"] == "refused"
    assert refused.data["meter"] == provider.key and refused.data["limit"] == 100
    assert provider.used == 0 and provider.reserved == 0
    assert final.status == "budget_blocked" and final.reason == "monthly_budget"  # the run's own call was refused


def test_a_full_daily_call_cap_leaves_the_failure_log_uncompacted_without_a_request(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    model.extend([*failing_run(), fake.text("never asked")])
    start(fleet, model, calc_repo, tmp_path, "agent_calls_per_day = 3")  # the first attempt's three calls
    with fleet.plane.client() as client:
        change = client.submit_change(
            "calc", "capped", [{"key": "t", "kind": "implement", "objective": "t", "complexity": "medium"}]
        )
        list(client.watch(change.id))
        final = client.get_change(change.id)
        runs = sorted(client.list_runs(change_id=change.id), key=lambda r: r.attempt)
        retry_packet = client.get_packet(runs[1].id)
        [refused] = client.list_events(change_id=change.id, kind="model.own_call")
        provider_before = client.get_spend(change.id).spent_micros
        [provider] = client.get_usage("provider-usd:")
    assert len(posts(model)) == 3 and model.pending == 1  # the compaction made no request
    [failure] = retry_packet["prior_failures"]
    assert "[compacted log]" not in failure["text"] and "x" * 1000 in failure["text"]  # the log's tail instead
    assert refused.data["purpose"] == "compaction" and refused.data["outcome"] == "refused"
    assert refused.data["meter"].startswith("agent-calls:") and refused.run_id == runs[1].id
    assert provider.used == provider_before  # nothing of the refused call was spent
    assert final.status == "budget_blocked" and final.reason == "daily_calls"


def test_a_failed_classifier_call_settles_what_its_attempts_used(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    model.classifier = None  # the classifier's requests take the scripted failures
    model.extend(
        [
            fake.error(529, "overloaded_error", "busy", in_stream=True),  # after message_start: 100 in, 1 out
            fake.error(400, "invalid_request_error", "bad request"),  # the retry: refused before any token
            fake.tool_use("complete_task", {"summary": "routed without the classifier"}),
        ]
    )
    start(fleet, model, calc_repo, tmp_path, "provider_month_usd = 10")
    with fleet.plane.client() as client:
        change = client.submit_change("calc", "failing", [{"key": "t", "kind": "implement", "objective": "t"}])
        list(client.watch(change.id))
        final = client.get_change(change.id)
        [receipt] = client.get_spend(change.id).receipts
        spent = client.get_spend(change.id).spent_micros
        [failed] = client.list_events(change_id=change.id, kind="model.own_call")
        [provider] = client.get_usage("provider-usd:")
    assert final.status == "succeeded" and receipt.data["classifier"]["reason"] == "failed"
    assert failed.data["outcome"] == "failed" and failed.data["error"] == "invalid_request_error"
    assert failed.data["usage"]["input_tokens"] == 100 and failed.data["cost_micros"] == 100 * 1 + 1 * 5
    assert provider.used == spent + 105 and provider.reserved == 0
