"""Round two, finding 1: a Task's `env` reached the root side. The supervisor passed it to the Popen of
bubblewrap itself, which runs as root, outside any namespace, with the workspace as its working
directory: `LD_PRELOAD=./evil.so` (a library the Task's own repository or a dependency's ChangeSet
put in the workspace) ran as uid 0 on the host and read `admin.token`.

Each test is the attack through a real control plane and agentd (root, so bubblewrap runs): the
library's constructor records where it ran (uid, whether it sees the host's tokens) in a file on
the host's /tmp, which only a process outside the sandbox can reach. Now bubblewrap gets a fixed
environment in "/"; the Task's env reaches the command alone, inside (agentd/run/launch.py).
"""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pygit2
import pytest

from tests.conftest import Fleet, task

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build the library")

EVIL_C = r"""
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void evil(void) {
    FILE *out = fopen("%(marker)s", "a");
    if (!out) return;
    FILE *token = fopen("%(token)s", "r");
    char text[256] = "";
    if (token) { if (!fgets(text, sizeof text, token)) text[0] = 0; fclose(token); }
    fprintf(out, "{\"uid\": %%d, \"token\": \"%%.64s\"}\n", (int)getuid(), text[0] ? "read" : "");
    fclose(out);
}
"""


def _commit_files(path: pathlib.Path, files: dict[str, bytes], modes: dict[str, int] | None = None) -> None:
    repo = pygit2.init_repository(str(path), initial_head="main")
    for name, data in files.items():
        (path / name).write_bytes(data)
        if modes and name in modes:
            (path / name).chmod(modes[name])
    repo.index.add_all()
    repo.index.write()
    sig = pygit2.Signature("Test", "test@drover.invalid")
    repo.create_commit("HEAD", sig, sig, "initial", repo.index.write_tree(), [])


@pytest.fixture(scope="module")
def attack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A control plane, an agent, and a project whose repository carries evil.so and evil.sh."""
    base = tmp_path_factory.mktemp("r21")
    marker = pathlib.Path("/tmp") / f"drover-r21-{uuid.uuid4().hex}"
    fleet = Fleet(base / "fleet")
    fleet.start_plane()
    token = fleet.plane.data_dir / "tokens" / "admin.token"
    source = base / "evil.c"
    source.write_text(EVIL_C % {"marker": marker, "token": token})
    library = base / "evil.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    script = f"#!/bin/sh\nid -u >> {marker}\n".encode()
    repo = base / "project"
    repo.mkdir()
    _commit_files(repo, {"evil.so": library.read_bytes(), "evil.sh": script}, {"evil.sh": 0o755})
    fleet.plane.add_project("r21", repo=str(repo))
    fleet.agent("target")
    yield {"fleet": fleet, "marker": marker}
    fleet.stop()
    marker.unlink(missing_ok=True)


def _run(fleet: Fleet, command: list[str], **extra: Any) -> dict[str, Any]:
    with fleet.plane.client() as client:
        change = client.submit_change("r21", f"attempt {uuid.uuid4().hex[:8]}", [task("attempt", command, **extra)])
        list(client.watch(change.id))
        run_id = client.get_change(change.id).tasks[0].latest_run_id
        run = client.get_run(run_id)
        out = "".join(line.text for line in client.run_logs(run_id) if line.stream == "stdout")
    return {"state": run.state, "reason": run.reason, "stdout": out}


def _host_records(marker: pathlib.Path) -> list[str]:
    return marker.read_text().splitlines() if marker.exists() else []


def test_ld_preload_in_a_tasks_env_never_runs_outside_the_sandbox(attack: dict[str, Any]) -> None:
    """Before: the record said {"uid": 0, "token": "read"}: bwrap loaded ./evil.so as root."""
    fleet, marker = attack["fleet"], attack["marker"]
    env = {"LD_PRELOAD": "./evil.so", "LD_LIBRARY_PATH": ".", "LD_AUDIT": "./evil.so"}
    result = _run(fleet, ["/bin/sh", "-c", "echo ran as $(id -u) with $LD_PRELOAD"], env=env)
    assert _host_records(marker) == [], "the Task's library ran outside the sandbox"
    # the Task's env still reaches its own command, inside, as the run's user (never root)
    assert result["state"] == "succeeded", result
    uid = int(result["stdout"].split()[2])
    assert uid != 0 and result["stdout"].endswith("with ./evil.so\n")


def test_the_tasks_env_cannot_change_how_the_launcher_starts(attack: dict[str, Any]) -> None:
    """Python's own variables and PATH name the Task's files; bwrap and the launcher ignore them."""
    fleet, marker = attack["fleet"], attack["marker"]
    env = {"PATH": ".", "PYTHONPATH": ".", "PYTHONHOME": ".", "PYTHONSTARTUP": "./evil.sh", "PYTHONINSPECT": "1"}
    result = _run(fleet, ["/bin/echo", "fine"], env=env)
    assert result["state"] == "succeeded" and result["stdout"] == "fine\n", result
    assert _host_records(marker) == []


def test_a_relative_command_runs_only_inside(attack: dict[str, Any]) -> None:
    """argv naming a workspace file runs it inside the sandbox, as the run's user: the host's /tmp
    never sees it (the sandbox has its own)."""
    fleet, marker = attack["fleet"], attack["marker"]
    result = _run(fleet, ["./evil.sh"])
    assert result["state"] == "succeeded", result
    assert _host_records(marker) == []


def test_argv_cannot_become_options_of_bubblewrap(attack: dict[str, Any]) -> None:
    """A command that looks like bwrap's or the launcher's options is only a command name."""
    fleet, marker = attack["fleet"], attack["marker"]
    result = _run(fleet, ["--bind", "/", "/host", "/bin/sh", "-c", f"id -u >> /host{marker}"])
    assert result["state"] != "succeeded", result
    assert _host_records(marker) == []


def test_the_bubblewrap_process_has_the_fixed_environment_and_directory(attack: dict[str, Any]) -> None:
    """Seen from the host while the run is going: bwrap's environment is agentd's fixed one, its
    working directory "/", whatever the Task's env holds."""
    fleet = attack["fleet"]
    secret = uuid.uuid4().hex
    with fleet.plane.client() as client:
        change = client.submit_change(
            "r21", "watched", [task("attempt", ["/bin/sh", "-c", f"sleep 30 # {secret}"], env={"MINE": secret})]
        )
        found: dict[str, Any] = {}
        try:
            from tests.conftest import wait_for

            def bwrap_seen() -> bool:
                for proc in pathlib.Path("/proc").iterdir():
                    try:
                        cmdline = (proc / "cmdline").read_bytes()
                        if not cmdline.startswith(b"/usr/bin/bwrap\0") or secret.encode() not in cmdline:
                            continue
                        found["environ"] = (proc / "environ").read_bytes()
                        found["cwd"] = str((proc / "cwd").readlink())
                        return True
                    except OSError:
                        continue
                return False

            wait_for(bwrap_seen, timeout=60, what="the run's bwrap")
        finally:
            client.cancel_change(change.id)
    assert found["environ"] == b"PATH=/usr/sbin:/usr/bin:/sbin:/bin\0", found
    assert found["cwd"] == "/"
    assert json.dumps(found["environ"].decode()).find(secret) == -1
