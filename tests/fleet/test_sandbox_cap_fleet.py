"""The per-Change sandbox cap on a real fleet: a project with max_open_sandboxes_per_change 2 and an agent
with room for 5 runs has at most 2 command runs of one Change at once (each runs its command in a sandbox);
the others stay queued, noted blocked_limit (an event once per run naming the cap, a notice in GetChange and
on the console's Change page), and start as those runs finish. A run that opens no sandbox (a review
Task's harness run) is not held by it: it starts while the Change's sandbox runs still wait."""

from __future__ import annotations

import html
import os
import pathlib
import subprocess
import sys

import pytest

from controlplane.web import session
from drover import Client
from drover.errors import InvalidArgument
from drover.models import Run
from drover.testing import fake_anthropic as fake
from tests.conftest import API_KEY, AgentD, Fleet, python_command, task, wait_for
from tests.controlplane.web.test_console_projects_and_tokens import console, signed_in
from tests.fleet.test_change_caps_fleet import most_at_once

SLEEP = "import time; time.sleep(3)"
# Holds the run until the test creates `release` in its workspace (all it sees of the host), then takes
# it away again, so the Task's work adds no file.
HOLD = python_command(
    "import os, time\nprint('holding', flush=True)\n"
    "while not os.path.exists('release'): time.sleep(0.02)\nos.remove('release')\n"
)


def finished(client: Client, change_id: str, count: int) -> list[Run] | None:
    runs = client.list_runs(change_id=change_id)
    done = [r for r in runs if r.state in ("succeeded", "failed", "cancelled")]
    return runs if len(done) == count else None


def release_the_next(client: Client, agent: AgentD, change_id: str, released: str) -> str:
    """Wait for a command run of the Change (other than `released`) to hold in its command, then release it."""

    def holding() -> str:
        for r in client.list_runs(change_id=change_id):
            if r.task_key != "review" and r.state == "running" and r.id != released:
                return r.id if "holding\n" in [ln.text for ln in client.run_logs(r.id)] else ""
        return ""

    run_id = wait_for(holding, 60, what="a command run holding the sandbox")
    (agent.work_dir / run_id / "repo" / "release").touch()
    return run_id


