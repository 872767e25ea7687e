"""`drover project ...` and `drover token ...` as an admin runs them, against a real control plane: the
same rules as the API (they are its calls), exit codes by status, and a credential read from stdin."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

from cryptography.fernet import Fernet

from tests.conftest import ControlPlane, Fleet, make_repo


def drover(plane: ControlPlane, *args: str, token: str = "", stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DROVER_TOKEN"}
    env.update(DROVER_TARGET=plane.target, DROVER_TOKEN=token or plane.admin_token)
    return subprocess.run(
        [sys.executable, "-m", "drover.cli", *args], capture_output=True, text=True, env=env, input=stdin, timeout=60
    )


def test_drover_project_commands_add_update_show_list_and_remove(fleet: Fleet, tmp_path: pathlib.Path) -> None:
    plane = fleet.start_plane()
    repo = make_repo(tmp_path / "origin", {"app.py": "print(1)\n"})
    added = drover(plane, "project", "add", "web", "--repo", str(repo), "--setup", "pip install -e .", "--env", "A=1")
    assert added.returncode == 0, added.stderr
    assert json.loads(added.stdout)["branch"] == "main"

    updated = drover(plane, "project", "update", "web", "--pool", "gpu", "--no-setup-network", "--json")
    assert updated.returncode == 0, updated.stderr
    shown = json.loads(drover(plane, "project", "show", "web", "--json").stdout)
    assert (shown["pool"], shown["setup_network"], shown["setup"], shown["env"]) == (
        "gpu",
        False,
        ["pip install -e ."],  # not given to update: kept
        {"A": "1"},
    )
    listed = drover(plane, "project", "list")
    assert listed.stdout.split("\n")[1].split()[:4] == ["web", str(repo), "main", "gpu"]

    bad = drover(plane, "project", "add", "api", "--repo", str(repo), "--branch", "nope")
    assert bad.returncode == 2 and "project.branch" in bad.stderr
    assert drover(plane, "project", "add", "web").returncode == 6  # ALREADY_EXISTS
    assert drover(plane, "project", "show", "api").returncode == 3
    removed = drover(plane, "project", "remove", "web")
    assert removed.returncode == 0 and removed.stdout.strip() == "project web removed"
    assert drover(plane, "project", "list", "--json").stdout.strip() == "[]"


def test_drover_token_commands_and_a_credential_from_stdin(fleet: Fleet) -> None:
    plane = fleet.plane
    plane.extra_env["DROVER_CREDENTIAL_KEY"] = Fernet.generate_key().decode()
    fleet.start_plane()
    plane.add_project("web")
    made = drover(plane, "token", "create", "ci", "--role", "admin", "--project", "web")
    assert made.returncode == 0, made.stderr
    secret = made.stdout.strip()
    assert secret.startswith("drv_u_")
    listed = drover(plane, "token", "list", "--json")
    ci = next(t for t in json.loads(listed.stdout) if t["name"] == "ci")
    assert (ci["projects"], ci["created_by"]) == (["web"], "admin") and secret not in listed.stdout

    credential = "ghp_" + "x" * 36
    put = drover(plane, "project", "credential", "set", "web", "--secret-file", "-", token=secret, stdin=credential)
    assert put.returncode == 0, put.stderr
    assert put.stdout.startswith("project web: token set, fingerprint ") and credential not in put.stdout
    assert json.loads(drover(plane, "project", "show", "web", "--json").stdout)["git_credential"]["kind"] == "token"
    empty = drover(plane, "project", "credential", "set", "web", "--secret-file", "-", stdin="")
    assert empty.returncode == 2 and "secret" in empty.stderr
    assert drover(plane, "project", "credential", "delete", "web").returncode == 0

    # ci is scoped to web: minting an admin, or for another project, is refused (exit 4 and 3).
    assert drover(plane, "token", "create", "x", "--role", "admin", token=secret).returncode == 4
    assert drover(plane, "token", "create", "x", "--project", "api", token=secret).returncode == 3
    revoked = drover(plane, "token", "revoke", "ci")
    assert revoked.returncode == 0 and "revoked 1 token(s) named 'ci'" in revoked.stdout
    assert drover(plane, "project", "list", token=secret).returncode == 4
