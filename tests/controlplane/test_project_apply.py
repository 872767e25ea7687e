"""`controlplane project apply FILE` run as a real process, as an operator runs it: projects added, left
alone and updated key by key; a forge link whose token and webhook secret come from files and are stored
sealed; a bad file (an unknown key, a wrong type, a bad value, a missing secret file) refused with exit 2
naming `projects.NAME.KEY`, with nothing written; --dry-run writing nothing. Then docs/configuration.md's
example file and the commands the docs show for it, run as written.

Adapted, and nothing else: the example's repository URLs become git repositories of the test's and
`/etc/drover/` the test's directory (where, not what)."""

from __future__ import annotations

import json
import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest
import sqlalchemy
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from controlplane.services.credentials import Sealer, webhook_secret
from controlplane.store.models import Project
from tests.conftest import ROOT, make_repo

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

FORGE_TOKEN = "github_pat_apply0123456789abcdef"
HOOK_SECRET = "hook-secret-from-a-file-0123456789"


class Host:
    """`controlplane` on the host, against one database (SQLite in a data dir, or PostgreSQL)."""

    def __init__(self, path: pathlib.Path, database_url: str = "") -> None:
        self.path = path
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "DROVER_"))}
        self.env["DROVER_DATA_DIR"] = str(path / "data")
        if database_url:
            self.env["DROVER_DATABASE_URL"] = database_url
        self.env["PATH"] = f"{os.path.dirname(sys.executable)}:{self.env.get('PATH', '')}"
        self.url = database_url or f"sqlite:///{path / 'data' / 'drover.db'}"

    def run(self, line: str) -> subprocess.CompletedProcess[str]:
        args = [sys.executable, "-m", "controlplane.cli", *shlex.split(line)]
        return subprocess.run(args, cwd=self.path, env=self.env, capture_output=True, text=True, timeout=120)

    def ok(self, line: str) -> str:
        done = self.run(line)
        assert done.returncode == 0, f"`{line}` exited {done.returncode}: {done.stdout}{done.stderr}"
        return done.stdout

    def projects(self) -> list[dict[str, object]]:
        return json.loads(self.ok("project list --json"))  # type: ignore[no-any-return]

    def show(self, name: str) -> dict[str, object]:
        return json.loads(self.ok(f"project show {name}"))  # type: ignore[no-any-return]

    def db(self, query: str) -> list[tuple[object, ...]]:
        engine = sqlalchemy.create_engine(self.url)
        try:
            with engine.connect() as conn:
                return [tuple(row) for row in conn.execute(sqlalchemy.text(query))]
        finally:
            engine.dispose()

    def events(self) -> list[str]:
        return [str(kind) for (kind,) in self.db("SELECT kind FROM events WHERE kind LIKE 'project.%' ORDER BY id")]


def write(path: pathlib.Path, text: str) -> pathlib.Path:
    path.write_text(text)
    return path


