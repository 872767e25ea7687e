"""agentd's prepared workspaces with a real control plane and agentd on loopback, a real git repository
and bubblewrap: a second run of a project on the same agent starts from what the first run's setup
made and skips setup; a changed cache key file, or a damaged entry, runs setup again; the run's command
sees its own commit and never the cache; a run whose supervisor dies has its overlay released at once."""

from __future__ import annotations

import fcntl
import json
import os
import pathlib
import re
import signal
import subprocess
from typing import Any

import pytest

from agentd.run import prepared_cache
from drover.testing import fake_anthropic as fake
from tests.conftest import API_KEY, AgentD, Fleet, make_repo, python_command, task, wait_for
from tests.fleet.test_console import Console, console_url
from tests.fleet.test_harness_fleet import SLOW_TEST
from tests.fleet.test_metrics import endpoint, scrape, value

pytestmark = pytest.mark.timeout(240)

# setup leaves an untracked file holding a nonce of its own: a run that shows the first run's nonce
# started from the first run's prepared tree
SETUP = "mkdir -p build && od -An -N8 -tx1 /dev/urandom | tr -d ' \\n' > build/nonce"
SHOW = python_command(
    "import pathlib\n"
    "print('nonce', pathlib.Path('build/nonce').read_text())\n"
    "print('app', pathlib.Path('app.py').read_text().strip())\n"
)


def git(repo: pathlib.Path, *args: str) -> None:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    subprocess.run(["git", *args], cwd=repo, env={**env, "PATH": "/usr/bin:/bin"}, check=True, capture_output=True)


def change_file(repo: pathlib.Path, name: str, text: str) -> None:
    (repo / name).write_text(text)
    git(repo, "add", name)
    git(repo, "commit", "-q", "-m", f"change {name}")


def start(
    fleet: Fleet, tmp_path: pathlib.Path, *extra: str, plane_args: tuple[str, ...] = ()
) -> tuple[pathlib.Path, AgentD, pathlib.Path]:
    """A project whose setup makes build/nonce, keyed by requirements.txt, and one agent with its cache."""
    origin = make_repo(tmp_path / "origin", {"app.py": "VERSION = 1\n", "requirements.txt": "attrs\n"})
    fleet.start_plane(*plane_args)
    cache = tmp_path / "agent-cache"
    fleet.plane.cli(
        "project",
        "add",
        "app",
        "--repo",
        str(origin),
        "--branch",
        "main",
        "--setup",
        SETUP,
        "--cache-key-file",
        "requirements*.txt",
    )
    agent = fleet.agent("warm-agent", extra=("--prepared-cache-dir", str(cache), *extra))
    return origin, agent, cache


def run_once(fleet: Fleet, command: list[str] = SHOW) -> tuple[Any, dict[str, str], str]:
    """One Change of one command Task in project `app`: its run, what it printed, its whole log."""
    with fleet.plane.client() as client:
        change = client.submit_change("app", "show", [task("show", command)])
        list(client.watch(change.id))
        run = client.list_runs(change_id=change.id)[0]
        lines = list(client.run_logs(run.id))
    log = "".join(line.text for line in lines)
    assert run.state == "succeeded", log
    printed = dict(
        line.split(" ", 1)
        for line in "".join(x.text for x in lines if x.stream == "stdout").splitlines()
        if " " in line
    )
    return run, printed, log


def entries(cache: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for p in (cache / "app").glob("*") if not p.name.startswith("."))


