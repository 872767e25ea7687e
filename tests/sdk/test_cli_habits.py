"""The habits users bring from gh and the Temporal CLI: exit codes that say what went wrong, global
flags anywhere, --version, newest events first with --limit/--after/--follow, undrain, and watch
that survives a control-plane restart."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import threading

import pytest

from tests.conftest import ControlPlane, Fleet, python_command, task, wait_for

pytestmark = pytest.mark.timeout(240)


def drover(plane: ControlPlane, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DROVER_TOKEN"}
    command = [sys.executable, "-m", "drover.cli", *args]
    if "--target" not in args:
        command += ["--target", plane.target]
    if "--token-file" not in args:
        command += ["--token-file", str(plane.data_dir / "tokens" / "admin.token")]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)


class Reader:
    """A long-running CLI process whose output lines are collected as they come."""

    def __init__(self, plane: ControlPlane, *args: str) -> None:
        token = str(plane.data_dir / "tokens" / "admin.token")
        command = [sys.executable, "-m", "drover.cli", *args, "--target", plane.target, "--token-file", token]
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.out: list[str] = []
        self.err: list[str] = []
        for stream, lines in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            threading.Thread(target=lambda s=stream, ls=lines: ls.extend(iter(s.readline, "")), daemon=True).start()

    def saw(self, text: str, stream: str = "out") -> bool:
        return any(text in line for line in (self.out if stream == "out" else self.err))


def test_exit_codes_say_what_went_wrong_and_never_a_traceback(fleet: Fleet, tmp_path: pathlib.Path) -> None:
    plane = fleet.start_plane()
    plane.add_project("codes")
    cases = {
        3: drover(plane, "--json", "change", "chg_nope"),  # a global flag before the command
        4: drover(plane, "agents", "--token-file", str(tmp_path / "missing.token")),
        5: drover(plane, "agents", "--target", "127.0.0.1:1"),
        2: drover(plane, "runs", "--state", "runing"),
    }
    (tmp_path / "bad.yaml").write_text("project: codes\ngoal: [unclosed\n")
    cases[20] = drover(plane, "submit", str(tmp_path / "bad.yaml"))  # 2 as well: malformed input
    (tmp_path / "harness.yaml").write_text(
        "project: codes\ngoal: g\ntasks: [{key: a, kind: implement, objective: fix it}]\n"
    )
    cases[6] = drover(plane, "submit", str(tmp_path / "harness.yaml"))  # no model key: refused in this state
    for expected, done in cases.items():
        assert done.returncode == (2 if expected == 20 else expected), (expected, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr and done.stderr.startswith(("drover: ", "usage: ")), done.stderr
    assert "NOT_FOUND" in cases[3].stderr and "missing.token" in cases[4].stderr and "UNAVAILABLE" in cases[5].stderr
    assert "invalid choice: 'runing'" in cases[2].stderr and "ANTHROPIC_API_KEY" in cases[6].stderr

    for program in ("drover", "controlplane", "agentd"):
        version = subprocess.run(
            [sys.executable, "-m", f"{program}.cli", "--version"], capture_output=True, text=True, timeout=60
        )
        assert version.returncode == 0 and version.stdout.startswith(f"{program} 0."), version
    unreachable = subprocess.run(
        [sys.executable, "-m", "controlplane.cli", "token", "list"],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, DROVER_DATABASE_URL="postgresql+psycopg://postgres@127.0.0.1:1/nowhere"),
    )
    assert unreachable.returncode == 5 and "cannot reach the database" in unreachable.stderr
    assert "Traceback" not in unreachable.stderr


def test_events_are_the_newest_with_limit_after_and_follow(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    plane.add_project("ev")
    fleet.agent("ev-agent")
    with plane.client() as client:
        first = client.submit_change("ev", "one", [task("a", ["true"]), task("b", ["true"], ("a",))])
        list(client.watch(first.id))
        everything = client.list_events(limit=1000)
    newest = [json.loads(line) for line in drover(plane, "events", "--limit", "3", "--jsonl").stdout.splitlines()]
    assert [e["id"] for e in newest] == [e.id for e in everything[-3:]]  # the newest, oldest first
    after = [
        json.loads(line)
        for line in drover(
            plane, "events", "--after", str(everything[1].id), "--limit", "2", "--jsonl"
        ).stdout.splitlines()
    ]
    assert [e["id"] for e in after] == [e.id for e in everything[2:4]]
    assert drover(plane, "events", "--limit", "0").returncode == 2

    follower = Reader(plane, "events", "--follow", "--limit", "1", "--jsonl")
    try:
        wait_for(lambda: follower.saw("change.finished"), 30, what="the newest event")
        with plane.client() as client:
            second = client.submit_change("ev", "two", [task("c", ["true"])])

            def followed() -> list[dict[str, object]]:
                return [e for e in map(json.loads, list(follower.out)) if e["change_id"] == second.id]

            wait_for(lambda: any(e["kind"] == "change.finished" for e in followed()), 60, what="the new Change")
    finally:
        follower.proc.terminate()
        follower.proc.wait(10)
    seen = [json.loads(line) for line in follower.out]
    assert [e["id"] for e in seen] == sorted({e["id"] for e in seen})  # each event once, in order
    assert seen[0]["id"] == everything[-1].id and {e["change_id"] for e in seen[1:]} <= {second.id, ""}


def test_undrain_and_a_watch_that_says_every_agent_drains(fleet: Fleet, tmp_path: pathlib.Path) -> None:
    plane = fleet.start_plane()
    plane.add_project("dr")
    fleet.agent("only")
    wait_for(lambda: "only" in drover(plane, "agents").stdout, 30, what="the agent")
    assert drover(plane, "drain", "only").returncode == 0
    with plane.client() as client:
        change = client.submit_change("dr", "waits", [task("a", ["true"])])
    watcher = Reader(plane, "watch", change.id)
    try:
        wait_for(
            lambda: watcher.saw("every connected agent of pool default is draining", "err"), 30, what="the warning"
        )
        with plane.client() as client:  # GetChange says it too, for every client
            assert any("is draining (only)" in n for n in client.get_change(change.id).notices)
        undrained = drover(plane, "undrain", "only", "--json")
        assert undrained.returncode == 0 and json.loads(undrained.stdout)["draining"] is False
        assert watcher.proc.wait(60) == 0  # the Change ran once the agent took runs again
        with plane.client() as client:
            assert client.get_change(change.id).notices == []
    finally:
        watcher.proc.kill()
    with plane.client() as client:
        kinds = [e.kind for e in client.list_events(kind="agent.")]
    assert "agent.draining" in kinds and "agent.undrained" in kinds


def test_watch_with_logs_survives_a_control_plane_restart(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    plane.add_project("rs")
    fleet.agent("rs-agent")
    code = "import time\nprint('before', flush=True)\ntime.sleep(8)\nprint('after', flush=True)"
    with plane.client() as client:
        change = client.submit_change("rs", "restart", [task("slow", python_command(code))])
    watcher = Reader(plane, "watch", change.id, "--logs")
    try:
        wait_for(lambda: watcher.saw("slow | before"), 60, what="the run's first line, live")
        plane.stop()
        plane.start()
        assert watcher.proc.wait(90) == 0, "".join(watcher.out + watcher.err)
    finally:
        watcher.proc.kill()
    assert watcher.saw("dialling again", "err")
    assert watcher.saw("slow | after") and watcher.saw("change.finished")
    assert sum("run.started" in line for line in watcher.out) == 1  # resumed, nothing shown twice
    assert sum("slow | before" in line for line in watcher.out) == 1


def test_projects_can_be_listed_shown_and_removed(fleet: Fleet, git_repo: pathlib.Path) -> None:
    plane = fleet.start_plane()
    plane.add_project("kept", str(git_repo))
    plane.add_project("spare")
    listed = plane.cli("project", "list").stdout
    assert listed.splitlines()[0].split() == ["NAME", "REPO", "BRANCH", "POOL", "NETWORK"]
    assert [line.split()[0] for line in listed.splitlines()[1:]] == ["kept", "spare"]
    shown = json.loads(plane.cli("project", "show", "kept").stdout)
    assert shown["repo"] == str(git_repo) and shown["branch"] == "main" and shown["network"] is False
    as_json = json.loads(plane.cli("project", "list", "--json").stdout)
    assert [p["name"] for p in as_json] == ["kept", "spare"]
    with plane.client() as client:
        client.submit_change("kept", "history", [task("a", ["true"])])

    def controlplane(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "controlplane.cli", *args, "--data-dir", str(plane.data_dir)]
        return subprocess.run(command, capture_output=True, text=True, timeout=60)

    refused = controlplane("project", "remove", "kept")
    assert refused.returncode == 2 and "has 1 Change" in refused.stderr
    assert controlplane("project", "remove", "spare").returncode == 0
    missing = controlplane("project", "show", "spare")
    assert missing.returncode == 3 and "no project 'spare'" in missing.stderr
    assert [p["name"] for p in json.loads(plane.cli("project", "list", "--json").stdout)] == ["kept"]


def test_both_daemons_log_json_lines_when_asked(fleet: Fleet) -> None:
    plane = fleet.start_plane("--log-format", "json")
    agent = fleet.agent("json-agent", extra=("--log-format", "json"))
    plane_lines = [ln for p in plane.data_dir.glob("controlplane-*.log") for ln in p.read_text().splitlines()]
    logged = [json.loads(ln) for ln in plane_lines if ln.startswith("{")]
    assert any("listening on" in e["message"] for e in logged)
    assert all({"time", "level", "logger", "message"} <= set(e) for e in logged)
    agent_logged = [json.loads(ln) for ln in agent.log().splitlines() if ln.startswith("{")]
    assert any(e["logger"] == "agentd" for e in agent_logged)


def test_a_reader_that_goes_away_ends_the_command_quietly(fleet: Fleet, tmp_path: pathlib.Path) -> None:
    """`drover events | head -1` as a user types it: head leaves after one line, drover's next write finds
    the pipe closed, and drover ends with 141 (128 + SIGPIPE, as a shell reports git or cat there) and
    says nothing: no `[Errno 32] Broken pipe`, no traceback. The controlplane CLI's listings do the same."""
    plane = fleet.start_plane()
    plane.add_project("first")
    token = plane.data_dir / "tokens" / "admin.token"
    err = tmp_path / "drover.err"
    follow = f"{sys.executable} -m drover.cli events --follow --target {plane.target} --token-file {token}"
    shell = subprocess.Popen(
        ["bash", "-c", f'{follow} 2>{err} | head -1; echo "drover exited ${{PIPESTATUS[0]}}"'],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert shell.stdout is not None
    assert "project.added" in shell.stdout.readline()  # head printed its one line and left
    plane.add_project("second")  # a new event: drover --follow writes it into the closed pipe
    assert shell.stdout.read().strip() == "drover exited 141"
    assert shell.wait(30) == 0
    assert err.read_text() == ""

    data = str(plane.data_dir)
    for command in (["token", "list"], ["project", "list"]):
        # `| true` leaves before the command's first write (its start takes far longer), so the write fails
        done = subprocess.run(
            [
                "bash",
                "-c",
                f"{sys.executable} -m controlplane.cli {' '.join(command)} --data-dir {data} | true; "
                'echo "${PIPESTATUS[0]}"',
            ],
            capture_output=True,
            text=True,
            env=plane.env(),
            timeout=60,
        )
        assert (done.stdout.strip(), done.stderr) == ("141", ""), command
