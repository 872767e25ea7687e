"""The code base passes its linters on every test run: ruff's lint rules and formatting, and mypy's
type check (settings in pyproject.toml), with the versions the test extra pins; and buf lint on the
protobuf API (proto/buf.yaml), run with npx from npm's @bufbuild/buf."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("command", [("ruff", "check", "--no-cache", "."), ("ruff", "format", "--check", ".")])
def test_ruff(command: tuple[str, ...]) -> None:
    done = _run(*command)
    assert done.returncode == 0, f"`{' '.join(command)}` found:\n{done.stdout}{done.stderr}"


@pytest.mark.timeout(600)
def test_mypy() -> None:
    # Incremental, with the cache a developer's own `mypy` keeps (.mypy_cache): 35-45 s from a clean
    # checkout, a few seconds once the cache holds the unchanged modules.
    done = _run("mypy")
    assert done.returncode == 0, f"mypy found:\n{done.stdout}{done.stderr}"
    assert "Success" in done.stdout


BUF = "@bufbuild/buf@1.75.0"


@pytest.mark.timeout(600)
def test_buf_lint() -> None:
    npx = shutil.which("npx")
    if npx is None:
        pytest.skip("buf lint needs Node.js (npx); .ci/run installs it")
    done = subprocess.run([npx, "--yes", BUF, "lint", "proto"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"buf lint found:\n{done.stdout}{done.stderr}"


def test_every_package_and_its_data_ships() -> None:
    # A package left out of pyproject.toml works in the editable install the tests use and is missing
    # from a wheel; so are the console's templates unless package-data names them.
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    dirs = {"drover": ROOT / "sdk" / "drover", "controlplane": ROOT / "controlplane", "agentd": ROOT / "agentd"}
    found = {
        ".".join((top, *init.parent.relative_to(base).parts))
        for top, base in dirs.items()
        for init in base.rglob("__init__.py")
    }
    assert found == set(config["packages"])
    web = ROOT / "controlplane" / "web"
    patterns = config["package-data"]["controlplane.web"]
    shipped = {p for pattern in patterns for p in web.glob(pattern)}
    assert shipped == set((web / "templates").iterdir()) | set((web / "static").iterdir())
