"""Finding 6: the harness's commands ran in bubblewrap, but with /etc bound whole and, with no session
user configured, as uid 0: `git diff --no-index /etc/shadow /dev/null` (an allowlisted command) printed
/etc/shadow. And where bubblewrap was missing, agentd only warned and ran everything unsandboxed.

Now /etc is an allowlist, runs execute as an unprivileged uid (their run slot's: tests run as root),
and agentd refuses to start without a working bubblewrap unless told
--unsafe-no-sandbox, which every run's log then states."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator

import pytest

from drover import Client
from drover.testing import fake_anthropic as fake
from tests.conftest import API_KEY, Fleet, task

PROBE_TEST = """import os


def test_probe():
    print("PROBE", os.getuid(), os.geteuid(), sorted(os.listdir("/etc")), os.path.exists("/etc/drover"),
          os.path.exists("/etc/shadow"))
"""


def _start(fleet: Fleet, model: fake.FakeAnthropic, repo: pathlib.Path, *agent_flags: str) -> None:
    fleet.plane.extra_env.update(ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=API_KEY)
    fleet.start_plane()
    fleet.plane.add_project("calc", str(repo))
    fleet.agent("worker", extra=agent_flags)


def _implement(key: str) -> dict:
    return {"key": key, "kind": "implement", "objective": f"do {key}", "complexity": "medium"}


def _tool_results(client: Client, run_id: str) -> list[str]:
    events = [
        json.loads(line) for ln in client.run_logs(run_id) if ln.stream == "event" for line in ln.text.splitlines()
    ]
    return [e["text"] for e in events if e["kind"] == "tool_result"]


def _system(client: Client, run_id: str) -> str:
    return "".join(ln.text for ln in client.run_logs(run_id) if ln.stream == "system")


def test_the_harness_commands_see_no_shadow_no_drover_config_and_are_not_root(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path
) -> None:
    model.extend(
        [
            fake.tool_use("run_command", {"command": "git diff --no-index /etc/shadow /dev/null"}),
            fake.tool_use("write_file", {"path": "tests/test_probe.py", "content": PROBE_TEST}),
            fake.tool_use("run_command", {"command": "python -m pytest -q -s tests/test_probe.py"}),
            fake.tool_use("complete_task", {"summary": "probed"}),
        ]
    )
    _start(fleet, model, calc_repo)
    with fleet.plane.client() as client:
        change = client.submit_change("calc", "probe", [_implement("probe")])
        list(client.watch(change.id))
        run_id = client.get_change(change.id).tasks[0].latest_run_id
        results = _tool_results(client, run_id)
        run = client.get_run(run_id)
    assert run.state == "succeeded", run
    diff, write, probe = results[:3]
    shadow = pathlib.Path("/etc/shadow").read_text() if os.geteuid() == 0 else ""
    first = shadow.splitlines()[0] if shadow else "root:"
    assert first not in diff and "root:" not in diff
    assert "Could not access '/etc/shadow'" in diff or "No such file" in diff, diff
    line = next(ln for ln in probe.splitlines() if ln.startswith("PROBE"))
    assert "drover" not in line and "shadow" not in line and "sudoers" not in line and "ssh" not in line
    uid, euid = line.split()[1:3]
    assert uid != "0" and euid != "0"
    if os.geteuid() == 0:  # its run slot's own uid (issue 24), no user's
        assert int(uid) >= 2_000_000_000
    assert line.rstrip().endswith("False False")  # no /etc/drover, no /etc/shadow
    assert "written" in write or "wrote" in write


@pytest.mark.parametrize("bwrap", ["/nonexistent/bwrap", "/bin/false"])
def test_agentd_without_bubblewrap_refuses_to_start(tmp_path: pathlib.Path, bwrap: str) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentd.cli",
            "--control-plane",
            "127.0.0.1:1",
            "--name",
            "nobwrap",
            "--spool-dir",
            str(tmp_path / "spool"),
            "--work-dir",
            str(tmp_path / "work"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "DROVER_AGENTD_BWRAP": bwrap},
    )
    assert done.returncode == 2, done.stderr
    message = done.stderr
    assert "bubblewrap is missing or cannot create namespaces" in message and bwrap in message
    assert "apt-get install bubblewrap" in message and "--unsafe-no-sandbox" in message
    assert "Traceback" not in message


@pytest.fixture
def open_work_dir() -> Iterator[pathlib.Path]:
    """A work dir `nobody` can reach: without a sandbox the command sees the real parents, and
    pytest's tmp_path sits under a directory only root may enter."""
    path = pathlib.Path(tempfile.mkdtemp(prefix="drover-unsafe-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_unsafe_no_sandbox_starts_and_every_run_says_it_is_not_sandboxed(
    fleet: Fleet,
    model: fake.FakeAnthropic,
    calc_repo: pathlib.Path,
    open_work_dir: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DROVER_AGENTD_BWRAP", "/nonexistent/bwrap")
    model.extend([fake.tool_use("complete_task", {"summary": "nothing to do"})])
    _start(fleet, model, calc_repo, "--unsafe-no-sandbox", "--work-dir", str(open_work_dir))
    with fleet.plane.client() as client:
        change = client.submit_change("calc", "unsafe", [task("cmd", ["/bin/sh", "-c", "id -u"]), _implement("edit")])
        list(client.watch(change.id))
        final = client.get_change(change.id)
        runs = {t.key: t.latest_run_id for t in final.tasks}
        systems = {key: _system(client, run_id) for key, run_id in runs.items()}
        states = {key: client.get_run(run_id).state for key, run_id in runs.items()}
    assert states == {"cmd": "succeeded", "edit": "succeeded"}, (states, systems)
    for key, system in systems.items():
        assert "this run is NOT sandboxed (agentd was started with --unsafe-no-sandbox)" in system, (key, system)
    log = fleet.agents[0].log()
    assert "--unsafe-no-sandbox: Tasks run WITHOUT a sandbox" in log and "WARNING" in log


@pytest.fixture
def breakable_bwrap(tmp_path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """A bwrap that works (so agentd's probe at start passes) until the flag file exists."""
    flag, wrapper = tmp_path / "break-bwrap", tmp_path / "bwrap"
    wrapper.write_text(
        f"#!/bin/sh\nif [ -e {flag} ]; then echo 'bwrap: setting up uid map: Permission denied' >&2; "
        f'exit 1; fi\nexec /usr/bin/bwrap "$@"\n'
    )
    wrapper.chmod(0o755)
    return wrapper, flag


def test_a_sandbox_that_fails_at_run_time_fails_the_run_and_never_falls_back(
    fleet: Fleet,
    model: fake.FakeAnthropic,
    calc_repo: pathlib.Path,
    breakable_bwrap: tuple[pathlib.Path, pathlib.Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wrapper, flag = breakable_bwrap
    monkeypatch.setenv("DROVER_AGENTD_BWRAP", str(wrapper))
    # one run_command per attempt: the control plane may retry the Task
    model.extend([fake.tool_use("run_command", {"command": "python -m pytest -q"}) for _ in range(4)])
    _start(fleet, model, calc_repo)
    flag.touch()
    with fleet.plane.client() as client:
        change = client.submit_change(
            "calc", "broken", [task("cmd", ["/bin/sh", "-c", "echo ran unsandboxed"]), _implement("edit")]
        )
        list(client.watch(change.id))
        runs = client.list_runs(change_id=change.id)
        stdout = "".join(ln.text for r in runs for ln in client.run_logs(r.id) if ln.stream == "stdout")
        cmd_system = "".join(_system(client, r.id) for r in runs if r.task_key == "cmd")
    assert {r.task_key for r in runs} == {"cmd", "edit"}
    assert {(r.state, r.reason) for r in runs} == {("failed", "sandbox_failed")}
    assert "ran unsandboxed" not in stdout
    assert "uid map: Permission denied" in cmd_system
