"""Per-Change admission caps on a real fleet: a project with max_active_runs_per_change 2 and an agent
with room for 4 runs at most 2 runs of one Change at once; the rest stay queued, noted blocked_limit (an
event once per run, a notice in GetChange), and start as the Change's runs finish. Another Change of the
project is not held by the first one's cap: it gets the free slots at once."""

from __future__ import annotations

import datetime as dt
import html
import os
import subprocess
import sys

import pytest

from controlplane.web import session
from drover.errors import InvalidArgument
from drover.models import Run
from tests.conftest import Fleet, python_command, task, wait_for
from tests.controlplane.web.test_console_projects_and_tokens import console, signed_in

SLEEP = "import time; time.sleep(3)"


def most_at_once(runs: list[Run]) -> int:
    """The most runs whose [started, finished] intervals overlap at one moment."""
    edges: list[tuple[dt.datetime, int]] = []
    for r in runs:
        assert r.started_at is not None and r.finished_at is not None
        edges += [(r.started_at, 1), (r.finished_at, -1)]
    most = now = 0
    for _, step in sorted(edges, key=lambda e: (e[0], e[1])):  # a finish before a start at the same instant
        now += step
        most = max(most, now)
    return most


def test_a_change_runs_at_most_its_cap_and_another_change_gets_the_free_slots(fleet: Fleet) -> None:
    plane = fleet.start_plane("--http-listen", "127.0.0.1:0")
    url, csrf = console(plane), session.csrf_token(plane.admin_token)
    plane.cli("project", "add", "capped", "--repo", "", "--max-active-runs-per-change", "3")
    fleet.agent("worker", capacity=4)
    with fleet.plane.client() as client:
        for bad in (0, 1001):
            with pytest.raises(InvalidArgument) as err:
                client.projects.update("capped", max_active_runs_per_change=bad)
            assert err.value.field == "project.max_active_runs_per_change"
        assert client.projects.get("capped").max_active_runs_per_change == 3  # as the host's command set it
        env = {**os.environ, "DROVER_TARGET": plane.target, "DROVER_TOKEN": plane.admin_token}
        cli = [sys.executable, "-m", "drover.cli", "project", "update", "capped", "--max-active-runs-per-change"]
        said = subprocess.run([*cli, "0"], env=env, capture_output=True, text=True, timeout=60)
        assert said.returncode != 0 and "max_active_runs_per_change" in said.stderr
        subprocess.run([*cli, "8"], env=env, capture_output=True, text=True, timeout=60, check=True)
        assert client.projects.get("capped").max_active_runs_per_change == 8
        with signed_in(url, plane.admin_token) as http:  # the console's admission form sets it to 2
            refused = http.post("/projects/capped/admission", data={"csrf": csrf, "max_active_runs_per_change": "0"})
            assert refused.status_code == 400
            assert "INVALID_ARGUMENT: project.max_active_runs_per_change: " in html.unescape(refused.text)
            saved = http.post("/projects/capped/admission", data={"csrf": csrf, "max_active_runs_per_change": "2"})
            assert saved.status_code == 303
            assert "at most 2" in http.get("/projects/capped").text
        assert client.projects.get("capped").max_active_runs_per_change == 2
        big = client.submit_change("capped", "four at once", [task(f"t{i}", python_command(SLEEP)) for i in range(4)])
        notice = wait_for(
            lambda: next((n for n in client.get_change(big.id).notices if n.startswith("blocked_limit")), None),
            30,
            what="the blocked_limit notice on the Change",
        )
        with signed_in(url, plane.admin_token) as http:
            page = html.unescape(http.get(f"/changes/{big.id}").text)
        assert "blocked_limit: " in page and "max_active_runs_per_change is 2" in page
        small = client.submit_change("capped", "two more", [task(f"s{i}", python_command(SLEEP)) for i in range(2)])

        def finished(change_id: str, count: int) -> list[Run] | None:
            runs = client.list_runs(change_id=change_id)
            done = [r for r in runs if r.state in ("succeeded", "failed", "cancelled")]
            return runs if len(done) == count else None

        big_runs = wait_for(lambda: finished(big.id, 4), 90, what="the big Change's 4 runs")
        small_runs = wait_for(lambda: finished(small.id, 2), 60, what="the small Change's 2 runs")
        held = client.list_events(change_id=big.id, kind="run.blocked_limit")
        small_held = client.list_events(change_id=small.id, kind="run.blocked_limit")
        assert client.get_change(big.id).status == "succeeded"
        assert client.get_change(small.id).status == "succeeded"
        assert not client.get_change(big.id).notices  # nothing queued any more: the notice goes
    assert "max_active_runs_per_change is 2" in notice and "2 active" in notice
    assert all(r.state == "succeeded" for r in big_runs + small_runs)
    assert most_at_once(big_runs) == 2  # the cap, and up to it
    # Two runs of the big Change were held, each said once (not on every dispatch pass).
    assert len(held) == 2 and len({e.run_id for e in held}) == 2
    assert all(e.data["cap"] == "max_active_runs_per_change" and e.data["limit"] == 2 for e in held)
    assert all(e.data["active"] == 2 for e in held)
    assert not small_held
    # The small Change took the two free slots while the big one's held runs still waited for theirs.
    last_big_start = max(r.started_at for r in big_runs if r.started_at is not None)
    assert all(r.started_at is not None and r.started_at < last_big_start for r in small_runs)
    assert most_at_once(big_runs + small_runs) == 4
