"""Routing, escalation and budgets through real processes and the scripted fake model."""

from __future__ import annotations

import datetime as dt
import itertools
import pathlib
import signal

from drover.testing import fake_anthropic as fake
from tests.conftest import API_KEY, RETRY_DELAY_SECONDS, Fleet, wait_for


def start(fleet: Fleet, model: fake.FakeAnthropic, repo: pathlib.Path, *plane_args: str) -> None:
    fleet.plane.extra_env.update(ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=API_KEY)
    fleet.start_plane(*plane_args)
    fleet.plane.add_project("calc", str(repo))
    fleet.agent("router-agent")


def test_two_failures_at_haiku_escalate_the_third_attempt_to_sonnet(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path
) -> None:
    model.extend(
        [
            fake.tool_use("fail_task", {"reason": "too hard"}),
            fake.tool_use("fail_task", {"reason": "still too hard"}),
            fake.tool_use("complete_task", {"summary": "done on sonnet"}),
        ]
    )
    start(fleet, model, calc_repo)
    with fleet.plane.client() as client:
        change = client.submit_change(
            "calc",
            "escalate",
            [{"key": "tiny", "kind": "implement", "objective": "a small fix", "size": "small", "risk": "low"}],
        )
        seen = list(client.watch(change.id))
        runs = sorted(client.list_runs(change_id=change.id), key=lambda r: r.attempt)
        spend = client.get_spend(change.id)
        final = client.get_change(change.id)
    assert final.status == "succeeded"
    assert [(r.tier, r.model, r.outcome) for r in runs] == [
        ("haiku", "claude-haiku-5-5", "failed"),
        ("haiku", "claude-haiku-5-5", "failed"),
        ("sonnet", "claude-sonnet-5-5", "completed"),
    ]
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
    # Each next attempt started no sooner than the tests' `--retry-delay-seconds` after the failed run.
    for failed, following in itertools.pairwise(runs):
        gap = following.started_at - failed.finished_at
        assert gap >= dt.timedelta(seconds=float(RETRY_DELAY_SECONDS)), gap


def test_a_script_without_a_classifier_step_reaches_the_harness_whole(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path
) -> None:
    """A newcomer's first script: no classifier reply in it, and a Task the rules leave to the classifier.
    The fake answers the classifier itself; on main the classifier took list_files and lost a step."""
    model.extend([fake.tool_use("list_files", {}), fake.tool_use("complete_task", {"summary": "looked"})])
    start(fleet, model, calc_repo)
    with fleet.plane.client() as client:
        change = client.submit_change("calc", "look", [{"key": "look", "kind": "implement", "objective": "look"}])
        list(client.watch(change.id))
        [run] = client.list_runs(change_id=change.id)
        [receipt] = client.get_spend(change.id).receipts
        status = client.get_change(change.id).status
    assert status == "succeeded" and run.outcome == "completed"
    assert run.model_calls == 2 and model.pending == 0  # both scripted steps reached the harness
    assert receipt.data["rule"] == "default"
    assert receipt.data["classifier"] == {"tier": "sonnet", "confidence": 0.9, "reason": "answered"}
    assert model.requests[0].body["max_tokens"] == 100  # the classifier's call came first


