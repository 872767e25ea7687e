"""Every benchmark still runs: each with the smallest parameters, checked for its figures' lines and a
zero exit. The figures themselves are measured by running the benchmarks, not here."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.timeout(300)

SMALLEST = {
    "budgets.py": (
        ["--reservers", "2", "--seconds", "1", "--database", "sqlite", "--routing-iterations", "200"],
        ["reserve+settle", "tiers.decide_tier", "members.select"],
    ),
    "console_flood.py": (
        ["--streams", "5", "--uploads", "5", "--calls", "20", "--timeout", "200"],
        ["GetChange quiet", "GetChange flooded", "streams_open=5 uploads_open=5"],
    ),
    "dispatch.py": (
        ["--runs", "6", "--agents", "1", "--capacity", "3", "--database", "sqlite", "--warmup", "0"],
        ["6 succeeded", "runs/s"],
    ),
    "fleet.py": (
        ["--agents", "4", "--procs", "1", "--low", "2", "--runs", "4", "--output-runs", "2", "--lines", "10"]
        + ["--budget-runs", "2", "--pairs", "2", "--idle-seconds", "0.5", "--database", "sqlite", "--celery", "off"]
        + ["--timeout", "200"],  # under the test's own timeout: a stuck wait prints what it waited for
        ["connected agents", "saturation runs/s", "output MB/s", "budget pairs/s"],
    ),
    "forge_loop.py": (["--issues", "1", "--timeout", "200"], ["label -> PR opened", "-> pull request opened"]),
    "gateway.py": (["--calls", "3", "--warmup", "1"], ["gateway overhead json", "gateway overhead stream"]),
    "harness.py": (
        ["--round-trips", "3", "--command-round-trips", "1", "--runs", "1"],
        ["cheap round trips", "submit->change.finished"],
    ),
    "routing_economics.py": (["--tasks", "50"], ["always sonnet", "rules + classifier", "shipped vs always-sonnet:"]),
    "runstart.py": (["--runs", "2", "--warmup", "1"], ["a->exec", "a->started"]),
    "mirrors.py": (["--runs", "1"], ["clone direct", "clone mirrored", "mirror direct_ms="]),
    "workspaces.py": (["--runs", "1", "--warmup", "0"], ["workspace cold_ms=", "warm/cold"]),
    "startup.py": (["--runs", "1"], ["controlplane --version", "controlplane token create", "drover --version"]),
    "seccomp.py": (["--calls", "2000", "--rounds", "1"], ["getppid ns", "compileall of"]),
    "packets.py": (
        ["--files", "200", "--runs", "2", "--memory-files", "10", "--queries", "2"],
        ["compile     ms", "query ms"],
    ),
}


def test_every_benchmark_is_listed_here() -> None:
    assert sorted(p.name for p in (ROOT / "benchmarks").glob("*.py")) == sorted(SMALLEST)


@pytest.mark.parametrize("name", sorted(SMALLEST))
def test_the_benchmark_runs_and_prints_its_figures(name: str) -> None:
    args, expected = SMALLEST[name]
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / name), *args],
        capture_output=True,
        text=True,
        timeout=280,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for figure in expected:
        assert figure in done.stdout, (figure, done.stdout[-3000:])


def test_packets_on_a_real_repository_prints_its_line() -> None:
    """`--repo`: this checkout itself, read through GitTree as runs read a canonical commit."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "packets.py"), "--repo", str(ROOT), "--runs", "3"],
        capture_output=True,
        text=True,
        timeout=280,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    line = re.search(r"^packet first_ms=[\d.]+ warm_p50_ms=[\d.]+ files=(\d+) mb=[\d.]+$", done.stdout, re.M)
    assert line is not None and int(line.group(1)) > 100, done.stdout[-3000:]
