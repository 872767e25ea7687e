"""The README's quick start command 1, exactly as written, in a fresh copy of the checkout with a fresh
virtual environment: the demo must succeed with nothing but what that command installs."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.timeout(900)


def readme_command(number: int) -> str:
    text = (ROOT / "README.md").read_text()
    found = re.search(rf"^# {number}\. .*\n(.+)$", text, re.MULTILINE)
    assert found, f"README has no quick start command {number}"
    return found.group(1).strip()


def fresh_copy(to: pathlib.Path) -> None:
    """The checkout's files as a clone would have them (with uncommitted edits), without .venv or .drover."""
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, files):
        source = ROOT / os.fsdecode(name)
        if source.is_file():
            (to / source.relative_to(ROOT)).parent.mkdir(parents=True, exist_ok=True)
            (to / source.relative_to(ROOT)).write_bytes(source.read_bytes())
            (to / source.relative_to(ROOT)).chmod(source.stat().st_mode)


def test_command_1_runs_the_demo_as_written(tmp_path: pathlib.Path) -> None:
    command = readme_command(1)
    assert "deploy/demo.py" in command and ".[test]" not in command
    fresh_copy(tmp_path)
    # A user's shell: no virtual environment of ours on PATH, no model key.
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV" and not k.startswith(("ANTHROPIC_", "DROVER_"))}
    ours = str(pathlib.Path(os.environ.get("VIRTUAL_ENV", "/nonexistent")) / "bin")
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p != ours)
    done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=840)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert done.stdout.rstrip().endswith("the demo's Change succeeded")
    assert (tmp_path / ".venv" / "bin" / "python").exists()  # it ran in the venv the command made
    # the demo's extra is the small one: semantic memory (chroma, onnxruntime) is the memory extra's
    listed = subprocess.run(
        [tmp_path / ".venv" / "bin" / "python", "-m", "pip", "list", "--format=freeze"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    installed = {line.split("==")[0].lower() for line in listed.splitlines()}
    assert {"sqlalchemy", "anthropic", "pygit2"} <= installed
    assert not installed & {"chromadb", "onnxruntime", "tokenizers", "numpy"}, installed
