"""docs/operations.md's "Git credentials" block, run as written against a control plane this test starts
with the block's key file: a first key, a credential set on the host, then the rotation without downtime
(the new key prepended, SIGHUP, reseal, the old key removed, SIGHUP) with the control plane up throughout,
and the credential deleted.

Adapted, and nothing else: `/etc/drover/` is the test's directory (where, not what), the database is the
data dir of DROVER_DATA_DIR, project web is made first with a web.token to set; `systemctl reload
controlplane` (marked in the page as not run: no systemd here) is the SIGHUP it sends, to the process
this test started."""

from __future__ import annotations

import os
import pathlib
import re
import signal
import subprocess
import sys

import pytest
from sqlalchemy import create_engine, text

from controlplane.services.credentials import Sealer
from tests.conftest import ROOT, make_repo, terminate, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

TOKEN = "ghp_documented-rotation-0123456789"


def block() -> list[str]:
    page = (ROOT / "docs" / "operations.md").read_text()
    found = next(b for b in re.findall(r"^```sh\n(.*?)^```", page, re.M | re.S) if "credential-reseal" in b)
    lines = [re.sub(r"(^|\s)#.*$", "", line) for line in found.replace("\\\n", " ").splitlines()]
    return [" ".join(line.split()) for line in lines if line.strip()]


RELOAD = "systemctl reload controlplane"
RUN_FROM_THE_PAGES: dict[str, str] = dict.fromkeys([line for line in block() if line != RELOAD], "docs/")
"""What this file runs, for tests/test_shell_commands_in_docs.py."""


def sealed(data_dir: pathlib.Path) -> str:
    engine = create_engine(f"sqlite:///{data_dir / 'drover.db'}")
    try:
        with engine.connect() as conn:
            return str(conn.execute(text("SELECT git_credential_sealed FROM projects WHERE name = 'web'")).scalar())
    finally:
        engine.dispose()


def test_the_rotation_runs_as_written_with_the_control_plane_up(tmp_path: pathlib.Path) -> None:
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "DROVER_"))}
    env |= {"DROVER_DATA_DIR": str(data), "PATH": f"{os.path.dirname(sys.executable)}:{env.get('PATH', '')}"}

    def sh(line: str) -> str:
        done = subprocess.run(
            line.replace("/etc/drover/", f"{tmp_path}/"), shell=True, cwd=tmp_path, env=env, capture_output=True
        )
        assert done.returncode == 0, f"`{line}` exited {done.returncode}: {done.stdout!r}{done.stderr!r}"
        return done.stdout.decode()

    repo = make_repo(tmp_path / "web", {"README": "x\n"})
    sh(f"controlplane project add web --repo {repo}")
    (tmp_path / "web.token").write_text(TOKEN + "\n")
    lines = block()
    assert lines[0].startswith("controlplane credential-key --out") and lines.count(RELOAD) == 2
    sh(lines[0])
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        serve = subprocess.Popen(
            ["controlplane", "serve", "--listen", "127.0.0.1:0", "--credential-key-file", f"{tmp_path}/credential.key"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: "listening on" in log.read_text(), 60, what="the control plane to listen")
        keys, reloads = [], 0
        for line in lines[1:]:
            if line == RELOAD:
                reloads += 1
                serve.send_signal(signal.SIGHUP)
                wait_for(lambda n=reloads: log.read_text().count("credential keys reloaded") == n, 20, what=line)
                continue
            said = sh(line)
            assert TOKEN not in said
            if "credential set" in line:
                assert "git credential set (token, fingerprint" in said
                keys.append((tmp_path / "credential.key").read_text().strip())
            if "credential-reseal" in line:
                assert "resealed 1 git credential" in said
                new = (tmp_path / "credential.key").read_text().split()[0]
                assert Sealer.from_text(new).open(sealed(data)) == TOKEN  # the new key alone opens it now
                with pytest.raises(ValueError):
                    Sealer.from_text(keys[0]).open(sealed(data))
            if "credential delete" in line:
                assert sealed(data) == ""
        assert serve.poll() is None and reloads == 2  # up throughout
        assert (tmp_path / "credential.key").stat().st_mode & 0o777 == 0o600
    finally:
        terminate(serve)
    assert "Traceback" not in log.read_text() and TOKEN not in log.read_text()
