"""Prometheus endpoints of the control plane and agentd, scraped during a real run: the numbers move,
the names follow Prometheus conventions, no label carries a run id, and the Grafana dashboard in
deploy/ only asks for metrics that exist."""

from __future__ import annotations

import json
import pathlib
import re
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from drover.testing import fake_anthropic as fake
from tests.conftest import API_KEY, ROOT, AgentD, ControlPlane, Fleet, python_command, task, wait_for


def endpoint(log: str) -> str:
    found = re.search(r"metrics on http://([\d.]+):(\d+)/metrics", log)
    return f"http://{found.group(1)}:{found.group(2)}/metrics" if found else ""


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def families(url: str) -> set[str]:
    """Every metric family an endpoint declares, with or without samples yet (a counter as name_total)."""
    with urllib.request.urlopen(url, timeout=10) as answer:
        found = list(text_string_to_metric_families(answer.read().decode()))
    return {f.name + ("_total" if f.type == "counter" else "") for f in found}


def value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return sum(v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= set(ls))


def plane_log(plane: ControlPlane) -> str:
    return "\n".join(p.read_text() for p in sorted(plane.data_dir.glob("controlplane-*.log")))


def test_both_endpoints_move_during_a_real_run(fleet: Fleet) -> None:
    plane = fleet.start_plane("--metrics-listen", "127.0.0.1:0")
    plane.add_project("metered")
    agent: AgentD = fleet.agent("metered-agent", capacity=2, extra=("--metrics-listen", "127.0.0.1:0"))
    plane_url = wait_for(lambda: endpoint(plane_log(plane)), 30, what="the control plane's metrics endpoint")
    agent_url = wait_for(lambda: endpoint(agent.log()), 30, what="agentd's metrics endpoint")

    before = scrape(plane_url)
    assert value(before, "drover_agents_connected") == 1 and value(before, "drover_fleet_capacity_slots") == 2
    code = "import time\nprint('x' * 100, flush=True)\ntime.sleep(3)\nprint('done', flush=True)"
    with plane.client() as client:
        change = client.submit_change("metered", "m", [task("slow", python_command(code))])
        wait_for(lambda: value(scrape(agent_url), "drover_agent_busy_slots") == 1, 30, what="the agent busy")
        # agentd counts the slot when it starts the run; the control plane when its "started" arrives.
        during = wait_for(
            lambda: (s := scrape(plane_url)) and value(s, "drover_runs", state="running") == 1 and s,
            30,
            what="the control plane to count the run as running",
        )
        assert value(during, "drover_fleet_free_slots") == 1
        list(client.watch(change.id))
        assert client.get_change(change.id).status == "succeeded"

    after = wait_for(
        lambda: (s := scrape(plane_url)) and value(s, "drover_runs_finished_total", status="succeeded") == 1 and s,
        30,
        what="the finished run to be counted",
    )
    assert value(after, "drover_events_total", kind="change.finished") == 1
    assert value(after, "drover_dispatch_latency_seconds_count", stage="queued_to_assigned") == 1
    assert value(after, "drover_dispatch_latency_seconds_count", stage="queued_to_started") == 1
    assert value(after, "drover_run_duration_seconds_sum") >= 3
    assert value(after, "drover_output_bytes_total") >= 105 and value(after, "drover_output_lines_total") >= 1
    assert value(after, "drover_runs", state="running") == 0
    assert value(scrape(agent_url), "drover_agent_busy_slots") == 0
    assert value(scrape(agent_url), "drover_agent_connected") == 1

    for samples in (after, scrape(agent_url)):
        for name, labels in samples:
            assert name.startswith(("drover_", "python_", "process_")), name
            assert not any(v.startswith(("run_", "chg_", "tsk_")) for _, v in labels), (name, labels)

    # The dashboard only asks for metrics the endpoints serve.
    dashboard = json.loads((ROOT / "deploy" / "grafana" / "drover.json").read_text())
    asked = {
        m
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
        for m in re.findall(r"\b(drover_[a-z_]+?)(?:_bucket|_count|_sum)?\b", target["expr"])
    }
    served = {name for url in (plane_url, agent_url) for name in families(url)}
    assert asked and asked <= served, asked - served

    # No name is served by both daemons: a sum() over every target must not count a thing twice.
    plane_names, agent_names = (
        {n for n in families(url) if not n.startswith(("python_", "process_"))} for url in (plane_url, agent_url)
    )
    assert "drover_agent_capacity_slots" in agent_names and "drover_fleet_capacity_slots" in plane_names
    assert plane_names & agent_names == set()


def test_metrics_are_off_unless_asked(fleet: Fleet, tmp_path: pathlib.Path) -> None:
    plane = fleet.start_plane()
    assert "metrics on" not in plane_log(plane)


def test_money_metrics_are_in_dollars_and_each_meter_unit_has_its_own_name(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    # 2,300 input and 2,000 output tokens at haiku prices ($1 and $5 a million): $0.0123.
    model.extend(
        [fake.tool_use("complete_task", {"summary": "read"}, usage={"input_tokens": 2300, "output_tokens": 2000})]
    )
    config = tmp_path / "controlplane.toml"
    config.write_text("[tiers.haiku]\nmax_output_tokens = 4000\n")  # a reservation that covers the call
    fleet.plane.extra_env.update(ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=API_KEY)
    plane = fleet.start_plane("--metrics-listen", "127.0.0.1:0", "--config", str(config))
    plane.add_project("calc", str(calc_repo))
    fleet.agent("spender")
    url = wait_for(lambda: endpoint(plane_log(plane)), 30, what="the control plane's metrics endpoint")
    with plane.client() as client:
        small = {"key": "a", "kind": "implement", "objective": "read calc.py", "size": "small", "risk": "low"}
        change = client.submit_change("calc", "spend", [small])
        list(client.watch(change.id))
        assert client.get_change(change.id).status == "succeeded"
        assert client.get_spend(change.id).spent_micros == 12_300

    samples = scrape(url)
    assert value(samples, "drover_model_spend_usd_total") == pytest.approx(0.0123)
    assert value(samples, "drover_meter_used_usd", kind="provider_month") == pytest.approx(0.0123)
    assert value(samples, "drover_meter_reserved_usd", kind="provider_month") == 0
    assert value(samples, "drover_meter_used_calls", kind="agent_calls_day") == 1
    names = families(url)
    assert {"drover_meter_used_usd", "drover_meter_limit_usd", "drover_meter_used_calls"} <= names
    assert not names & {"drover_meter_used", "drover_meter_limit", "drover_agent_capacity_slots"}  # renamed
    assert all("unit" not in dict(labels) for name, labels in samples if name.startswith("drover_meter_"))
