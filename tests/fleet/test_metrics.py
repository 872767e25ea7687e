"""Prometheus endpoints of the control plane and agentd, scraped during a real run: the numbers move,
the names follow Prometheus conventions, no label carries a run id, and the Grafana dashboard in
deploy/ only asks for metrics that exist."""

from __future__ import annotations

import json
import pathlib
import re
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import ROOT, AgentD, ControlPlane, Fleet, python_command, task, wait_for


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
    assert value(before, "drover_agents_connected") == 1 and value(before, "drover_agent_capacity_slots") == 2
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
        assert value(during, "drover_agent_free_slots") == 1
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


def test_metrics_are_off_unless_asked(fleet: Fleet, tmp_path: pathlib.Path) -> None:
    plane = fleet.start_plane()
    assert "metrics on" not in plane_log(plane)