def test_two_failures_at_sonnet_escalate_to_opus_only_where_the_config_allows_it(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """The [anthropic] allow_opus setting reaches the decision taken when a run fails."""
    config = tmp_path / "opus.toml"
    config.write_text("[anthropic]\nallow_opus = true\n")
    model.extend(
        [
            fake.tool_use("fail_task", {"reason": "too hard"}),
            fake.tool_use("fail_task", {"reason": "still too hard"}),
            fake.tool_use("complete_task", {"summary": "done on opus"}),
        ]
    )
    start(fleet, model, calc_repo, "--config", str(config))
    medium = {"key": "m", "kind": "implement", "objective": "a medium change", "complexity": "medium"}
    with fleet.plane.client() as client:
        change = client.submit_change("calc", "opus allowed", [medium])
        list(client.watch(change.id))
        runs = sorted(client.list_runs(change_id=change.id), key=lambda r: r.attempt)
        assert client.get_change(change.id).status == "succeeded"
    assert [(r.tier, r.outcome) for r in runs] == [("sonnet", "failed"), ("sonnet", "failed"), ("opus", "completed")]
    assert [r.body["model"] for r in model.requests] == ["claude-sonnet-5-5"] * 2 + ["claude-opus-5-5"]

    config.write_text("")  # opus off again: two failures at sonnet stop the Change at the attempt limit
    fleet.plane.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "config reloaded" in (fleet.plane.data_dir / "controlplane-1.log").read_text(), 10)
    model.extend(
        [fake.tool_use("fail_task", {"reason": "too hard"}), fake.tool_use("fail_task", {"reason": "still too hard"})]
    )
    with fleet.plane.client() as client:
        change = client.submit_change("calc", "opus not allowed", [medium])
        list(client.watch(change.id))
        runs = client.list_runs(change_id=change.id)
        assert client.get_change(change.id).status == "budget_blocked"  # replan: an operator raises the limit
    assert sorted((r.attempt, r.tier, r.outcome) for r in runs) == [(1, "sonnet", "failed"), (2, "sonnet", "failed")]


def test_opus_runs_on_the_sonnet_model_unless_allowed(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path
) -> None:
    model.extend([fake.tool_use("complete_task", {"summary": "migrated"})])
    start(fleet, model, calc_repo)
    with fleet.plane.client() as client:
        change = client.submit_change(
            "calc",
            "migrate",
            [
                {
                    "key": "drop",
                    "kind": "migrate",
                    "objective": "drop a column",
                    "flags": {"destructive_migration": True},
                }
            ],
        )
        list(client.watch(change.id))
        [receipt] = client.list_receipts(change_id=change.id)
        [run] = client.list_runs(change_id=change.id)
    assert run.tier == "opus" and run.model == "claude-sonnet-5-5"
    assert receipt.data["opus_disabled"] and receipt.data["rule"] == "destructive_migration"


def test_no_eligible_member_fails_the_task_naming_the_gate(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path
) -> None:
    start(fleet, model, calc_repo)
    with fleet.plane.client() as client:
        change = client.submit_change(
            "calc",
            "sensitive",
            [
                {
                    "key": "auth",
                    "kind": "implement",
                    "objective": "rewrite auth",
                    "complexity": "medium",
                    "required_capabilities": ["sensitive"],
                }
            ],
        )
        list(client.watch(change.id))
        final = client.get_change(change.id)
    assert final.status == "failed"
    assert final.tasks[0].reason.startswith("ROUTING_NO_ELIGIBLE: no member of class 'sonnet'")
    assert "RequiredCapabilities=[sensitive]" in final.tasks[0].reason
    assert model.requests == []


CHEAP = {"input_tokens": 100, "output_tokens": 1000}  # $0.0051 at haiku prices, within a haiku reservation
DEAR = {"input_tokens": 100, "output_tokens": 1000}  # $0.0153 at sonnet prices, within a sonnet reservation


