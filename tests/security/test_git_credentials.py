"""Git credentials sent to the control plane (issue 27): a project whose repository sits on a git server
that requires a token clones and pushes its ChangeSet with the credential set on the host (sealed with the
operator's key), and fails saying so without it; the key rotates without a restart (SIGHUP, reseal); a
key that does not open the credential fails the run with a sentence. The secret is nowhere at rest: not
in the database (every table, SQLite and PostgreSQL), the object store, events, the control plane's or
agentd's logs, nor the runs' output and transcripts."""

from __future__ import annotations

import base64
import pathlib
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

from drover import Client
from drover.errors import InvalidArgument
from drover.testing import fake_anthropic as fake
from drover.testing.git_http import GitHttpServer
from tests.conftest import API_KEY, Fleet, task, wait_for
from tests.git_ssh import GitSshServer
from tests.secrets_at_rest import files_holding
from tests.security.rawagent import RawAgent

pytestmark = pytest.mark.timeout(300)  # several runs each, on a loaded CI machine

API_TOKEN = "ghp_api-sealed-credential-7f3a9c21d4e8b6"
HOST_TOKEN = "ghp_host-file-token-5b2e8d19a7c3f0"


@pytest.fixture
def server(tmp_path: pathlib.Path, calc_repo: pathlib.Path) -> Iterator[GitHttpServer]:
    """calc_repo served over smart HTTP, at first to holders of HOST_TOKEN only."""
    root = tmp_path / "forge"
    root.mkdir()
    subprocess.run(["git", "clone", "-q", "--bare", str(calc_repo), str(root / "calc.git")], check=True)
    with GitHttpServer(root, {HOST_TOKEN}) as running:
        yield running


def controlplane(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "controlplane.cli", *args], capture_output=True, text=True)


def new_key() -> str:
    done = controlplane("credential-key")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def calc_with_credential(fleet: Fleet, server: GitHttpServer, key_file: pathlib.Path, pool: str = "") -> None:
    """The plane started with `key_file`; project calc (of `pool`) added the host-file way, then given
    API_TOKEN on the host; from then on the forge takes API_TOKEN only, and the host file is gone."""
    tmp = fleet.tmp
    fleet.start_plane("--credential-key-file", str(key_file))
    (tmp / "host.token").write_text(HOST_TOKEN + "\n")
    host_file = ("--git-token-file", str(tmp / "host.token"))
    fleet.plane.cli("project", "add", "calc", "--repo", server.url("calc"), *host_file, "--pool", pool)
    (tmp / "api.token").write_text(API_TOKEN + "\n")
    set_ = fleet.plane.cli(
        "project", "credential", "set", "calc", "--kind", "token", "--secret-file", str(tmp / "api.token"),
        "--credential-key-file", str(key_file),
    )  # fmt: skip
    assert "git credential set (token" in set_.stdout and API_TOKEN not in set_.stdout
    (tmp / "host.token").unlink()
    (tmp / "api.token").unlink()
    server.tokens.clear()
    server.tokens.add(API_TOKEN)


def command_run(client: Client, goal: str) -> tuple[str, str]:
    """A command Task on calc (its clone needs the credential): its status, and what its Task and run said."""
    change = client.submit_change("calc", goal, [task("ls", [sys.executable, "-c", "import os; print(os.listdir())"])])
    list(client.watch(change.id))
    done = client.get_change(change.id).tasks[0]
    run = client.get_run(done.latest_run_id)
    return done.status, "\n".join([done.reason, run.reason, *(line.text for line in client.run_logs(run.id))])


def secret_forms(secret: str) -> list[bytes]:
    return [secret.encode(), base64.b64encode(f"x-access-token:{secret}".encode()), secret[::-1].encode()]


def table_dump(url: str) -> str:
    """Every row of every table, as text."""
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as conn:
            tables = sqlalchemy.inspect(conn).get_table_names()
            assert "projects" in tables and "events" in tables
            return "\n".join(
                repr(row) for table in tables for row in conn.execute(sqlalchemy.text(f'SELECT * FROM "{table}"'))
            )
    finally:
        engine.dispose()


def implement(fleet: Fleet, model: fake.FakeAnthropic) -> tuple[Any, Any, Any, str]:
    """A harness Task of project calc that writes a file: its Change, run, ChangeSet and run log."""
    model.extend(
        [
            fake.tool_use("write_file", {"path": "fix.py", "content": "FIXED = True\n"}),
            fake.tool_use("complete_task", {"summary": "fixed"}),
        ]
    )
    fleet.agent("worker")
    with fleet.plane.client() as client:
        change = client.submit_change(
            "calc", "fix", [{"key": "fix", "kind": "implement", "objective": "fix it", "complexity": "medium"}]
        )
        list(client.watch(change.id))
        final = client.get_change(change.id)
        run = client.get_run(final.tasks[0].latest_run_id)
        changeset = client.list_changesets(change.id)[0]
        logs = "".join(line.text for line in client.run_logs(run.id))
    return final, run, changeset, logs


