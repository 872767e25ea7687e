#!/usr/bin/env python3
"""A run's clone, direct from the forge and through agentd's repository mirror (drover/core/mirror.py).

    python benchmarks/mirrors.py [--package sqlalchemy] [--runs N]

Commits an installed package's source (sqlalchemy: 270 files, a 5 MB pack) to a git
repository served over smart HTTP by `git http-backend` behind a token-checking server on loopback
(drover.testing.git_http), then clones it at `main` the way a run's workspace is made:

  direct    workspace.prepare: every run fetches the whole repository from the forge
  mirrored  mirror.prepare: the mirror fetches what changed (one new commit before each run, as a
            busy repository has), then the workspace is made from the mirror on local disk

Per run: wall time, and bytes the forge sent (packs and ref advertisements). The first mirrored run
(creating the mirror: a whole fetch) is reported on its own. Loopback hides the network: on a real
forge a direct clone also pays the transfer of every byte, the mirrored one only the new commit's.
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "sdk"))
sys.path.insert(0, str(REPO / "benchmarks"))

from dispatch import pct

from drover.core import mirror, workspace
from drover.testing.git_http import GitHttpServer

TOKEN = "bench-token"


def project(package: str, tmp: pathlib.Path) -> pathlib.Path:
    """A bare repository holding `package`'s installed source on main."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"{package}: not an installed package")
    src = tmp / "src"
    shutil.copytree(
        next(iter(spec.submodule_search_locations)), src / package, ignore=shutil.ignore_patterns("__pycache__")
    )
    git = ["git", "-C", str(src), "-c", "user.name=bench", "-c", "user.email=bench@example.com"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", package], check=True)
    bare = tmp / "forge" / "project.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(src), str(bare)], check=True)
    return src


def advance(src: pathlib.Path, bare: pathlib.Path, i: int) -> None:
    """One new commit on the forge's main, as other people's pushes make between runs."""
    (src / "CHANGES.txt").write_text(f"change {i}\n")
    git = ["git", "-C", str(src), "-c", "user.name=bench", "-c", "user.email=bench@example.com"]
    subprocess.run([*git, "add", "CHANGES.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", f"change {i}"], check=True)
    subprocess.run([*git, "push", "-q", str(bare), "main"], check=True)


def timed(forge: GitHttpServer, clone: object) -> tuple[float, int]:
    sent = forge.sent
    start = time.perf_counter()
    assert callable(clone)
    clone()
    return (time.perf_counter() - start) * 1000, forge.sent - sent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--package", default="sqlalchemy", help="an installed package: the repository's content")
    parser.add_argument("--runs", type=int, default=7, help="clones measured each way")
    args = parser.parse_args()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="drover-mirrors-"))
    try:
        src = project(args.package, tmp)
        bare = tmp / "forge" / "project.git"
        with GitHttpServer(tmp / "forge", {TOKEN}) as forge:
            url, mirrors = forge.url("project"), tmp / "mirrors"
            direct = [
                timed(forge, lambda i=i: workspace.prepare(tmp / f"d{i}", url, "main", TOKEN)) for i in range(args.runs)
            ]
            first = timed(forge, lambda: mirror.prepare(tmp / "m-first", url, "main", TOKEN, mirrors))
            mirrored = []
            for i in range(args.runs):
                advance(src, bare, i + 1)
                mirrored.append(timed(forge, lambda i=i: mirror.prepare(tmp / f"m{i}", url, "main", TOKEN, mirrors)))
        pack_mb = sum(p.stat().st_size for p in (bare / "objects").rglob("*") if p.is_file()) / 1e6
        print(f"repository: {args.package}'s source, {pack_mb:.1f} MB of objects; {args.runs} clones each way")
        for name, runs in (("direct", direct), ("mirrored", mirrored)):
            ms, sent = [r[0] for r in runs], [r[1] for r in runs]
            print(
                f"clone {name:9} ms p50 {pct(ms, 50):7.0f}  min {min(ms):7.0f}  max {max(ms):7.0f}"
                f"  forge bytes/run p50 {pct(sent, 50):>11,.0f}"
            )
        print(f"clone mirror-creating run ms {first[0]:.0f}, forge bytes {first[1]:,}")
        direct_ms, mirrored_ms = pct([r[0] for r in direct], 50), pct([r[0] for r in mirrored], 50)
        print(f"mirror direct_ms={direct_ms:.0f} mirrored_ms={mirrored_ms:.0f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
