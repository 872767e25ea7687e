"""The README's 5-minute tour, as written: its commands in one directory (the project's path put in for
`/path/to/repo`), its Change file, then every `drover` command it shows to look at the result, with the ids
they ask for. The model is the scripted fake Messages API (the tour says a Task without a command needs a key
or the fake)."""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from drover.testing import fake_anthropic as fake
from tests.conftest import API_KEY, ROOT, make_repo, wait_for

# The README's commands as written: the default ports (50051, the console's 8080) and agentd's default
# name and spool (/var/lib/drover-agentd/<host>), which test_refusals.py's default-spool test shares.
pytestmark = [pytest.mark.timeout(300), pytest.mark.xdist_group("readme-defaults")]

DOCSTRINGS = '"""Arithmetic."""\n\n\ndef add(a, b):\n    """The sum of a and b."""\n    return a + b\n'


def tour() -> str:
    text = (ROOT / "README.md").read_text()
    found = re.search(r"^## A 5-minute tour\n(.*?)^## ", text, re.MULTILINE | re.DOTALL)
    assert found, "README has no '## A 5-minute tour' section"
    return found.group(1)


def blocks(section: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", section, re.MULTILINE | re.DOTALL)


def commands(block: str) -> list[list[str]]:
    """Each line's command without its comment."""
    return [shlex.split(line, comments=True) for line in block.splitlines() if line.strip()]


@pytest.fixture
def directory(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    """Where the tour's commands run; agentd's default spool (as root, /var/lib/drover-agentd/HOST) is
    removed afterwards when the tour made it."""
    here = tmp_path / "here"
    here.mkdir()
    spool = pathlib.Path("/var/lib/drover-agentd") / socket.gethostname()
    existed = spool.exists()
    yield here
    if not existed and os.geteuid() == 0:
        shutil.rmtree(spool, ignore_errors=True)


def test_the_tour_runs_as_written(directory: pathlib.Path, tmp_path: pathlib.Path, model: fake.FakeAnthropic) -> None:
    start, look = blocks(tour(), "sh")
    (change_file,) = blocks(tour(), "yaml")
    started = commands(start)
    assert [argv[0] for argv in started] == ["controlplane", "controlplane", "agentd", "drover"]
    repo = make_repo(
        tmp_path / "repo",
        {
            "calc.py": "def add(a, b):\n    return a + b\n",
            "test_calc.py": "import unittest\n\nfrom calc import add\n\n\n"
            "class Add(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n",
        },
    )
    model.extend(
        [
            fake.tool_use("write_file", {"path": "calc.py", "content": DOCSTRINGS}),
            fake.tool_use("complete_task", {"summary": "one-line docstrings"}),
        ]
    )
    (directory / "change.yaml").write_text(change_file)
    bin_dir = os.path.dirname(sys.executable)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "DROVER_"))}
    env.update(PATH=f"{bin_dir}:{env.get('PATH', '')}", ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=API_KEY)

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, cwd=directory, env=env, capture_output=True, text=True, timeout=120)

    add = [str(repo) if word == "/path/to/repo" else word for word in started[0]]
    assert run(add).returncode == 0
    daemons: list[subprocess.Popen[bytes]] = []
    try:
        for argv in started[1:3]:
            log = open(directory.parent / f"{argv[0]}.log", "wb")  # noqa: SIM115 - the daemon holds it
            daemons.append(subprocess.Popen(argv, cwd=directory, env=env, stdout=log, stderr=subprocess.STDOUT))
            if argv[0] == "controlplane":
                wait_for(lambda: (directory / ".drover" / "tokens" / "agent.token").exists(), 60, what="serve")
        wait_for(lambda: run(["drover", "agents"]).stdout.count("\n") >= 2, 60, interval=0.5, what="agentd to connect")
        submitted = run(started[3])
        assert submitted.returncode == 0, submitted.stdout[-3000:] + submitted.stderr[-3000:]
        change = re.search(r"\b(chg_\w+)", submitted.stdout + submitted.stderr)
        assert change, submitted.stdout[-2000:]
        runs = run(["drover", "runs", "--change", change.group(1)]).stdout
        changesets = run(["drover", "changesets", change.group(1)]).stdout
        ids = {
            "CHANGE": change.group(1),
            "RUN": next(re.findall(r"\b(run_\w+)", ln)[0] for ln in runs.splitlines() if "docstrings" in ln),
            "CHANGESET": re.findall(r"\b(cs_\w+)", changesets)[0],
        }
        for argv in commands(look):
            done = run([ids.get(word, word) for word in argv])
            assert done.returncode == 0, (argv, done.stdout[-2000:], done.stderr[-2000:])
            assert done.stdout.strip(), argv
        patch = run(["drover", "patch", ids["CHANGESET"]]).stdout
        assert '+    """The sum of a and b."""' in patch
    finally:
        for daemon in reversed(daemons):
            daemon.send_signal(signal.SIGTERM)
        for daemon in daemons:
            try:
                daemon.wait(30)
            except subprocess.TimeoutExpired:
                daemon.kill()