def branches(git_dir: pathlib.Path) -> list[str]:
    """The branches of a forge's bare repository."""
    listed = subprocess.run(
        ["git", "--git-dir", str(git_dir), "for-each-ref", "--format=%(refname:short)"],
        capture_output=True,
        text=True,
        check=True,
    )
    return listed.stdout.split()


def implement_and_push(fleet: Fleet, model: fake.FakeAnthropic, server: GitHttpServer) -> None:
    final, run, changeset, logs = implement(fleet, model)
    assert final.status == "succeeded" and run.state == "succeeded", (final, run)
    pushed = branches(server.server.root / "calc.git")
    assert changeset.branch in pushed and final.candidate_branch in pushed, pushed  # agentd's push, the composer's
    assert API_TOKEN in server.attempts
    assert all(form.decode() not in logs for form in secret_forms(API_TOKEN))


def test_a_run_pushes_with_the_sealed_credential_which_is_nowhere_at_rest(
    fleet: Fleet, model: fake.FakeAnthropic, server: GitHttpServer, tmp_path: pathlib.Path
) -> None:
    key_file = tmp_path / "credential.key"
    assert controlplane("credential-key", "--out", str(key_file)).returncode == 0
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"
    fleet.plane.extra_env.update(ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=API_KEY)
    calc_with_credential(fleet, server, key_file)
    implement_and_push(fleet, model, server)
    # Without the credential (and without the host file) the clone is refused, and the run says so.
    fleet.plane.cli("project", "credential", "delete", "calc")
    with fleet.plane.client() as client:
        state, said = command_run(client, "no credential")
    assert state == "failed" and "cannot clone" in said and "authentication" in said, said
    fleet.stop()
    forms = secret_forms(API_TOKEN) + secret_forms(HOST_TOKEN)
    assert files_holding(tmp_path, forms) == []  # database, WAL, objects, logs, spools, transcripts, mirrors
    db = fleet.plane.data_dir / "drover.db"
    dump = "\n".join(sqlite3.connect(db).iterdump())
    assert "project.credential_set" in dump and "project.credential_deleted" in dump
    assert not any(form.decode() in dump for form in forms)
    for log in [*fleet.plane.data_dir.glob("controlplane-*.log"), *tmp_path.glob("agent-*/agentd-*.log")]:
        text = log.read_text(errors="replace")
        assert "Traceback" not in text and not any(form.decode() in text for form in forms), log


def test_on_postgresql_no_table_holds_the_credential(
    pg_fleet: Fleet, model: fake.FakeAnthropic, server: GitHttpServer, pg_url: str, tmp_path: pathlib.Path
) -> None:
    key_file = tmp_path / "credential.key"
    key_file.write_text(new_key() + "\n")
    pg_fleet.plane.extra_env.update(ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=API_KEY)
    calc_with_credential(pg_fleet, server, key_file)
    implement_and_push(pg_fleet, model, server)
    pg_fleet.stop()
    dump = table_dump(pg_url)  # objects (packets, transcripts) live in PostgreSQL too
    assert "calc" in dump and "project.credential_set" in dump
    assert not any(form.decode() in dump for form in secret_forms(API_TOKEN) + secret_forms(HOST_TOKEN))
    assert files_holding(tmp_path, secret_forms(API_TOKEN)) == []


def reload_keys(fleet: Fleet, key_file: pathlib.Path, text: str, times: int) -> str:
    """Write the key file, SIGHUP the control plane, and wait for its `times`-th reload line; the log."""
    key_file.write_text(text)
    assert fleet.plane.proc is not None
    fleet.plane.proc.send_signal(signal.SIGHUP)
    log = fleet.plane.data_dir / f"controlplane-{fleet.plane.starts}.log"
    return wait_for(
        lambda: (t := log.read_text()).count("credential key") >= times and t, 20, what=f"key reload {times}"
    )


