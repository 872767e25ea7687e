"""docs/getting-started.md's "By hand", as written: its four commands in one directory (a repository of the test's
own put in for `/path/to/repo`), with its Change file, which must succeed (`drover submit --watch` exits 0)."""

from __future__ import annotations

import os
import pathlib
import re
import signal
import subprocess
import sys

import pytest

from tests.conftest import ROOT, make_repo, wait_for
from tests.fleet.test_tour import blocks, commands, directory  # noqa: F401 - `directory` is a fixture

pytestmark = pytest.mark.timeout(300)


def by_hand() -> str:
    text = (ROOT / "docs" / "getting-started.md").read_text()
    found = re.search(r"^## By hand\n(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    assert found, "docs/getting-started.md has no '## By hand' section"
    return found.group(1)


def names(folder: pathlib.Path) -> set[str]:
    return {p.name for p in folder.glob("*")}


def test_by_hand_runs_as_written(directory: pathlib.Path, tmp_path: pathlib.Path) -> None:  # noqa: F811
    (start,) = blocks(by_hand(), "sh")
    change_file = blocks(by_hand(), "yaml")[0]
    started = commands(start)
    assert [argv[:2] for argv in started] == [
        ["controlplane", "project"],
        ["controlplane", "serve"],
        ["agentd"],
        ["drover", "submit"],
    ]
    repo = make_repo(
        tmp_path / "repo",
        {
            "calc.py": "def add(a, b):\n    return a + b\n",
            "test_calc.py": "import unittest\n\nfrom calc import add\n\n\n"
            "class Add(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n",
        },
    )
    (directory / "change.yaml").write_text(change_file)
    bin_dir = os.path.dirname(sys.executable)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "DROVER_"))}
    env.update(PATH=f"{bin_dir}:{env.get('PATH', '')}")

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, cwd=directory, env=env, capture_output=True, text=True, timeout=120)

    added = run([str(repo) if word == "/path/to/repo" else word for word in started[0]])
    assert added.returncode == 0, added.stderr
    daemons: list[subprocess.Popen[bytes]] = []
    try:
        for argv in started[1:3]:
            log = open(directory.parent / f"{argv[0]}.log", "wb")  # noqa: SIM115 - the daemon holds it
            daemons.append(subprocess.Popen(argv, cwd=directory, env=env, stdout=log, stderr=subprocess.STDOUT))
            if argv[0] == "controlplane":  # "writes .drover/tokens/admin.token and agent.token on first start"
                wait_for(lambda: {"agent.token", "admin.token"} <= names(directory / ".drover" / "tokens"), 60)
        wait_for(lambda: run(["drover", "agents"]).stdout.count("\n") >= 2, 60, interval=0.5, what="agentd to connect")
        submitted = run(started[3])
        assert submitted.returncode == 0, submitted.stdout[-3000:] + submitted.stderr[-3000:]  # "exits 0 when ..."
        change = re.search(r"\b(chg_\w+)", submitted.stdout + submitted.stderr)
        assert change, submitted.stdout[-2000:]
        shown = run(["drover", "change", change.group(1)]).stdout
        assert "succeeded" in shown and "compile" in shown and "unit-tests" in shown, shown
    finally:
        for daemon in reversed(daemons):
            daemon.send_signal(signal.SIGTERM)
        for daemon in daemons:
            try:
                daemon.wait(30)
            except subprocess.TimeoutExpired:
                daemon.kill()
