"""docs/operations.md's "Projects and tokens over the API" block, run line by line as the page shows it
against a real control plane (with a credential key) on loopback. Adapted, and nothing else: the page's
`127.0.0.1:50051` becomes this control plane (DROVER_TARGET for `drover`), its `/srv/git/web.git` a real
repository, and the commands run where `web.token` holds a token; `$TOKEN` is the admin token."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

from cryptography.fernet import Fernet

from tests.conftest import ROOT, Fleet, make_repo

PAGE = (ROOT / "docs" / "operations.md").read_text()
SECTION = PAGE.split("## Projects and tokens over the API", 1)[1]
BLOCK = re.search(r"^```sh\n(.*?)^```", SECTION, re.M | re.S)
LINES = [" ".join(line.split()) for line in (BLOCK.group(1) if BLOCK else "").splitlines() if line.strip()]
RUN_FROM_THE_PAGES = dict.fromkeys(LINES, "operations.md")
"""Each line of the block, run by test_the_projects_and_tokens_block_runs_as_written from the page."""
REPO = "/srv/git/web.git"


def test_the_projects_and_tokens_block_runs_as_written(fleet: Fleet, tmp_path: pathlib.Path) -> None:
    assert len(LINES) >= 10 and LINES[0].startswith("drover project add web")
    fleet.plane.extra_env["DROVER_CREDENTIAL_KEY"] = Fernet.generate_key().decode()
    plane = fleet.start_plane()
    repo = make_repo(tmp_path / "web.git", {"app.py": "print(1)\n"})
    work = tmp_path / "work"
    work.mkdir()
    (work / "web.token").write_text("ghp_" + "d" * 36 + "\n")
    env = {k: v for k, v in os.environ.items() if k != "DROVER_TOKEN"}
    env.update(DROVER_TARGET=plane.target, DROVER_TOKEN=plane.admin_token, TOKEN=plane.admin_token)
    env["PATH"] = f"{pathlib.Path(sys.executable).parent}:{env.get('PATH', '')}"
    out: dict[str, str] = {}
    for line in LINES:
        command = line.replace(REPO, str(repo)).replace("127.0.0.1:50051", plane.target)
        done = subprocess.run(["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"{line}\nexited {done.returncode}: {done.stderr}"
        words = line.split()
        out[words[-1].rsplit("/", 1)[-1] if words[0] == "grpcurl" else " ".join(words[:3])] = done.stdout
    shown = json.loads(out["drover project show"])
    assert (shown["branch"], shown["setup"], shown["env"], shown["pool"]) == (
        "main",
        ["pip install -e ."],
        {"CI": "1"},
        "gpu",
    )
    assert shown["cache_key_files"] == ["requirements*.txt"]
    assert (
        "token set, fingerprint" in out["drover project credential"] and "ghp_" not in out["drover project credential"]
    )
    assert out["drover token create"].strip().startswith("drv_u_")
    assert "ci" in out["drover token list"] and "revoked 1 token(s) named 'ci'" in out["drover token revoke"]
    assert out["drover project remove"].strip() == "project web removed"
    assert json.loads(out["CreateProject"])["name"] == "api"
    updated = json.loads(out["UpdateProject"])  # the mask's two settings changed, the cap it does not name kept
    settings = ("weight", "max_open_sandboxes_per_change", "max_active_runs_per_change")
    assert [updated[name] for name in settings] == [2, 2, 8]