def test_the_second_run_starts_prepared_and_a_changed_key_file_runs_setup_again(
    fleet: Fleet, tmp_path: pathlib.Path
) -> None:
    origin, agent, cache = start(fleet, tmp_path, "--metrics-listen", "127.0.0.1:0")
    first, shown, log = run_once(fleet)
    assert not first.setup_cached and first.setup_seconds > 0
    assert "setup: [1/1]" in log and "no prepared workspace" in log
    assert len(entries(cache)) == 1

    change_file(origin, "app.py", "VERSION = 2\n")  # not a key file: still a hit, at the new commit
    second, shown_again, log = run_once(fleet)
    assert second.setup_cached, log
    assert "setup: [1/1]" not in log and "the workspace came prepared" in log
    assert shown_again == {"nonce": shown["nonce"], "app": "VERSION = 2"}

    change_file(origin, "requirements.txt", "attrs==23.2.0\n")
    third, shown_third, log = run_once(fleet)
    assert not third.setup_cached and "setup: [1/1]" in log
    assert shown_third["nonce"] != shown["nonce"]
    assert len(entries(cache)) == 2  # one per key

    fourth, shown_fourth, _ = run_once(fleet)
    assert fourth.setup_cached and shown_fourth["nonce"] == shown_third["nonce"]

    url = wait_for(lambda: endpoint(agent.log()), 30, what="agentd's metrics endpoint")
    metrics = scrape(url)
    assert value(metrics, "drover_agent_prepared_workspace_hits_total") == 2
    assert value(metrics, "drover_agent_prepared_workspace_misses_total") == 2
    assert value(metrics, "drover_agent_setup_seconds_count") == 4
    seconds = sum(r.setup_seconds for r in (first, second, third, fourth))
    assert value(metrics, "drover_agent_setup_seconds_sum") == pytest.approx(seconds, abs=0.01)


def test_the_console_shows_whether_setup_ran_or_the_workspace_came_prepared(
    fleet: Fleet, tmp_path: pathlib.Path
) -> None:
    start(fleet, tmp_path, plane_args=("--http-listen", "127.0.0.1:0"))
    cold, _, _ = run_once(fleet)
    warm, _, _ = run_once(fleet)
    console = Console(console_url(fleet))
    assert console.sign_in(fleet.plane.admin_token).status_code == 303
    cold_page, warm_page = console.get(f"/runs/{cold.id}").text, console.get(f"/runs/{warm.id}").text
    assert re.search(r'id="run-setup">ran in [\d.]+ s \(no prepared workspace matched\)', cold_page), cold_page
    assert re.search(r'id="run-setup">skipped: the workspace came prepared from the agent.*s cache', warm_page)


def test_a_damaged_entry_is_not_used(fleet: Fleet, tmp_path: pathlib.Path) -> None:
    _, _, cache = start(fleet, tmp_path)
    _, shown, _ = run_once(fleet)
    [entry] = entries(cache)
    (entry / prepared_cache.TREE / "build" / "nonce").write_text("tampered")  # another size, another time
    again, shown_again, log = run_once(fleet)
    assert not again.setup_cached and "setup: [1/1]" in log
    assert shown_again["nonce"] not in (shown["nonce"], "tampered")
    [kept] = entries(cache)  # the damaged entry went; the new setup's result took its place
    assert (kept / prepared_cache.TREE / "build" / "nonce").read_text() == shown_again["nonce"]


def test_the_sandboxed_command_sees_its_copy_and_never_the_cache(fleet: Fleet, tmp_path: pathlib.Path) -> None:
    _, agent, cache = start(fleet, tmp_path)
    run_once(fleet)
    [entry] = entries(cache)
    probe = python_command(
        "import json, os, pathlib\n"
        f"cache = {str(cache)!r}\n"
        "pathlib.Path('build/nonce').write_text('written by the Task')\n"
        "pathlib.Path('build/new').write_text('new')\n"
        "print('seen', json.dumps({'cache': os.path.exists(cache),"
        " 'layers': os.path.exists('../.prepared'), 'cwd': os.getcwd()}))\n"
    )
    run, printed, log = run_once(fleet, probe)
    assert run.setup_cached, log
    seen = json.loads(printed["seen"])
    assert seen["cache"] is False and seen["layers"] is False, seen  # neither the entry nor the overlay's layers
    assert seen["cwd"].startswith(str(agent.work_dir))
    # what the Task wrote went to its own copy: the entry is as setup left it, and still used
    assert (entry / prepared_cache.TREE / "build" / "nonce").read_text() != "written by the Task"
    assert not (entry / prepared_cache.TREE / "build" / "new").exists()
    assert prepared_cache.read_entry(entry) is not None
    mounts = pathlib.Path("/proc/mounts").read_text().splitlines()
    assert not [line for line in mounts if str(agent.work_dir) in line]  # its overlay unmounted


