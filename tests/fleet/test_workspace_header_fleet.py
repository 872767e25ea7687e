"""The [anthropic] workspace_id reaches every Messages API call as the anthropic-workspace-id header."""

from __future__ import annotations

import pathlib
import subprocess
import sys

from drover.testing import fake_anthropic as fake
from tests.conftest import API_KEY, Fleet

HEADER = "anthropic-workspace-id"


def run_one_change(fleet: Fleet, model: fake.FakeAnthropic, repo: pathlib.Path, *plane_args: str) -> None:
    """A Task the rules leave to the classifier (a control-plane call), then two harness calls."""
    model.extend([fake.tool_use("list_files", {}), fake.tool_use("complete_task", {"summary": "looked"})])
    fleet.plane.extra_env.update(ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=API_KEY)
    fleet.start_plane(*plane_args)
    fleet.plane.add_project("calc", str(repo))
    fleet.agent("workspace-agent")
    with fleet.plane.client() as client:
        change = client.submit_change("calc", "look", [{"key": "look", "kind": "implement", "objective": "look"}])
        list(client.watch(change.id))
        assert client.get_change(change.id).status == "succeeded"


def test_a_configured_workspace_id_is_sent_by_the_classifier_and_the_harness(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    config = tmp_path / "workspace.toml"
    config.write_text('[anthropic]\nworkspace_id = "wrkspc_01Test-a"\n')
    run_one_change(fleet, model, calc_repo, "--config", str(config))
    calls = [r for r in model.requests if r.method == "POST"]
    assert calls[0].body["max_tokens"] == 100  # the control plane's classifier call
    assert len(calls) == 3 and model.pending == 0  # and the harness's two
    assert [r.headers.get(HEADER) for r in calls] == ["wrkspc_01Test-a"] * 3


def test_without_a_workspace_id_no_call_carries_the_header(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path
) -> None:
    run_one_change(fleet, model, calc_repo)
    calls = [r for r in model.requests if r.method == "POST"]
    assert len(calls) == 3 and all(HEADER not in r.headers for r in calls)


def test_an_invalid_workspace_id_stops_the_start_naming_the_setting(tmp_path: pathlib.Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('[anthropic]\nworkspace_id = "wrk spc"\n')
    done = subprocess.run(
        [sys.executable, "-m", "controlplane.cli", "serve", "--listen", "127.0.0.1:0"]
        + ["--data-dir", str(tmp_path / "cp"), "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "anthropic.workspace_id: 'wrk spc' is not a workspace id" in done.stderr
