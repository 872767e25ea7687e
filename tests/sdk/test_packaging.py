"""`pip install drover` as a user runs it, in a fresh virtual environment: the SDK and CLI only, and the
daemons say which extra they need instead of a traceback."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import venv

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def base_install(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """A fresh venv with exactly `pip install <checkout>`: no extras."""
    base = tmp_path_factory.mktemp("base")
    env = base / "venv"
    venv.create(env, with_pip=True)
    # From a copy of the checkout: a build writes build/ and *.egg-info into its source tree, and the
    # other test worker may be installing the same checkout at the same moment.
    source = base / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*LOCAL_ONLY))
    done = subprocess.run(
        [env / "bin" / "python", "-m", "pip", "install", "-q", "--no-cache-dir", str(source)],
        capture_output=True,
        text=True,
        timeout=500,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return env


LOCAL_ONLY = (".git", ".venv", "build", "*.egg-info", "test-artifacts", "__pycache__", "node_modules", ".*_cache")
"""What a checkout holds that is not the project's source: not copied for the install."""


def test_the_base_install_is_the_sdk_and_cli_with_three_dependencies(base_install: pathlib.Path) -> None:
    listed = subprocess.run(
        [base_install / "bin" / "python", "-m", "pip", "list", "--format=freeze"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    installed = {line.split("==")[0].lower().replace("_", "-") for line in listed.splitlines()}
    assert {"drover", "grpcio", "protobuf", "pyyaml"} <= installed
    assert not installed & {"sqlalchemy", "anthropic", "pygit2", "chromadb", "onnxruntime", "psycopg"}, installed
    sdk = subprocess.run(
        [base_install / "bin" / "python", "-c", "from drover import Client, models; print(models.Run.__doc__)"],
        capture_output=True,
        text=True,
        cwd="/",
    )
    assert sdk.returncode == 0, sdk.stderr
    cli = subprocess.run([base_install / "bin" / "drover", "--help"], capture_output=True, text=True, cwd="/")
    assert cli.returncode == 0 and "submit" in cli.stdout


@pytest.mark.parametrize(("program", "extra"), [("controlplane", "server"), ("agentd", "agent")])
def test_a_daemon_without_its_extra_names_the_extra(base_install: pathlib.Path, program: str, extra: str) -> None:
    done = subprocess.run([base_install / "bin" / program, "--help"], capture_output=True, text=True, cwd="/")
    assert done.returncode == 2
    assert f"pip install 'drover[{extra}]'" in done.stderr
    assert "Traceback" not in done.stderr