def test_a_change_opens_at_most_its_sandbox_cap(fleet: Fleet) -> None:
    plane = fleet.start_plane("--http-listen", "127.0.0.1:0")
    url, csrf = console(plane), session.csrf_token(plane.admin_token)
    plane.cli("project", "add", "boxed", "--repo", "", "--max-open-sandboxes-per-change", "3")
    fleet.agent("worker", capacity=5)
    with fleet.plane.client() as client:
        for bad in (0, 1001):
            with pytest.raises(InvalidArgument) as err:
                client.projects.update("boxed", max_open_sandboxes_per_change=bad)
            assert err.value.field == "project.max_open_sandboxes_per_change"
        got = client.projects.get("boxed")
        assert (got.max_open_sandboxes_per_change, got.max_active_runs_per_change) == (3, 8)  # the host's flag
        env = {**os.environ, "DROVER_TARGET": plane.target, "DROVER_TOKEN": plane.admin_token}
        cli = [sys.executable, "-m", "drover.cli", "project", "update", "boxed", "--max-open-sandboxes-per-change"]
        said = subprocess.run([*cli, "0"], env=env, capture_output=True, text=True, timeout=60)
        assert said.returncode != 0 and "max_open_sandboxes_per_change" in said.stderr
        subprocess.run([*cli, "6"], env=env, capture_output=True, text=True, timeout=60, check=True)
        assert client.projects.get("boxed").max_open_sandboxes_per_change == 6
        with signed_in(url, plane.admin_token) as http:  # the console's admission form sets it to 2
            form = {"csrf": csrf, "max_open_sandboxes_per_change": "0"}
            refused = http.post("/projects/boxed/admission", data=form)
            assert refused.status_code == 400
            assert "INVALID_ARGUMENT: project.max_open_sandboxes_per_change: " in html.unescape(refused.text)
            saved = http.post("/projects/boxed/admission", data={**form, "max_open_sandboxes_per_change": "2"})
            assert saved.status_code == 303
            assert "at most 2" in http.get("/projects/boxed").text
        got = client.projects.get("boxed")
        assert (got.max_open_sandboxes_per_change, got.max_active_runs_per_change) == (2, 8)  # the other stays
        change = client.submit_change("boxed", "four at once", [task(f"t{i}", python_command(SLEEP)) for i in range(4)])
        notice = wait_for(
            lambda: next((n for n in client.get_change(change.id).notices if n.startswith("blocked_limit")), None),
            30,
            what="the blocked_limit notice on the Change",
        )
        with signed_in(url, plane.admin_token) as http:
            page = html.unescape(http.get(f"/changes/{change.id}").text)
        assert "blocked_limit: " in page and "max_open_sandboxes_per_change is 2" in page
        runs = wait_for(lambda: finished(client, change.id, 4), 90, what="the Change's 4 runs")
        held = client.list_events(change_id=change.id, kind="run.blocked_limit")
        assert client.get_change(change.id).status == "succeeded"
        assert not client.get_change(change.id).notices  # nothing queued any more: the notice goes
    assert "max_open_sandboxes_per_change is 2" in notice and "open sandboxes: 2" in notice
    assert all(r.state == "succeeded" for r in runs)
    assert most_at_once(runs) == 2  # the cap, and up to it: the agent had room for 5
    # Two runs were held, each said once (not on every dispatch pass), naming the sandbox cap.
    assert len(held) == 2 and len({e.run_id for e in held}) == 2
    assert all(e.data["cap"] == "max_open_sandboxes_per_change" and e.data["limit"] == 2 for e in held)
    assert all(e.data["active"] == 2 for e in held)


def test_a_change_at_its_sandbox_cap_still_starts_runs_that_open_none(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path
) -> None:
    """Two command runs (each a sandbox) under a cap of 1, each held until the test releases it, and a
    review run (it reads the canonical commit: no sandbox): the review runs to its end while one command
    run is held."""
    model.extend([fake.tool_use("complete_task", {"summary": "reviewed"})])
    fleet.plane.extra_env.update(ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=API_KEY)
    plane = fleet.start_plane()
    plane.cli("project", "add", "calc", "--repo", str(calc_repo), "--max-open-sandboxes-per-change", "1")
    agent = fleet.agent("worker", capacity=4)
    review = {"key": "review", "kind": "review", "objective": "review calc", "complexity": "medium"}
    with plane.client() as client:
        change = client.submit_change("calc", "one sandbox", [task("a", HOLD), task("b", HOLD), review])

        def reviewed() -> dict[str, str] | None:
            states = {r.task_key: r.state for r in client.list_runs(change_id=change.id)}
            return states if states.get("review") == "succeeded" else None

        states = wait_for(reviewed, 90, what="the review run to finish")
        notices = client.get_change(change.id).notices
        first = release_the_next(client, agent, change.id, "")  # each in turn, as the one sandbox frees
        release_the_next(client, agent, change.id, first)
        runs = wait_for(lambda: finished(client, change.id, 3), 60, what="the Change's 3 runs")
        held = client.list_events(change_id=change.id, kind="run.blocked_limit")
    assert sorted(states[k] for k in ("a", "b")) == ["queued", "running"], states  # one sandbox, one held
    assert any("max_open_sandboxes_per_change is 1" in n for n in notices), notices
    assert all(r.state == "succeeded" for r in runs), [(r.task_key, r.state, r.reason) for r in runs]
    commands = [r for r in runs if r.task_key != "review"]
    assert most_at_once(commands) == 1
    assert [e.data["cap"] for e in held] == ["max_open_sandboxes_per_change"]
    assert held[0].run_id == max(commands, key=lambda r: r.started_at or 0).id  # the later one waited