def test_a_dead_supervisors_overlay_is_released_without_waiting_for_agentds_restart(
    fleet: Fleet, tmp_path: pathlib.Path
) -> None:
    _, agent, _ = start(fleet, tmp_path)
    run_once(fleet)  # the entry the next run's overlay sits on
    wait = python_command("import time\nprint('ready', flush=True)\ntime.sleep(120)\n")
    with fleet.plane.client() as client:
        change = client.submit_change("app", "wait", [task("wait", wait)])
        run_id = wait_for(lambda: [r.id for r in client.list_runs(change_id=change.id)], what="the run")[0]
        wait_for(
            lambda: "ready" in "".join(line.text for line in client.run_logs(run_id)), timeout=60, what="the command"
        )
        workspace = agent.work_dir / run_id
        assert os.path.ismount(workspace / "repo")  # a warm start: an overlay of the entry
        pid = int((agent.spool / "runs" / run_id / "supervisor.pid").read_text().split()[0])
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: client.get_run(run_id).state == "failed", timeout=60, what="the run to end")
        assert client.get_run(run_id).reason == "supervisor_lost"
        wait_for(lambda: not workspace.exists(), timeout=30, what="the dead run's workspace to go")
    mounts = pathlib.Path("/proc/mounts").read_text()
    assert str(agent.work_dir) not in mounts
    assert agent.proc is not None and agent.proc.poll() is None and agent.starts == 1  # no restart did it


def supervisor_pid(agent: AgentD, run_id: str) -> int:
    try:
        return int((agent.spool / "runs" / run_id / "supervisor.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def held(entry: pathlib.Path) -> bool:
    """Whether a run holds the entry (a shared lock on its marker, which eviction's exclusive one meets)."""
    with open(entry / prepared_cache.MARKER) as marker:
        try:
            fcntl.flock(marker, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(marker, fcntl.LOCK_UN)
        return False


@pytest.mark.xdist_group("test_slow.py")  # pkill -f test_slow.py: one at a time
def test_a_harness_supervisor_started_again_holds_its_entry_against_eviction(
    fleet: Fleet, model: fake.FakeAnthropic, tmp_path: pathlib.Path
) -> None:
    fleet.plane.extra_env.update(ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=API_KEY)
    _, agent, cache = start(fleet, tmp_path)
    run_once(fleet)
    [entry] = entries(cache)
    slow = SLOW_TEST.replace("60", "30")
    model.extend(
        [
            fake.tool_use("write_file", {"path": "test_slow.py", "content": slow}),
            fake.tool_use("run_command", {"command": "python -m pytest -q test_slow.py"}),
            fake.tool_use("run_command", {"command": "python -m pytest -q test_slow.py"}),  # after the restart
        ]
    )
    implement = {"key": "slow", "kind": "implement", "objective": "slow", "complexity": "medium"}
    with fleet.plane.client() as client:
        change = client.submit_change("app", "slow", [implement])
        run_id = wait_for(lambda: client.get_change(change.id).tasks[0].latest_run_id, 20)
        ran = agent.work_dir / run_id / "repo" / "runs.log"
        wait_for(ran.exists, 60, what="the slow test to start")
        assert held(entry)
        first = supervisor_pid(agent, run_id)
        os.kill(first, signal.SIGKILL)  # agentd starts the harness's supervisor again: it resumes the run
        subprocess.run(["pkill", "-9", "-f", "test_slow.py"], check=False)
        wait_for(lambda: supervisor_pid(agent, run_id) not in (0, first), 30, what="a new supervisor")
        wait_for(lambda: ran.exists() and ran.read_text().count("ran") == 2, 60, what="the resumed run's command")
        assert held(entry)  # by the new supervisor: eviction still passes the entry by
        client.cancel_run(run_id)
        wait_for(lambda: client.get_run(run_id).state == "cancelled", 30, what="the run to be cancelled")
    wait_for(lambda: not held(entry), 30, what="the entry's lock to go with the run")
