"""The run check's settings are refused at start-up unless over 0, naming the setting (flag or env)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    ("args", "env", "said"),
    [
        (["--run-check-seconds", "0"], {}, "run_check_seconds: --run-check-seconds must be over 0, not 0"),
        (["--run-check-seconds", "-1.5"], {}, "run_check_seconds: --run-check-seconds must be over 0, not -1.5"),
        ([], {"DROVER_RUN_STALL_CHECKS": "0"}, "run_stall_checks: --run-stall-checks must be over 0, not 0"),
    ],
)
def test_a_run_check_setting_not_over_zero_stops_the_start(
    tmp_path: pathlib.Path, args: list[str], env: dict[str, str], said: str
) -> None:
    serve = [
        sys.executable,
        "-m",
        "controlplane.cli",
        "serve",
        "--data-dir",
        str(tmp_path / "cp"),
        "--listen",
        "127.0.0.1:0",
    ]
    done = subprocess.run([*serve, *args], capture_output=True, text=True, timeout=120, env={**os.environ, **env})
    assert done.returncode == 2, done.stderr
    assert said in done.stderr