def test_the_key_rotates_without_a_restart_and_a_wrong_key_fails_runs_with_a_sentence(
    fleet: Fleet, model: fake.FakeAnthropic, server: GitHttpServer, tmp_path: pathlib.Path
) -> None:
    old, new, wrong = new_key(), new_key(), new_key()
    key_file = tmp_path / "credential.key"
    key_file.write_text(old + "\n")
    fleet.plane.extra_env.update(ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=API_KEY)
    calc_with_credential(fleet, server, key_file)
    fleet.agent("worker")
    with fleet.plane.client() as client:
        assert command_run(client, "with the old key")[0] == "succeeded"
        # 1. the new key prepended, the server told: what is sealed with the old one still opens
        reload_keys(fleet, key_file, f"{new}\n{old}\n", 1)
        assert command_run(client, "both keys")[0] == "succeeded"
        # 2. resealed with the newest key, 3. the old key removed: the new key alone opens it
        resealed = fleet.plane.cli("credential-reseal", "--credential-key-file", str(key_file))
        assert "resealed 1 git credential" in resealed.stdout
        reload_keys(fleet, key_file, f"{new}\n", 2)
        assert command_run(client, "the new key alone")[0] == "succeeded"
        # A key file that is not one is refused on SIGHUP, and the keys in use kept.
        log = reload_keys(fleet, key_file, "not a key\n", 3)
        assert "credential key reload refused, keeping the keys in use" in log
        assert command_run(client, "after a bad reload")[0] == "succeeded"
        # A key that does not open the credential: the run fails with a sentence.
        reload_keys(fleet, key_file, f"{wrong}\n", 4)
        state, said = command_run(client, "the wrong key")
        # A harness Task fails at its Context Packet, at once (no retries: a locked credential stays locked).
        change = client.submit_change(
            "calc", "harness", [{"key": "fix", "kind": "implement", "objective": "fix it", "complexity": "medium"}]
        )
        list(client.watch(change.id))
        harness = client.get_change(change.id).tasks[0]
    assert state == "failed" and "'calc'" in said and "does not open" in said, said
    assert harness.status == "failed" and harness.reason.startswith("routing_failed: project 'calc'"), harness
    assert "does not open" in harness.reason and model.requests == []
    log = (fleet.plane.data_dir / "controlplane-1.log").read_text()
    assert "Traceback" not in log and API_TOKEN not in log and API_TOKEN not in said
    assert fleet.plane.proc is not None and fleet.plane.proc.poll() is None  # no restart, all along


def test_a_bad_key_file_stops_serve_in_one_line(tmp_path: pathlib.Path) -> None:
    (tmp_path / "bad.key").write_text("not a key\n")
    for key_file in (tmp_path / "bad.key", tmp_path / "missing.key"):
        done = controlplane("serve", "--data-dir", str(tmp_path / "d"), "--credential-key-file", str(key_file))
        assert done.returncode == 2, done
        assert done.stderr.count("\n") == 1 and str(key_file) in done.stderr and "Traceback" not in done.stderr


def test_an_agent_of_another_pool_never_receives_the_credential(
    fleet: Fleet, server: GitHttpServer, tmp_path: pathlib.Path
) -> None:
    key_file = tmp_path / "credential.key"
    key_file.write_text(new_key() + "\n")
    calc_with_credential(fleet, server, key_file, pool="web")
    thief = RawAgent(fleet.plane, "thief", fleet.plane.agent_token_file.read_text().strip(), capacity=100)
    try:
        assert thief.messages(2)[0].WhichOneof("body") == "welcome"
        fleet.agent("web-1", pool="web")
        with fleet.plane.client() as client:
            state, said = command_run(client, "on its own pool")
        got = thief.messages(1)
    finally:
        thief.close()
    assert state == "succeeded", said
    assert [m for m in got if m.WhichOneof("body") == "assign"] == []
    assert API_TOKEN not in "".join(str(m) for m in got)


def test_a_deploy_key_clones_and_pushes_over_ssh_and_is_nowhere_at_rest(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """Kind ssh_key: the control plane's mirror, agentd's clone and push and the candidate all go over SSH
    with the deploy key, which travels as DROVER_GIT_SSH_KEY and lands in no file."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(Encoding.PEM, PrivateFormat.OpenSSH, NoEncryption()).decode()
    public = key.public_key().public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH).decode()
    (tmp_path / "forge").mkdir()
    subprocess.run(["git", "clone", "-q", "--bare", str(calc_repo), str(tmp_path / "forge" / "calc.git")], check=True)
    key_file = tmp_path / "credential.key"
    key_file.write_text(new_key() + "\n")
    fleet.plane.extra_env.update(ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=API_KEY)
    fleet.start_plane("--credential-key-file", str(key_file))
    with GitSshServer(tmp_path / "forge", public) as server:
        (tmp_path / "deploy.key").write_text(private)
        # `project add` reads the repository with the file it is given; the key is then stored, sealed.
        reading = ("--git-token-file", str(tmp_path / "deploy.key"))
        fleet.plane.cli("project", "add", "calc", "--repo", server.url("calc"), *reading)
        fleet.plane.cli(
            "project", "credential", "set", "calc", "--kind", "ssh_key", "--secret-file", str(tmp_path / "deploy.key"),
            "--credential-key-file", str(key_file),
        )  # fmt: skip
        (tmp_path / "deploy.key").unlink()
        with fleet.plane.client() as admin:  # UpdateProject reads the repository over SSH with the key
            with pytest.raises(InvalidArgument, match="has no branch 'nope'; its branches: main"):
                admin.projects.update("calc", branch="nope")
            assert admin.projects.update("calc", branch="main").branch == "main"
        final, _, changeset, _ = implement(fleet, model)
        assert final.status == "succeeded", final
        assert server.commands.count("git-receive-pack '/calc.git'") >= 2  # the ChangeSet's push, the candidate's
    pushed = branches(tmp_path / "forge" / "calc.git")
    assert changeset.branch in pushed and final.candidate_branch in pushed, pushed
    fleet.stop()
    lines = [line.encode() for line in private.splitlines() if "-----" not in line]
    assert files_holding(tmp_path, lines) == []
