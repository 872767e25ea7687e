"""The README's demo command works and its Change succeeds."""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_the_demo_change_succeeds() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "deploy" / "demo.py")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "unit-tests | OK" in done.stdout
    assert "change.finished           status=succeeded" in done.stdout
    assert done.stdout.rstrip().endswith("the demo's Change succeeded")
