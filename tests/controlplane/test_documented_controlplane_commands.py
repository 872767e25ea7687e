"""The `controlplane` (and `--version`) commands the docs show, run as written in a directory of their own:
docs/configuration.md's block of token, project and index commands, and the token commands of concepts.md,
security.md and operations.md, each checked for what its page says (the secret printed once and never listed,
0600 token files, a revoked token shown revoked, a project's settings with the token file but not the token).

Adapted, and nothing else: `https://git.example/web.git` becomes a git repository of the test's and
`/etc/drover/web.token` a token file in the test's directory (where, not what); the projects the commands
name (`web`, `api`, `spare`) are made first; `project add web` runs before the block's other lines need
it; the placeholders N, P and PROJECT get names; `[--json]` is given.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shlex
import stat
import subprocess
import sys
from collections.abc import Callable

import pytest

from tests.conftest import ROOT, make_repo

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def block(page: str, containing: str) -> list[str]:
    text = (ROOT / "docs" / page).read_text()
    for found in re.findall(r"^```sh\n(.*?)^```", text, re.M | re.S):
        if containing in found:
            joined = found.replace("\\\n", " ")
            lines = [re.sub(r"(^|\s)#.*$", "", line) for line in joined.splitlines()]
            return [" ".join(line.split()) for line in lines if line.strip()]
    raise AssertionError(f"docs/{page} has no ```sh block with {containing!r}")


CONFIGURATION = block("configuration.md", "controlplane token create")
SPANS = [  # prose: docs/concepts.md, security.md (two), concepts.md, operations.md, configuration.md
    "controlplane token create --kind agent --name N --pool P",
    "controlplane token create --kind agent --name N [--pool P]",
    "controlplane token revoke --name N",
    "controlplane index build PROJECT",
    "controlplane token create --kind user --name alice --role submit --project web",
    "drover --version",
    "controlplane --version",
    "agentd --version",
]
STARTUP = [  # docs/performance.md: what benchmarks/startup.py times, in a fresh directory
    "controlplane --help",
    "controlplane token create --kind user --name alice --role submit",
    "controlplane project list",
]
RUN_FROM_THE_PAGES: dict[str, str] = dict.fromkeys([*CONFIGURATION, *SPANS, *STARTUP], "docs/")
"""What this file runs, for tests/test_shell_commands_in_docs.py."""


class Here:
    def __init__(self, path: pathlib.Path) -> None:
        self.path = path
        bin_dir = os.path.dirname(sys.executable)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "DROVER_"))}
        self.env["PATH"] = f"{bin_dir}:{self.env.get('PATH', '')}"

    def run(self, line: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            shlex.split(line), cwd=self.path, env=self.env, capture_output=True, text=True, timeout=120
        )

    def ok(self, line: str) -> str:
        done = self.run(line)
        assert done.returncode == 0, f"`{line}` exited {done.returncode}: {done.stdout}{done.stderr}"
        return done.stdout

    def row(self, name: str) -> dict[str, str]:
        """`controlplane token list`'s row of the newest token named `name`, by column."""
        lines = self.ok("controlplane token list").splitlines()
        head = re.split(r"\s{2,}", lines[0].strip())
        rows = [dict(zip(head, re.split(r"\s{2,}", line.strip()), strict=False)) for line in lines[1:]]
        return [row for row in rows if row["NAME"] == name][-1]


def adapt(line: str, repo: pathlib.Path, token_file: pathlib.Path, names: dict[str, str]) -> str:
    line = line.replace("https://git.example/web.git", str(repo)).replace("/etc/drover/web.token", str(token_file))
    line = re.sub(r"\[(-[^\]]*)\]", r"\1", line)  # `[--json]`, `[--pool P]`; not `'pytest [args]'`
    return " ".join(names.get(word, word) for word in line.split(" "))


