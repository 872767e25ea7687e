"""Fair sharing on a real fleet: a 2-Task Change submitted after a 40-Task one of the same project starts
at once beside it (the next free slots go to the Change with fewer active runs) and finishes while the
big one still runs and still has queued runs, instead of waiting for all 40 to go first. The project's
weight goes through the host's command, the API, the drover CLI and the console's admission form."""

from __future__ import annotations

import html
import os
import subprocess
import sys

import pytest

from controlplane.web import session
from drover.errors import InvalidArgument
from drover.models import Run
from tests.conftest import Fleet, task, wait_for
from tests.controlplane.web.test_console_projects_and_tokens import console, signed_in

SLOTS = 3


def test_a_small_change_submitted_after_a_big_one_runs_beside_it(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    plane.cli("project", "add", "web", "--repo", "")
    fleet.agent("worker", capacity=SLOTS)
    with plane.client() as client:
        big = client.submit_change("web", "forty naps", [task(f"t{i}", ["sleep", "2"]) for i in range(40)])

        def started(change_id: str) -> list[Run]:
            return [r for r in client.list_runs(change_id=change_id) if r.started_at is not None]

        wait_for(lambda: len(started(big.id)) >= SLOTS, 60, what="the big Change filling the agent")
        small = client.submit_change("web", "two naps", [task(f"s{i}", ["sleep", "1"]) for i in range(2)])
        wait_for(lambda: client.get_change(small.id).status == "succeeded", 60, what="the small Change's end")
        big_runs = client.list_runs(change_id=big.id)
        small_runs = client.list_runs(change_id=small.id)
        client.cancel_change(big.id)  # what it shows is shown; the rest would take another half minute
    states = [r.state for r in big_runs]
    assert states.count("queued") >= 20, states  # the big Change still waits for most of its runs...
    assert any(r.started_at is not None and r.finished_at is None for r in big_runs), states  # ...and runs
    assert all(r.state == "succeeded" for r in small_runs)
    last_small_start = max(r.started_at for r in small_runs if r.started_at is not None)
    before = [r for r in big_runs if r.started_at is not None and r.started_at < last_small_start]
    # The 3 that filled the agent, and at most one more at each of the small Change's two turns (a tie
    # of active runs goes to the older Change): oldest first across everything, it would have been 40.
    assert len(before) <= SLOTS + 2, len(before)


def test_a_projects_weight_is_set_and_checked_everywhere(fleet: Fleet) -> None:
    plane = fleet.start_plane("--http-listen", "127.0.0.1:0")
    url, csrf = console(plane), session.csrf_token(plane.admin_token)
    plane.cli("project", "add", "web", "--repo", "", "--weight", "3")
    with plane.client() as client:
        assert client.projects.get("web").weight == 3  # as the host's command set it
        for bad in (0, -1, 1001):
            with pytest.raises(InvalidArgument) as err:
                client.projects.update("web", weight=bad)
            assert err.value.field == "project.weight"
        assert client.projects.create("api", repo="").weight == 1  # unset: the default
        env = {**os.environ, "DROVER_TARGET": plane.target, "DROVER_TOKEN": plane.admin_token}
        cli = [sys.executable, "-m", "drover.cli", "project", "update", "web", "--weight"]
        said = subprocess.run([*cli, "1001"], env=env, capture_output=True, text=True, timeout=60)
        assert said.returncode != 0 and "weight" in said.stderr
        subprocess.run([*cli, "5"], env=env, capture_output=True, text=True, timeout=60, check=True)
        assert client.projects.get("web").weight == 5
        with signed_in(url, plane.admin_token) as http:  # the console's admission form
            refused = http.post("/projects/web/admission", data={"csrf": csrf, "weight": "0"})
            assert refused.status_code == 400
            assert "INVALID_ARGUMENT: project.weight: " in html.unescape(refused.text)
            saved = http.post("/projects/web/admission", data={"csrf": csrf, "weight": "2"})
            assert saved.status_code == 303
            assert '<dd class="weight">2</dd>' in http.get("/projects/web").text
        web = client.projects.get("web")
        assert (web.weight, web.max_active_runs_per_change) == (2, 8)  # the form named only the weight
