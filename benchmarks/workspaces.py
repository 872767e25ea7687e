#!/usr/bin/env python3
"""Prepared workspaces: how long from the control plane's assignment to the command running, when the
project's setup runs (cold) and when the agent starts the run from its prepared workspace (warm).

    python benchmarks/workspaces.py [--runs N] [--warmup N] [--package tenacity] [--sandbox bubblewrap|none]

Starts a real control plane (SQLite) and one real agentd of capacity 1 (its prepared-workspace cache
on), and a git repository holding a real package's source: an installed dependency's (default
tenacity), with a pyproject.toml, a requirements.txt and its build backend's wheel
(setuptools, from this interpreter's own) in wheels/. The project's setup is what a developer
runs on a fresh checkout, offline:

    python -m venv .venv && .venv/bin/pip install --no-index -f wheels -U setuptools
        && .venv/bin/pip install --no-index --no-deps --no-build-isolation -e .

Each command Task runs `.venv/bin/python` and prints the time first, then imports the package (so an
editable install that does not work fails the run). A cold run follows a commit that changes
requirements.txt (a cache key file: a new key, so setup runs, and its tree is kept); the warm run
after it has the same key and starts from that tree. Per run:

  cold / warm   run.assigned (the control plane's clock) -> the time the command printed

Both clocks are this machine's. The figures are p50s over --runs pairs after --warmup pairs; the last
line is `workspace cold_ms=<p50> warm_ms=<p50>`.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import pathlib
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "sdk"))
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))

from dispatch import Deadline, Proc, add_project, agentd_argv, pct, start_plane, wait_for
from runstart import event_time

from drover import Client

GIT_ENV = {"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@drover.invalid"}
GIT_ENV |= {"GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@drover.invalid"}


def git(repo: pathlib.Path, *args: str) -> None:
    env = {**os.environ, **GIT_ENV}
    subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, timeout=60)


def package_repo(path: pathlib.Path, package: str) -> pathlib.Path:
    """A git repository holding `package`'s installed source under src/, as its own project."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"{package} is not an installed package")
    source = pathlib.Path(next(iter(spec.submodule_search_locations)))
    shutil.copytree(source, path / "src" / package, ignore=shutil.ignore_patterns("__pycache__"))
    (path / "pyproject.toml").write_text(
        "[build-system]\nrequires = ['setuptools>=70']\nbuild-backend = 'setuptools.build_meta'\n\n"
        f"[project]\nname = '{package}-bench'\nversion = '1.0'\n\n"
        "[tool.setuptools.packages.find]\nwhere = ['src']\n"
    )
    repack("setuptools", path / "wheels")  # the build backend, vendored: setup is offline
    (path / "requirements.txt").write_text("# pinned by the benchmark: 0\n")
    (path / ".gitignore").write_text(".venv/\n*.egg-info/\nbuild/\n")
    git(path, "init", "-q", "-b", "main")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", f"{package} source")
    return path


def repack(name: str, out: pathlib.Path) -> pathlib.Path:
    """An installed distribution as the wheel it was installed from (its RECORD's files, compiled ones
    left out), so a fresh venv can install it with --no-index."""
    dist = importlib.metadata.distribution(name)
    out.mkdir(parents=True, exist_ok=True)
    wheel = out / f"{name}-{dist.version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for file in dist.files or []:
            if file.parts[0] != ".." and "__pycache__" not in file.parts:
                archive.write(file.locate(), str(file))
    return wheel


