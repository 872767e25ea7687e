"""Several control-plane replicas on one PostgreSQL database: one is killed with kill -9 while runs
stream numbered lines and reserve and settle model calls; the fleet carries on through the others."""

from __future__ import annotations

import json
import pathlib
import subprocess
import time
from typing import Any

import pytest
import sqlalchemy

from controlplane.store import escrow
from controlplane.store.engine import Store
from controlplane.store.meters import usage
from drover import Client
from drover.testing import fake_anthropic as fake
from tests.conftest import API_KEY, AgentD, ControlPlane, make_repo, wait_for

RUNS = 30
CALLS = 12  # model calls per run before it completes: each one a reserve and a settle
AGENTS = 6


def numbered(body: Any) -> fake.Step:
    """Each conversation on its own: reply n says "line n" and lists files, until the last completes."""
    done = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
    time.sleep(0.05)  # a model takes a while: the kill lands while calls are in flight
    if done < CALLS:
        return fake.tool_use("list_files", {}, text=f"line {done + 1}")
    return fake.tool_use("complete_task", {"summary": "counted"})


def leader(replicas: list[ControlPlane]) -> ControlPlane:
    def leading() -> ControlPlane | None:
        for plane in replicas:
            text = "".join(p.read_text(errors="replace") for p in plane.data_dir.glob("controlplane-*.log"))
            if "now leads" in text:
                return plane
        return None

    return wait_for(leading, 30, what="a replica to lead")


def lines_of(client: Client, run_id: str) -> list[str]:
    texts = []
    for line in client.run_logs(run_id):
        if line.stream != "event":
            continue
        for raw in line.text.splitlines():
            event = json.loads(raw)
            if event.get("kind") == "text" and str(event.get("text", "")).startswith("line "):
                texts.append(event["text"])
    return texts


@pytest.mark.timeout(600)
def test_killing_a_replica_loses_no_run_line_or_dollar(tmp_path: pathlib.Path, pg_url: str) -> None:
    model = fake.FakeAnthropic(api_key=API_KEY, responder=numbered).start()
    env = {"ANTHROPIC_BASE_URL": model.base_url, "ANTHROPIC_API_KEY": API_KEY}
    replicas = [ControlPlane(tmp_path / f"cp{i}", pg_url, extra_env=env) for i in range(3)]
    agents: list[AgentD] = []
    try:
        for plane in replicas:  # the first creates the schema and the tokens; the others join it
            plane.start()
        first = replicas[0]
        first.add_project("calc", str(make_repo(tmp_path / "calc", {"calc.py": "def add(a, b):\n    return a\n"})))
        targets = [p.target for p in replicas]
        for i in range(AGENTS):
            order = ",".join(targets[i % 3 :] + targets[: i % 3])  # two agents dial each replica first
            agent = AgentD(f"a{i}", first, tmp_path / f"agent-a{i}", capacity=5, extra=("--control-plane", order))
            agents.append(agent.start())
        with replicas[1].client(first.admin_token) as client:
            wait_for(lambda: sum(a.connected for a in client.list_agents()) == AGENTS, 60, what="every agent")
            tasks = [
                {"key": f"t{i:02d}", "kind": "review", "objective": f"count {i}", "complexity": "medium"}
                for i in range(RUNS)
            ]
            change = client.submit_change("calc", "count lines", tasks, budget_usd=300.0)
            # Kill the leader (routing, sweeps) while the runs are in the middle of their calls.
            wait_for(lambda: len(model.requests) >= RUNS * CALLS // 3, 180, what="a third of the model calls")
            doomed = leader(replicas)
            doomed.kill9()
            killed_at = time.monotonic()
        alive = [p for p in replicas if p is not doomed]
        with alive[0].client(first.admin_token) as client:
            try:
                wait_for(lambda: client.get_change(change.id).status in ("succeeded", "failed"), 300, what="the Change")
            except AssertionError:
                runs = client.list_runs(change_id=change.id, limit=100)
                raise AssertionError([(r.task_key, r.state, r.attempt, r.agent, r.reason) for r in runs]) from None
            recovered = time.monotonic() - killed_at
            final = client.get_change(change.id)
            runs = client.list_runs(change_id=change.id, limit=100)
            lines = {run.id: lines_of(client, run.id) for run in runs}
            agents_now = client.list_agents()
        assert final.status == "succeeded", [(t.key, t.status) for t in final.tasks]
        assert len(runs) == RUNS and all(r.state == "succeeded" and r.attempt == 1 for r in runs), [
            (r.id, r.state, r.attempt, r.reason) for r in runs
        ]
        expected = [f"line {n}" for n in range(1, CALLS + 1)]
        assert all(got == expected for got in lines.values()), {k: v for k, v in lines.items() if v != expected}
        assert sum(a.connected for a in agents_now) == AGENTS  # the dead replica's agents dialled the others
        _assert_spend_is_exact(pg_url, change.id)
        print(f"all {RUNS} runs finished {recovered:.1f} s after the kill")
    finally:
        for agent in agents:
            agent.stop()
        for plane in replicas:
            plane.stop()
        model.stop()
        subprocess.run(["pkill", "-9", "-f", f"supervisor {tmp_path}"], check=False)


def _assert_spend_is_exact(url: str, change_id: str) -> None:
    """Every meter's used is the sum of the settled calls, nothing stays reserved, no limit is passed."""
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as conn:
            settled, calls, open_ = conn.execute(
                sqlalchemy.text(
                    "SELECT coalesce(sum(cost_micros) FILTER (WHERE state = 'settled'), 0),"
                    " count(*) FILTER (WHERE state = 'settled'), count(*) FILTER (WHERE state <> 'settled')"
                    " FROM model_calls"
                )
            ).one()
    finally:
        engine.dispose()
    store = Store(url)
    try:  # as `drover usage` reads them: the escrow slices' counts in, their unused grants out
        meters = {m["key"]: (m["used"], m["reserved"], m["limit"]) for m in store.transaction(usage)}
        assert store.transaction(escrow.violations) == []
    finally:
        store.close()
    assert open_ == 0 and calls >= RUNS * (CALLS + 1)
    change = meters[f"change-usd:{change_id}"]
    assert change[0] == settled and change[1] == 0 and change[0] <= change[2], (change, settled)
    for key, (used, reserved, limit) in meters.items():
        assert reserved == 0, key
        assert not limit or used <= limit, key
        if key.startswith("agent-calls:"):
            assert used == calls