def test_a_change_whose_budget_runs_out_blocks_exactly_the_right_tasks_and_a_raise_finishes_it(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    # A haiku call reserves about $0.005 plus its input, a sonnet call $0.30 plus its input (each
    # reservation its worst case): a $0.20 budget holds the two small Tasks, not the sonnet one after them.
    config = tmp_path / "controlplane.toml"
    config.write_text("[tiers.haiku]\nmax_output_tokens = 1000\n[tiers.sonnet]\nmax_output_tokens = 20000\n")
    model.extend([fake.tool_use("complete_task", {"summary": "small"}, usage=CHEAP) for _ in range(2)])
    model.extend([fake.tool_use("complete_task", {"summary": "medium"}, usage=DEAR) for _ in range(2)])
    start(fleet, model, calc_repo, "--config", str(config))

    def task(key: str, *deps: str, small: bool = False) -> dict:
        traits = {"size": "small", "risk": "low"} if small else {"complexity": "medium"}
        return {"key": key, "kind": "implement", "objective": key, "depends_on": list(deps), **traits}

    with fleet.plane.client() as client:
        tasks = [task("a", small=True), task("b", "a"), task("c", small=True), task("d", "b")]
        change = client.submit_change("calc", "budgeted", tasks, budget_usd=0.2)
        first = list(client.watch(change.id))
        stopped = client.get_change(change.id)
        statuses = {t.key: (t.status, t.reason) for t in stopped.tasks}
        usage = {m.kind: m for m in client.get_usage(f"change-usd:{change.id}")}
        client.raise_budget(change.id, 2.0)
        list(client.watch(change.id, after_event_id=first[-1].id))
        final = client.get_change(change.id)
        over = client.list_events(change_id=change.id, kind="run.over_reservation")
    assert stopped.status == "budget_blocked" and stopped.reason == "change_budget", statuses
    assert statuses["a"][0] == "succeeded" and statuses["c"][0] == "succeeded"
    assert statuses["b"] == ("blocked", "budget_stop: change_budget")
    assert statuses["d"][0] == "blocked" and statuses["d"][1].startswith("dependency b")
    stop = next(e for e in first if e.kind == "budget.stopped")
    assert stop.data["limit"] == "change_budget" and stop.data["key"] == "b"
    assert first[-1].kind == "change.finished" and first[-1].data["status"] == "budget_blocked"
    assert usage["change"].used == 2 * 5_100 and usage["change"].limit == 200_000 and usage["change"].reserved == 0
    assert over == []  # every usage report was within its reservation
    assert len(model.requests) == 4  # the refused call never reached the model
    assert final.status == "succeeded" and all(t.status == "succeeded" for t in final.tasks)


BAD_CLASSES = '[[classes]]\nid = "sonnet"\n[[classes.members]]\nagent = "anthropic"\nbilling = "PayPerApi"\n'


def test_an_invalid_member_config_stops_the_start_with_the_seed_message(tmp_path: pathlib.Path) -> None:
    import subprocess
    import sys

    config = tmp_path / "bad.toml"
    config.write_text(BAD_CLASSES)  # no quality_score
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "controlplane.cli",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            str(tmp_path / "cp"),
            "--config",
            str(config),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "quality_score" in done.stderr and "AgentClass 'sonnet'" in done.stderr


def test_the_resolved_members_are_logged_at_start_up_and_after_each_reload(
    fleet: Fleet, tmp_path: pathlib.Path
) -> None:
    member = (
        '[[classes]]\nid = "sonnet"\n[[classes.members]]\nagent = "anthropic"\ninstance_id = "{acct}"\n'
        'billing = "PayPerApi"\nmodel = "{model}"\nquality_score = 90\ncredential_env = "ANTHROPIC_API_KEY"\n'
    )
    config = tmp_path / "members.toml"
    config.write_text(member.format(acct="acct-a", model="claude-sonnet-5-5"))
    fleet.plane.extra_env.update(ANTHROPIC_API_KEY=API_KEY)
    fleet.start_plane("--config", str(config))
    log = fleet.plane.data_dir / "controlplane-1.log"
    first = "AgentClass 'sonnet' resolved members: [anthropic/acct-a/claude-sonnet-5-5(PayPerApi)]"
    wait_for(lambda: first in log.read_text(), 10, what="the start-up member list")
    assert "AgentClass 'haiku' resolved members: [anthropic/claude-haiku-5-5(PayPerApi)]" in log.read_text()
    config.write_text(member.format(acct="acct-b", model="claude-sonnet-6"))
    fleet.plane.proc.send_signal(signal.SIGHUP)
    second = "AgentClass 'sonnet' resolved members: [anthropic/acct-b/claude-sonnet-6(PayPerApi)]"
    wait_for(lambda: second in log.read_text(), 10, what="the reloaded member list")
    text = log.read_text()
    assert text.index("config reloaded from") < text.index(second) and text.count(first) == 1


def test_a_hot_reload_with_an_invalid_config_keeps_the_old_one(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    import signal

    config = tmp_path / "live.toml"
    config.write_text("")
    model.extend(
        [fake.tool_use("complete_task", {"summary": "one"}), fake.tool_use("complete_task", {"summary": "two"})]
    )
    start(fleet, model, calc_repo, "--config", str(config))
    drop = {"key": "drop", "kind": "migrate", "objective": "drop", "flags": {"destructive_migration": True}}
    log = fleet.plane.data_dir / "controlplane-1.log"
    config.write_text(BAD_CLASSES)
    fleet.plane.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "config reload refused" in log.read_text(), 10, what="the reload to be refused")
    with fleet.plane.client() as client:
        first = client.submit_change("calc", "still opus off", [drop])
        list(client.watch(first.id))
        config.write_text("[anthropic]\nallow_opus = true\n")
        fleet.plane.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "config reloaded from" in log.read_text(), 10, what="the config to be reloaded")
        second = client.submit_change("calc", "opus on", [drop])
        list(client.watch(second.id))
        models = [client.list_runs(change_id=c.id)[0].model for c in (first, second)]
    assert "config reload refused, keeping the running config" in log.read_text()
    assert models == ["claude-sonnet-5-5", "claude-opus-5-5"]


