"""agentd's repository mirrors, whole system (issue 27, warm workspaces): a project on a forge that
needs a token; the first run creates this agent's mirror of it, which the run's sandbox cannot see;
between runs agentd fetches the forge's new commits into the mirror with the run's credential (no run
asks for it), and the next run starts at the newest commit. The credential is in no file under the
agent's directories and in no log."""

from __future__ import annotations

import pathlib
import subprocess
import sys
from collections.abc import Iterator

import pygit2
import pytest

from drover import Client
from drover.core import mirror
from drover.testing.git_http import GitHttpServer
from tests.conftest import Fleet, task, wait_for
from tests.core.test_mirror import commit_on
from tests.secrets_at_rest import files_holding

pytestmark = pytest.mark.timeout(240)

TOKEN = "ghp_fleet-mirror-token-4d7e2a91c6"


@pytest.fixture
def forge(tmp_path: pathlib.Path, calc_repo: pathlib.Path) -> Iterator[GitHttpServer]:
    root = tmp_path / "forge"
    root.mkdir()
    subprocess.run(["git", "clone", "-q", "--bare", str(calc_repo), str(root / "calc.git")], check=True)
    with GitHttpServer(root, {TOKEN}) as server:
        yield server


def mirrored_tip(mirrors: pathlib.Path, url: str) -> str:
    path = mirror.path_for(mirrors, url)
    if not (path / "refs").is_dir():
        return ""
    return str(pygit2.Repository(str(path)).references["refs/heads/main"].target)


def look_around(client: Client, mirrors: pathlib.Path) -> tuple[str, str]:
    """A command Task that looks for the agent's mirrors from inside its sandbox: its status and log."""
    probe = f"import os; print('mirrors visible:', os.path.exists({str(mirrors)!r})); print(sorted(os.listdir()))"
    change = client.submit_change("calc", "look", [task("look", [sys.executable, "-c", probe])])
    list(client.watch(change.id))
    done = client.get_change(change.id).tasks[0]
    return done.status, "".join(line.text for line in client.run_logs(done.latest_run_id))


def test_runs_clone_through_a_mirror_agentd_keeps_fresh_between_runs(
    tmp_path: pathlib.Path, fleet: Fleet, forge: GitHttpServer
) -> None:
    fleet.start_plane()
    (tmp_path / "git.token").write_text(TOKEN + "\n")
    url = forge.url("calc")
    fleet.plane.cli("project", "add", "calc", "--repo", url, "--git-token-file", str(tmp_path / "git.token"))
    agent = fleet.agent("worker", extra=("--mirror-refresh-seconds", "1"))
    mirrors = agent.root / "mirrors"
    origin = tmp_path / "forge" / "calc.git"
    with fleet.plane.client() as client:
        status, log = look_around(client, mirrors)
        assert status == "succeeded", log
        assert "mirrors visible: False" in log and "calc.py" in log
        first = mirrored_tip(mirrors, url)
        assert first and f"at commit {first}" in log

        newer = commit_on(origin, "main", "calc.py", "def add(a, b):\n    return a + b\n")
        asked = len(forge.attempts)
        wait_for(lambda: mirrored_tip(mirrors, url) == newer, timeout=60, what="agentd's refresh between runs")
        assert len(forge.attempts) > asked and set(forge.attempts[asked:]) <= {TOKEN, ""}

        status, log = look_around(client, mirrors)
        assert status == "succeeded" and f"at commit {newer}" in log, log

    held = files_holding(agent.root, [TOKEN.encode()])  # spare run-disk images too, their written blocks
    logs = "".join(p.read_text(errors="replace") for p in fleet.plane.data_dir.glob("controlplane-*.log"))
    assert held == [] and TOKEN not in agent.log() and TOKEN not in logs
