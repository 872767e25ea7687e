"""The drover CLI, the controlplane commands and agentd's configuration, as a user runs them."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest
import yaml

from drover import models
from drover.errors import FailedPrecondition
from tests.conftest import ControlPlane, Fleet, wait_for


def drover(
    plane: ControlPlane, *args: str, token_env: bool = False, cwd: pathlib.Path | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("DROVER_TOKEN", None)
    env["DROVER_TARGET"] = plane.target
    cmd = [sys.executable, "-m", "drover.cli", *args]
    if token_env:
        env["DROVER_TOKEN"] = plane.admin_token
    else:
        cmd += ["--token-file", str(plane.data_dir / "tokens" / "admin.token")]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)


def write_change(path: pathlib.Path, fail: bool) -> pathlib.Path:
    py = sys.executable
    path.write_text(
        yaml.safe_dump(
            {
                "project": "cli",
                "goal": "from a file",
                "criteria": ["it works"],
                "budget_usd": 1.5,
                "tasks": [
                    {"key": "hello", "kind": "test", "objective": "say hello", "command": [py, "-c", "print('hello')"]},
                    {
                        "key": "check",
                        "kind": "test",
                        "objective": "check",
                        "depends_on": ["hello"],
                        "command": [py, "-c", f"raise SystemExit({1 if fail else 0})"],
                        "timeout_seconds": 60,
                    },
                ],
            }
        )
    )
    return path


def test_submit_and_watch_exit_with_the_change_status(fleet: Fleet, tmp_path: pathlib.Path) -> None:
    plane = fleet.start_plane()
    plane.add_project("cli")
    fleet.agent("cli-agent")

    ok = drover(plane, "submit", str(write_change(tmp_path / "ok.yaml", fail=False)))
    assert ok.returncode == 0, ok.stderr
    change_id = ok.stdout.split()[2]
    watched = drover(plane, "watch", change_id)
    assert watched.returncode == 0, watched.stdout + watched.stderr
    assert "change.finished" in watched.stdout and "status=succeeded" in watched.stdout

    bad = drover(plane, "submit", str(write_change(tmp_path / "bad.yaml", fail=True)), "--watch")
    assert bad.returncode == 1
    assert "task.failed" in bad.stdout
    assert any(line.startswith("change ") and line.split()[2] == "failed" for line in bad.stdout.splitlines())

    as_json = drover(plane, "change", change_id, "--json", token_env=True)
    change = json.loads(as_json.stdout)
    assert change["status"] == "succeeded" and [t["key"] for t in change["tasks"]] == ["hello", "check"]
    run_id = change["tasks"][0]["latest_run_id"]
    logs = drover(plane, "logs", run_id)
    assert logs.stdout.endswith("hello\n")
    runs = json.loads(drover(plane, "runs", "--change", change_id, "--json").stdout)
    assert {r["state"] for r in runs} == {"succeeded"}
    # jq users get proper JSON types and every field, defaults included.
    assert {(r["exit_code"], type(r["output_bytes"])) for r in runs} == {(0, int)}
    assert all(r["finished_at"].endswith("Z") and r["reason"] == "" for r in runs)
    agents = drover(plane, "agents")
    assert "cli-agent" in agents.stdout and "yes" in agents.stdout
    assert [a["draining"] for a in json.loads(drover(plane, "agents", "--json").stdout)] == [False]
    events = drover(plane, "events", "--change", change_id, "--json")
    parsed = [json.loads(line) for line in events.stdout.splitlines()]
    assert parsed[0]["kind"] == "change.submitted" and parsed[-1]["kind"] == "change.finished"
    assert all(type(e["id"]) is int for e in parsed)

    # The SDK returns typed Python objects, not protobuf messages.
    with plane.client() as client:
        run = client.get_run(run_id)
        assert isinstance(run, models.Run) and run.state == "succeeded"
        assert run.finished_at is not None and run.finished_at.tzinfo is not None
        assert run.started_at is not None and run.started_at <= run.finished_at
        finished = client.list_events(change_id=change_id, kind="change.finished")
        assert [type(e) for e in finished] == [models.Event] and finished[0].data["status"] == "succeeded"
    check_finished = [e for e in parsed if e["kind"] == "run.finished" and e["data"]["status"] == "succeeded"]
    assert check_finished and all(type(e["data"]["exit_code"]) is int for e in check_finished)


def test_cli_errors_are_readable(fleet: Fleet, tmp_path: pathlib.Path) -> None:
    plane = fleet.start_plane()
    missing = drover(plane, "change", "chg_nope")
    assert missing.returncode == 3  # not found
    assert "NOT_FOUND" in missing.stderr and "change_id" in missing.stderr
    (tmp_path / "typo.yaml").write_text("project: x\ngoal: y\ntasks: [{key: a, kind: test, objectve: z}]\n")
    typo = drover(plane, "submit", str(tmp_path / "typo.yaml"))
    assert typo.returncode == 2 and "objectve" in typo.stderr


def test_tokens_created_by_the_cli_carry_their_role(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    token = plane.cli("token", "create", "--kind", "user", "--name", "viewer", "--role", "submit").stdout.strip()
    with plane.client(token) as client:
        assert client.list_agents() == []
    stored = (plane.data_dir / "drover.db").read_bytes()
    assert token.encode() not in stored  # only its hash is stored
    assert oct((plane.data_dir / "tokens" / "admin.token").stat().st_mode & 0o777) == "0o600"


def test_agentd_reads_toml_then_env_then_flags(fleet: Fleet, tmp_path: pathlib.Path) -> None:
    plane = fleet.start_plane()
    config = tmp_path / "agentd.toml"
    config.write_text(
        f'control_plane = "{plane.target}"\nname = "from-file"\ntoken_file = "{plane.agent_token_file}"\n'
        f'capacity = 1\nlabels = {{ team = "web", zone = "a" }}\nspool_dir = "{tmp_path / "spool"}"\n'
    )
    env = dict(os.environ, DROVER_AGENTD_CAPACITY="3")
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentd.cli", "--config", str(config), "--label", "zone=b"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with plane.client() as client:
            agent = wait_for(
                lambda: next((a for a in client.list_agents() if a.connected), None), 30, what="the agent to connect"
            )
        assert agent.name == "from-file"
        assert agent.capacity == 3  # env over the file
        assert dict(agent.labels) == {"zone": "b"}  # flags over env and file
    finally:
        proc.terminate()
        proc.wait(15)


def test_agentd_with_no_flags_connects_next_to_the_quickstart_control_plane(tmp_path: pathlib.Path) -> None:
    env = dict(os.environ)
    for key in list(env):
        if key.startswith(("DROVER_AGENTD_", "DROVER_DATABASE_URL")):
            del env[key]
    server = subprocess.Popen(
        [sys.executable, "-m", "controlplane.cli", "serve"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    agent = None
    try:
        banner = ""
        while "listening on" not in banner:
            line = server.stdout.readline()
            assert line, f"the control plane exited: {banner}"
            banner += line
        assert "wrote admin token to .drover/tokens/admin.token" in banner
        agent = subprocess.Popen(
            [sys.executable, "-m", "agentd.cli"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for(
            lambda: any(
                a["connected"]
                for a in json.loads(
                    subprocess.run(
                        [sys.executable, "-m", "drover.cli", "agents", "--json"],
                        cwd=tmp_path,
                        env=env,
                        capture_output=True,
                        text=True,
                    ).stdout
                    or "[]"
                )
            ),
            30,
            what="agentd to connect with no flags",
        )
    finally:
        for proc in (agent, server):
            if proc is not None:
                proc.terminate()
                proc.wait(15)


def test_project_and_user_monthly_budgets_from_the_cli(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    plane.cli("project", "add", "budgeted", "--monthly-budget-usd", "12.5")
    plane.cli("token", "create", "--kind", "user", "--name", "ann", "--monthly-budget-usd", "3")
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "controlplane.cli",
            "project",
            "add",
            "x",
            "--monthly-budget-usd",
            "-1",
            "--data-dir",
            str(plane.data_dir),
        ],
        capture_output=True,
        text=True,
    )
    import sqlite3

    db = sqlite3.connect(plane.data_dir / "drover.db")
    assert db.execute("select monthly_budget_usd from projects where name='budgeted'").fetchone() == (12.5,)
    assert db.execute("select monthly_budget_usd from tokens where name='ann'").fetchone() == (3.0,)
    assert bad.returncode == 2 and "monthly_budget_usd: must not be negative" in bad.stderr


def test_project_add_checks_the_repository_and_defaults_to_its_head_branch(
    fleet: Fleet, tmp_path: pathlib.Path
) -> None:
    """The by-hand commands of docs/getting-started.md against `git init` (branch master): no --branch, no surprise."""
    plane = fleet.start_plane()
    repo = tmp_path / "calc"
    subprocess.run(["git", "init", "-q", "-b", "master", str(repo)], check=True)
    (repo / "calc.py").write_text("x = 1\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "first"], check=True)

    def project_add(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "controlplane.cli", "project", "add", *args]
        return subprocess.run([*command, "--data-dir", str(plane.data_dir)], capture_output=True, text=True)

    added = project_add("calc", "--repo", str(repo))
    assert added.returncode == 0 and "branch master" in added.stdout, added.stderr
    assert "alembic" not in added.stderr  # no migration chatter in a terminal
    wrong = project_add("calc2", "--repo", str(repo), "--branch", "main")
    assert wrong.returncode == 2 and "branch: " in wrong.stderr and "its branches: master" in wrong.stderr
    missing = project_add("calc3", "--repo", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "repo: " in missing.stderr and "does not exist" in missing.stderr
    unreadable = project_add("calc4", "--repo", "https://127.0.0.1:9/x.git")
    assert unreadable.returncode == 2 and "repo: cannot read https://127.0.0.1:9/x.git" in unreadable.stderr
    empty = tmp_path / "empty"
    subprocess.run(["git", "init", "-q", "-b", "trunk", str(empty)], check=True)
    fresh = project_add("fresh", "--repo", str(empty))
    assert fresh.returncode == 0 and "branch trunk" in fresh.stdout and "no commit yet" in fresh.stdout
    import sqlite3

    db = sqlite3.connect(plane.data_dir / "drover.db")
    assert sorted(db.execute("select name, branch from projects")) == [("calc", "master"), ("fresh", "trunk")]

    # The first run of the project starts from that branch.
    fleet.agent("cli-agent")
    with plane.client() as client:
        change = client.submit_change(
            "calc", "look", [{"key": "ls", "kind": "test", "objective": "ls", "command": ["ls"]}]
        )
        list(client.watch(change.id))
        assert client.get_change(change.id).status == "succeeded"


def test_a_harness_task_without_a_model_key_is_refused_at_submit(fleet: Fleet) -> None:
    plane = fleet.start_plane()  # no ANTHROPIC_API_KEY in its environment, no api_key_file, no members
    plane.add_project("keyless")
    said = "\n".join(p.read_text() for p in plane.data_dir.glob("controlplane-*.log"))
    assert "no model key: set ANTHROPIC_API_KEY" in said  # said at start-up
    with plane.client() as client:
        with pytest.raises(FailedPrecondition) as refused:
            client.submit_change(
                "keyless",
                "fix it",
                [
                    {"key": "list", "kind": "test", "objective": "list", "command": ["ls"]},
                    {"key": "fix", "kind": "implement", "objective": "fix the bug", "depends_on": ["list"]},
                ],
            )
        assert refused.value.field == "tasks[1]" and "ANTHROPIC_API_KEY" in refused.value.message
        assert client.list_changes() == []  # nothing stored
        accepted = client.submit_change(
            "keyless", "list", [{"key": "list", "kind": "test", "objective": "l", "command": ["ls"]}]
        )
        assert accepted.status in ("open", "running")
