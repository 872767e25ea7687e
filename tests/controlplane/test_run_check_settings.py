"""The run check's settings are refused at start-up unless over 0, and the retry delay unless from 0 to a
day, naming the setting (flag or env)."""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys

import pytest

from controlplane import serve_liveness
from controlplane.config import ServerConfig


@pytest.mark.parametrize(
    ("args", "env", "said"),
    [
        (["--run-check-seconds", "0"], {}, "run_check_seconds: --run-check-seconds must be over 0, not 0"),
        (["--run-check-seconds", "-1.5"], {}, "run_check_seconds: --run-check-seconds must be over 0, not -1.5"),
        ([], {"DROVER_RUN_STALL_CHECKS": "0"}, "run_stall_checks: --run-stall-checks must be over 0, not 0"),
        (
            ["--retry-delay-seconds", "-1"],
            {},
            "retry_delay_seconds: --retry-delay-seconds must be from 0 to 86400, not -1",
        ),
        ([], {"DROVER_RETRY_DELAY_SECONDS": "inf"}, "--retry-delay-seconds must be from 0 to 86400, not inf"),
        ([], {"DROVER_RETRY_DELAY_SECONDS": "nan"}, "--retry-delay-seconds must be from 0 to 86400, not nan"),
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


def test_the_retry_delay_reaches_the_decision_of_the_next_attempt() -> None:
    parser = argparse.ArgumentParser()
    serve_liveness.add_options(parser, lambda name, default: {"DROVER_RETRY_DELAY_SECONDS": "0"}.get(name, default))
    assert serve_liveness.settings(parser.parse_args([]))["retry_delay_seconds"] == 0  # from the environment
    chosen = serve_liveness.settings(parser.parse_args(["--retry-delay-seconds", "0.25"]))["retry_delay_seconds"]
    assert ServerConfig(data_dir=pathlib.Path("."), retry_delay_seconds=chosen).lifecycle.retry_delay_seconds == 0.25
    assert ServerConfig(data_dir=pathlib.Path(".")).lifecycle.retry_delay_seconds == 5  # the default