def test_exhausted_subscription_members_defer_the_run_until_the_probe_allows_it(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    import http.server
    import json
    import threading

    quota = {"available_pct": 5.0}

    class Probe(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps(quota).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Probe)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    config = tmp_path / "subscription.toml"
    config.write_text(f"""
[[classes]]
id = "sonnet"
[[classes.members]]
agent = "anthropic"
instance_id = "acct-a"
billing = "Subscription"
model = "claude-sonnet-5-5"
quality_score = 100
credential_env = "ANTHROPIC_API_KEY"
probe_url = "http://127.0.0.1:{server.server_port}/quota"

[[modifiers]]
route_key = "anthropic/acct-a"
start = "00:00"
end = "24:00"
delta = 2

[quota_router]
recheck_interval_seconds = 1
cache_ttl_seconds = 0.2
""")
    model.extend([fake.tool_use("complete_task", {"summary": "waited for quota"})])
    try:
        start(fleet, model, calc_repo, "--config", str(config))
        with fleet.plane.client() as client:
            change = client.submit_change(
                "calc", "quota", [{"key": "q", "kind": "implement", "objective": "q", "complexity": "medium"}]
            )
            from tests.conftest import wait_for

            wait_for(
                lambda: client.list_events(change_id=change.id, kind="quota_router.deferred"),
                20,
                what="the run to be deferred",
            )
            assert model.requests == []
            quota["available_pct"] = 80.0
            list(client.watch(change.id))
            final = client.get_change(change.id)
            [receipt] = client.list_receipts(change_id=change.id)
            probed = client.list_events(kind="quota_router.probed")
            scored = client.list_events(change_id=change.id, kind="quota_router.scored")
    finally:
        server.shutdown()
    assert final.status == "succeeded" and receipt.data["member"] == "anthropic/acct-a"
    assert {e.data["available_pct"] for e in probed} >= {5.0, 80.0}
    assert {(e.data["tier_class"], e.data["member"]) for e in probed} == {("sonnet", "anthropic/acct-a")}
    [waited, *_, routed] = scored
    assert waited.data["modifiers"] == []  # nothing chosen while the quota is low
    assert waited.data["candidates"][0]["modifiers"] == ["anthropic/acct-a 00:00-24:00 +2"]
    assert routed.data["modifiers"] == ["anthropic/acct-a 00:00-24:00 +2"]
    assert routed.data["candidates"][0]["effective"] == 102
    log = (fleet.plane.data_dir / "controlplane-1.log").read_text()
    assert "AgentClass 'sonnet' has no PayPerApi fallback" in log
