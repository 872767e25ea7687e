"""docs/operations.md's "Linking a project to GitHub" block, run line by line as the page shows it with the
`drover` CLI (subprocesses) against a real control plane with a credential key. Adapted, and nothing else:
project web exists first (the page links an existing project), and the commands run where web-app.pem holds
a GitHub App's RSA key and web-forge.token a fine-grained token. What each line printed is checked, and the
secrets are looked for in the control plane's data directory (database, WAL, log) afterwards."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

from cryptography.fernet import Fernet
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from tests.conftest import ROOT, Fleet
from tests.secrets_at_rest import files_holding

PAGE = (ROOT / "docs" / "operations.md").read_text()
SECTION = PAGE.split("## Linking a project to GitHub", 1)[1].split("\n## ", 1)[0]
BLOCK = re.search(r"^```sh\n(.*?)^```", SECTION, re.M | re.S)
LINES = [" ".join(line.split()) for line in (BLOCK.group(1) if BLOCK else "").splitlines() if line.strip()]
RUN_FROM_THE_PAGES = dict.fromkeys(LINES, "operations.md")
"""Each line of the block, run by test_the_forge_block_runs_as_written from the page."""
TOKEN = "github_pat_11DOCS0forge9token7x5v3"


def test_the_forge_block_runs_as_written(fleet: Fleet, tmp_path: pathlib.Path) -> None:
    assert len(LINES) == 6 and LINES[0].startswith("drover project update web --forge github")
    fleet.plane.extra_env["DROVER_CREDENTIAL_KEY"] = Fernet.generate_key().decode()
    plane = fleet.start_plane()
    with plane.client() as admin:
        admin.projects.create("web")
    work = tmp_path / "work"
    work.mkdir()
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    key_pem = key.private_bytes(Encoding.PEM, PrivateFormat.TraditionalOpenSSL, NoEncryption()).decode()
    (work / "web-app.pem").write_text(key_pem)
    (work / "web-forge.token").write_text(TOKEN + "\n")
    env = {k: v for k, v in os.environ.items() if k != "DROVER_TOKEN"}
    env.update(DROVER_TARGET=plane.target, DROVER_TOKEN=plane.admin_token)
    env["PATH"] = f"{pathlib.Path(sys.executable).parent}:{env.get('PATH', '')}"
    out: list[subprocess.CompletedProcess[str]] = []
    for line in LINES:
        done = subprocess.run(["bash", "-c", line], cwd=work, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"{line}\nexited {done.returncode}: {done.stderr}"
        assert TOKEN not in done.stdout + done.stderr and "PRIVATE KEY" not in done.stdout + done.stderr
        out.append(done)
    linked, app, token, hook, show, deleted = out

    assert '"forge_repo": "octo-org/web"' in linked.stdout
    assert "forge app set, app 123456, installation 987654321, fingerprint" in app.stdout
    assert "forge token set, fingerprint" in token.stdout
    secret = hook.stdout.strip()
    assert len(secret) == 43 and re.fullmatch(r"[A-Za-z0-9_-]+", secret), hook.stdout
    assert "not shown again" in hook.stderr and secret not in hook.stderr
    shown = json.loads(show.stdout)
    assert (shown["forge"], shown["forge_repo"], shown["forge_api_url"], shown["forge_label"]) == (
        "github",
        "octo-org/web",
        "https://api.github.com",
        "drover",
    )
    assert shown["max_fix_rounds"] == 3 and shown["forge_credential"]["kind"] == "token"
    assert shown["forge_credential"]["app_id"] == 0 and shown["webhook_secret"]["set"] is True
    assert secret not in show.stdout
    assert deleted.stdout.strip() == "project web: forge credential deleted"

    # Shown once: the secret is nowhere the control plane keeps anything, nor is the token or the key.
    body = key_pem.splitlines()[5]
    assert files_holding(plane.data_dir, [secret.encode(), TOKEN.encode(), body.encode()]) == []
    with plane.client() as admin:
        assert admin.projects.get("web").forge_credential.kind == ""


def test_the_forge_commands_refuse_a_secret_on_the_wrong_flag(fleet: Fleet, tmp_path: pathlib.Path) -> None:
    """`--kind app` without its ids or key, or with --secret-file, stops before any call; nothing is set."""
    fleet.plane.extra_env["DROVER_CREDENTIAL_KEY"] = Fernet.generate_key().decode()
    plane = fleet.start_plane()
    with plane.client() as admin:
        admin.projects.create("web", forge="github", forge_repo="octo/web")
    (tmp_path / "t").write_text(TOKEN)
    env = {**os.environ, "DROVER_TARGET": plane.target, "DROVER_TOKEN": plane.admin_token}
    for args in (
        ["--kind", "app", "--app-id", "1", "--installation-id", "2"],
        ["--kind", "app", "--app-id", "1", "--installation-id", "2", "--secret-file", str(tmp_path / "t")],
        ["--kind", "token"],
        ["--kind", "token", "--secret-file", str(tmp_path / "t"), "--app-id", "3"],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "drover.cli", "project", "forge", "set", "web", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode != 0 and TOKEN not in done.stderr, (args, done.stderr)
    with plane.client() as admin:
        assert admin.projects.get("web").forge_credential.kind == ""