def test_the_controlplane_commands_of_the_docs_run_as_written(tmp_path: pathlib.Path) -> None:
    here = Here(tmp_path / "here")
    here.path.mkdir()
    repo = make_repo(tmp_path / "web", {"app.py": "def handler():\n    return 'ok'\n"})
    token_file = tmp_path / "web.token"
    token_file.write_text("git-secret-never-shown\n")
    for name in ("api", "spare"):
        here.ok(f"controlplane project add {name} --repo {repo}")
    add_web = next(line for line in CONFIGURATION if line.startswith("controlplane project add web"))
    lines = [add_web, *(line for line in CONFIGURATION if line != add_web), *SPANS]
    names = iter(["doc-agent", "doc-agent-2", "ci"])
    secrets: list[str] = []
    for line in lines:
        n = next(names) if re.search(r"--name N\b", line) else ""
        command = adapt(line, repo, token_file, {"N": n, "P": "web", "PROJECT": "web"})
        try:
            check_one(here, command, secrets)
        except AssertionError as err:
            raise AssertionError(f"`{line}` (run as `{command}`): {err}") from None
    listed = here.ok("controlplane token list")
    assert not [s for s in secrets if s in listed], "a token's secret is listed"


def test_what_the_startup_benchmark_times_runs_in_a_fresh_directory(tmp_path: pathlib.Path) -> None:
    here = Here(tmp_path)
    assert "usage: controlplane" in here.ok(STARTUP[0])
    assert here.ok(STARTUP[1]).startswith("drv_")
    here.ok(STARTUP[2])


def check_one(here: Here, command: str, secrets: list[str]) -> None:
    words = command.split()
    key = " ".join(words[:3])
    if words[1] == "--version":
        assert here.ok(command).strip() == f"{words[0]} 0.1.0"
        return
    CHECKS.get(key, lambda h, c, s: h.ok(c))(here, command, secrets)


def token_create(here: Here, command: str, secrets: list[str]) -> None:
    name = command.split("--name ")[1].split()[0]
    if "--out" in command:
        out = here.path / command.split("--out ")[1].split()[0]
        assert here.ok(command).startswith(f"wrote agent token '{name}' to ")
        assert stat.S_IMODE(out.stat().st_mode) == 0o600
        refused = here.run(command)  # "an existing file: refused unless --force"
        assert refused.returncode != 0 and "--force" in refused.stderr, refused.stderr
        secrets.append(out.read_text().strip())
        return
    secret = here.ok(command).strip()  # "printed once"
    assert re.fullmatch(r"drv_\w_[\w-]{20,}", secret), secret
    secrets.append(secret)
    row = here.row(name)
    assert row["REVOKED"] == "-"
    if "--expires-in 30d" in command:
        assert row["EXPIRES"] != "-", row


def token_revoke(here: Here, command: str, secrets: list[str]) -> None:
    assert "refused from the next call on" in here.ok(command)  # "refused from the next call on"
    assert here.row(command.split("--name ")[1].split()[0])["REVOKED"] != "-"


def project_add(here: Here, command: str, secrets: list[str]) -> None:
    here.ok(command)
    shown = here.ok("controlplane project show web")
    settings = json.loads(shown)
    assert (settings["branch"], settings["pool"], settings["answer_window_minutes"]) == ("main", "web", 30)
    assert settings["commands"] == ["pytest [args]", "npm run <script>"]
    assert settings["git_token_file"].endswith("web.token") and "git-secret-never-shown" not in shown


def project_list(here: Here, command: str, secrets: list[str]) -> None:
    names = [p["name"] for p in json.loads(here.ok(command))]
    assert "web" in names, names


def project_show(here: Here, command: str, secrets: list[str]) -> None:
    shown = here.ok(command)
    assert json.loads(shown)["name"] == "web" and "git-secret-never-shown" not in shown


def project_remove(here: Here, command: str, secrets: list[str]) -> None:
    here.ok(command)
    assert "spare" not in [p["name"] for p in json.loads(here.ok("controlplane project list --json"))]


def index_build(here: Here, command: str, secrets: list[str]) -> None:
    assert here.ok(command).startswith("indexed web at ")


CHECKS: dict[str, Callable[[Here, str, list[str]], None]] = {
    "controlplane token create": token_create,
    "controlplane token list": lambda h, c, s: h.ok(c),
    "controlplane token revoke": token_revoke,
    "controlplane project add": project_add,
    "controlplane project list": project_list,
    "controlplane project show": project_show,
    "controlplane project remove": project_remove,
    "controlplane index build": index_build,
}