@pytest.fixture(params=["sqlite", "postgresql"])
def host(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Host:
    url = request.getfixturevalue("pg_url") if request.param == "postgresql" else ""
    return Host(tmp_path, url)


@pytest.fixture
def sqlite_host(tmp_path: pathlib.Path) -> Host:
    return Host(tmp_path)


def test_a_file_adds_its_projects_leaves_them_when_unchanged_and_sets_only_what_changed(host: Host) -> None:
    repo = make_repo(host.path / "web-repo", {"app.py": "print('hi')\n"})
    host.ok(f"project add api --repo {repo} --git-name 'Api Bot' --pool api")
    host.ok("project add spare")
    projects = write(
        host.path / "projects.toml",
        """
[projects.web]
repo = "web-repo"
pool = "web"
allow = ["pytest [args]", "npm run <script>"]
setup = ["pip install -e ."]
env = { MODE = "test" }
network = true
monthly_budget_usd = 20

[projects.api]
monthly_budget_usd = 7.5
""",
    )
    assert host.ok("project apply projects.toml").splitlines() == ["web: added", "api: updated (monthly_budget_usd)"]
    web = host.show("web")
    assert (web["repo"], web["branch"], web["pool"], web["network"]) == (str(repo), "main", "web", True)
    assert (web["commands"], web["setup"], web["env"]) == (
        ["pytest [args]", "npm run <script>"],
        ["pip install -e ."],
        {"MODE": "test"},
    )
    api = host.show("api")  # the keys the file does not name stay as they were
    assert (api["monthly_budget_usd"], api["git_name"], api["pool"]) == (7.5, "Api Bot", "api")
    assert "spare" in [p["name"] for p in host.projects()], "a project the file leaves out is never removed"
    events = host.events()
    assert events[-2:] == ["project.added", "project.updated"]

    listed = host.projects()
    assert host.ok("project apply projects.toml").splitlines() == ["web: unchanged", "api: unchanged"]
    assert host.projects() == listed and host.events() == events, "an unchanged file writes nothing"

    projects.write_text(projects.read_text().replace('pool = "web"', 'pool = "web-2"').replace("20", "25"))
    assert host.ok("project apply projects.toml").splitlines() == [
        "web: updated (pool, monthly_budget_usd)",
        "api: unchanged",
    ]
    web = host.show("web")
    assert (web["pool"], web["monthly_budget_usd"], web["env"]) == ("web-2", 25, {"MODE": "test"})
    assert host.events() == [*events, "project.updated"]


def rsa_pem() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def test_a_forge_link_takes_its_token_and_webhook_secret_from_files_and_stores_them_sealed(sqlite_host: Host) -> None:
    host = sqlite_host
    host.ok("credential-key --out credential.key")
    token = write(host.path / "web-forge.token", FORGE_TOKEN + "\n")
    write(host.path / "web-webhook.secret", HOOK_SECRET + "\n")
    pem = rsa_pem()
    write(host.path / "docs-app.pem", pem)
    write(
        host.path / "projects.toml",
        """
[projects.web]
forge = "github"
forge_repo = "octo-org/web"
max_fix_rounds = 2
forge_token_file = "web-forge.token"
webhook_secret_file = "web-webhook.secret"

[projects.docs]
forge = "github"
forge_repo = "octo-org/docs"
forge_app_id = 123456
forge_installation_id = 987654321
forge_app_key_file = "docs-app.pem"
""",
    )
    apply = "project apply projects.toml --credential-key-file credential.key"
    done = host.run(apply)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["web: added", "docs: added"]
    web, docs = host.show("web"), host.show("docs")
    assert (web["forge_repo"], web["max_fix_rounds"], web["forge_credential"], web["webhook_secret"]) == (
        "octo-org/web", 2, "token", True
    )  # fmt: skip
    assert (docs["forge_credential"], docs["webhook_secret"]) == ("app", False)
    rows = host.db("SELECT * FROM projects")
    stored = " ".join(str(value) for row in rows for value in row)
    for secret in (FORGE_TOKEN, HOOK_SECRET, pem.splitlines()[5]):
        assert secret not in stored and secret not in done.stdout + done.stderr
    assert host.db("SELECT forge_app_id, forge_installation_id FROM projects WHERE name = 'docs'") == [
        (123456, 987654321)
    ]
    sealer = Sealer.from_config(str(host.path / "credential.key"))
    (sealed,) = host.db("SELECT webhook_secret_sealed FROM projects WHERE name = 'web'")[0]
    assert webhook_secret(Project(webhook_secret_sealed=sealed), sealer) == HOOK_SECRET.encode()  # what /hooks checks

    events = host.events()
    assert host.ok(apply).splitlines() == ["web: unchanged", "docs: unchanged"]
    assert host.events() == events
    token.write_text("github_pat_rotated0123456789\n")
    assert host.ok(apply).splitlines() == ["web: updated (forge_token_file)", "docs: unchanged"]
    assert host.events() == [*events, "project.forge_credential_set"]


@pytest.mark.parametrize(
    ("table", "place", "why"),
    [
        ('forge_rpo = "octo-org/web"', "projects.web.forge_rpo", "unknown key"),
        ('forge_token = "github_pat_inline0123"', "projects.web.forge_token", "never written in the file"),
        ('network = "yes"', "projects.web.network", "must be true or false"),
        ("max_fix_rounds = 99", "projects.web.max_fix_rounds", "0"),
        ("weight = 0", "projects.web.weight", "must be 1 to 1000"),
        ('env = { DROVER_X = "1" }', "projects.web.env[DROVER_X]", "DROVER_"),
        ('forge_token_file = "missing.token"', "projects.web.forge_token_file", "missing.token: No such file"),
    ],
)
def test_a_bad_file_is_refused_naming_the_key_and_nothing_is_written(
    sqlite_host: Host, table: str, place: str, why: str
) -> None:
    host = sqlite_host
    host.ok("project add web --pool old")
    before, events = host.projects(), host.events()
    write(
        host.path / "projects.toml",
        f'[projects.docs]\nmonthly_budget_usd = 3\n\n[projects.web]\npool = "new"\n{table}\n',
    )
    for dry_run in ("", " --dry-run"):
        done = host.run(f"project apply projects.toml{dry_run}")
        assert done.returncode == 2, (done.stdout, done.stderr)
        assert done.stderr.startswith(f"controlplane: {place}: ") and why in done.stderr, done.stderr
        assert len(done.stderr.splitlines()) == 1, done.stderr
        assert "github_pat_inline0123" not in done.stderr and not done.stdout
        assert host.projects() == before and host.events() == events, "a bad file changes nothing"


def test_dry_run_prints_what_would_change_and_writes_nothing(sqlite_host: Host) -> None:
    host = sqlite_host
    host.ok("project add web --max-fix-rounds 3")
    before, events = host.projects(), host.events()
    write(host.path / "projects.toml", "[projects.web]\nmax_fix_rounds = 5\n\n[projects.docs]\n")
    assert host.ok("project apply projects.toml --dry-run").splitlines() == [
        "web: updated (max_fix_rounds)",
        "docs: added",
    ]
    assert host.projects() == before and host.events() == events


def configuration_example() -> str:
    doc = (ROOT / "docs" / "configuration.md").read_text().split("\n#### Projects in a file\n", 1)[1]
    block = re.search(r"```toml\n(.*?)```", doc, re.S)
    assert block, "docs/configuration.md's example of a projects file"
    return block.group(1)


def documented_lines() -> list[str]:
    """The `controlplane project apply` lines of the docs' shell blocks (comments left out)."""
    found = []
    for page in ("configuration.md", "operations.md"):
        for block in re.findall(r"^```sh\n(.*?)^```", (ROOT / "docs" / page).read_text(), re.M | re.S):
            for line in block.replace("\\\n", " ").splitlines():
                command = " ".join(re.sub(r"(^|\s)#.*$", "", line).split())
                if command.startswith("controlplane project apply") and command not in found:
                    found.append(command)
    return found


RUN_FROM_THE_PAGES: dict[str, str] = dict.fromkeys(documented_lines(), "docs/")
"""What this file runs, for tests/test_shell_commands_in_docs.py."""


def test_the_documented_file_and_commands_run_as_written(sqlite_host: Host) -> None:
    host = sqlite_host
    etc = host.path / "etc"
    etc.mkdir()
    example = configuration_example()
    for url in sorted(set(re.findall(r'repo = "(https://[^"]+)"', example))):
        name = url.rsplit("/", 1)[1].removesuffix(".git")
        example = example.replace(url, str(make_repo(host.path / f"{name}-origin", {"README.md": f"# {name}\n"})))
    write(host.path / "projects.toml", example.replace("/etc/drover/", f"{etc}/"))
    for name in re.findall(r'"/etc/drover/([^"]+)"', example):
        write(etc / name, rsa_pem() if name.endswith(".pem") else f"{name.replace('.', '-')}-0123456789\n")
    names = re.findall(r"^\[projects\.([\w.-]+)\]", example, re.M)
    lines = documented_lines()
    assert len(lines) >= 2 and any("--dry-run" in line for line in lines), lines
    host.ok(f"credential-key --out {etc}/credential.key")
    for line in sorted(lines, key=lambda line: "--dry-run" not in line):  # the dry run first, as the page says
        out = host.ok(line.replace("/etc/drover/", f"{etc}/").removeprefix("controlplane "))
        assert out.splitlines() == [f"{name}: added" for name in names], (line, out)
        listed = [p["name"] for p in host.projects()]
        assert listed == ([] if "--dry-run" in line else sorted(names)), (line, listed)
    web = host.show("web")
    assert (web["forge"], web["forge_credential"], web["webhook_secret"]) == ("github", "app", True)
    assert (web["weight"], host.show("docs")["weight"]) == (2, 1)  # the file's, and the default
    assert host.ok(lines[-1].replace("/etc/drover/", f"{etc}/").removeprefix("controlplane ")).splitlines() == [
        f"{name}: unchanged" for name in names
    ]