def one_run(client: Client, package: str, deadline: Deadline) -> tuple[float, bool]:
    """One command Task: milliseconds from assignment to the command running, and whether it was warm."""
    code = f"import time; print(time.time(), flush=True); import {package}; print({package}.__file__)"
    change = client.submit_change("bench", "start", [{"key": "t", "kind": "test", "objective": "clock",
                                                     "command": [".venv/bin/python", "-c", code]}])  # fmt: skip
    for event in client.watch(change.id):
        deadline.check("a run to finish")
        if event.kind == "change.finished":
            break
    run = client.list_runs(change_id=change.id)[0]
    printed = [line.text for line in client.run_logs(run.id) if line.stream == "stdout"]
    if run.state != "succeeded" or "/src/" not in "".join(printed):  # the editable install, not another
        said = "".join(line.text for line in client.run_logs(run.id))
        raise RuntimeError(f"run {run.id} ended {run.state}: {run.reason}\n{said[-4000:]}")
    executed = float(printed[0].split()[0])
    return (executed - event_time(client, run.id, "run.assigned")) * 1000, run.setup_cached


def bench(args: argparse.Namespace, tmp: pathlib.Path, deadline: Deadline) -> tuple[list[float], list[float]]:
    """Pairs of a cold run (after a commit changing requirements.txt) and a warm one; their figures."""
    origin = package_repo(tmp / "origin", args.package)
    data_dir = tmp / "cp"
    plane, target = start_plane(data_dir, tmp / "controlplane.log", dict(os.environ), deadline)
    procs = [plane]
    cold: list[float] = []
    warm: list[float] = []
    try:
        python = shlex.quote(sys.executable)
        setup = f"{python} -m venv .venv && .venv/bin/pip install -q --no-index -f wheels -U setuptools"
        setup += " && .venv/bin/pip install -q --no-index --no-deps --no-build-isolation -e ."
        project = ["--repo", str(origin), "--branch", "main", "--setup", setup, "--cache-key-file", "requirements*.txt"]
        add_project(data_dir, dict(os.environ), "bench", *project)
        extra = ["--unsafe-no-sandbox"] if args.sandbox == "none" else []
        argv = agentd_argv(target, "bench", data_dir, tmp, 1, *extra, "--prepared-cache-dir", str(tmp / "prepared"))
        procs.append(Proc("agentd", argv, tmp / "agentd.log", dict(os.environ)).start())
        token = (data_dir / "tokens" / "admin.token").read_text().strip()
        with Client(target, token=token) as client:
            wait_for(lambda: any(a.connected for a in client.list_agents()), deadline, 60, "agentd to connect")
            for i in range(args.warmup + args.runs):
                (origin / "requirements.txt").write_text(f"# pinned by the benchmark: {i + 1}\n")
                git(origin, "commit", "-q", "-am", f"requirements {i + 1}")  # a new key: setup runs
                pair = [one_run(client, args.package, deadline) for _ in range(2)]
                if [hit for _, hit in pair] != [False, True]:
                    raise RuntimeError(f"expected a miss then a hit, got {pair}")
                if i >= args.warmup:
                    cold.append(pair[0][0])
                    warm.append(pair[1][0])
                time.sleep(0.05)  # an idle agent: nothing of the previous run is still going
    finally:
        for p in reversed(procs):
            p.stop()
    return cold, warm


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="pairs of a cold and a warm run measured")
    parser.add_argument("--warmup", type=int, default=1, help="pairs run first, not counted")
    parser.add_argument("--package", default="tenacity", help="an installed pure-Python package: the project")
    parser.add_argument("--sandbox", default="bubblewrap", choices=["bubblewrap", "none"])
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()
    deadline = Deadline(args.timeout)
    with tempfile.TemporaryDirectory(prefix="drover-workspaces-") as tmp_name:
        tmp = pathlib.Path(tmp_name)
        tmp.chmod(0o711)  # the run's user passes through to its workspace
        cold, warm = bench(args, tmp, deadline)
    for name, values in (("cold", cold), ("warm", warm)):
        print(
            f"{name}  a->exec p50 {pct(values, 50):7.1f} ms  min {min(values):7.1f} ms  max {max(values):7.1f} ms"
            f"  ({len(values)} runs, {args.package}, sandbox {args.sandbox})"
        )
    print(f"warm/cold {pct(warm, 50) / pct(cold, 50):.1%}")
    print(f"workspace cold_ms={pct(cold, 50):.0f} warm_ms={pct(warm, 50):.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
