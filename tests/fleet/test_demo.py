"""The README's demo command works: the harness fixes the sample and the dependent test Task passes."""

import os
import subprocess
import sys

from tests.conftest import ROOT


def test_the_demo_change_succeeds() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    done = subprocess.run(
        [sys.executable, str(ROOT / "deploy" / "demo.py")], capture_output=True, text=True, timeout=180, env=env
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SCRIPTED FAKE Messages API server" in done.stdout  # said plainly
    out = done.stdout
    # The harness's tool calls print as they happen: before its run's run.finished, not after.
    assert out.index("fix |   -> edit_file") < out.index("run.finished") < out.index("test | Ran 2 tests")
    assert "test | OK" in out
    assert "-    return a - b\n+    return a + b" in done.stdout  # the ChangeSet's patch
    assert "change.finished           status=succeeded" in done.stdout
    assert done.stdout.rstrip().endswith("the demo's Change succeeded")


def test_the_demo_runs_where_bubblewrap_does_not_and_says_so() -> None:
    """README command 1 on a machine without bubblewrap: the demo's agentd runs --unsafe-no-sandbox and
    the output says so plainly, with how to install it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env["DROVER_AGENTD_BWRAP"] = "/nonexistent/bwrap"  # as if bubblewrap were not installed
    done = subprocess.run(
        [sys.executable, str(ROOT / "deploy" / "demo.py")], capture_output=True, text=True, timeout=180, env=env
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WITHOUT A SANDBOX (--unsafe-no-sandbox)" in done.stdout
    assert "apt-get install bubblewrap" in done.stdout
    assert done.stdout.rstrip().endswith("the demo's Change succeeded")
