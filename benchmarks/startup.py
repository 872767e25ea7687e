#!/usr/bin/env python3
"""Start-up time of the console scripts: what a user waits for each command they type.

    python benchmarks/startup.py [--runs N]

Runs each command N times (default 5) as a fresh process, from the bin directory of the Python running
this script (a virtual environment's `controlplane`, `drover`, `agentd`), and prints the best wall time of
each: the best is the command's own cost, the others add the machine's other work. `token create` and
`project list` run against a fresh SQLite data directory (the first run creates and migrates it and is
not counted).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import tempfile
import time

BIN = pathlib.Path(sys.executable).parent


def commands(data_dir: str) -> list[list[str]]:
    where = ["--data-dir", data_dir]
    return [
        ["controlplane", "--version"],
        ["controlplane", "--help"],
        ["controlplane", "token", "create", "--kind", "user", "--name", "alice", "--role", "submit", *where],
        ["controlplane", "token", "list", *where],
        ["controlplane", "project", "list", *where],
        ["drover", "--version"],
        ["drover", "--help"],
        ["agentd", "--version"],
        ["agentd", "--help"],
    ]


def best_of(argv: list[str], runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run([str(BIN / argv[0]), *argv[1:]], capture_output=True, text=True)
        took = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr}")
        best = min(best, took)
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5, help="runs of each command; the best is printed (default 5)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = os.path.join(tmp, "data")
        subprocess.run(
            [str(BIN / "controlplane"), "project", "list", "--data-dir", data_dir], check=True, capture_output=True
        )
        print(f"startup best of {args.runs} runs, wall seconds ({os.cpu_count()} cores)")
        for argv in commands(data_dir):
            print(f"{best_of(argv, args.runs):6.3f}  {' '.join(a if a != data_dir else 'DIR' for a in argv)}")


if __name__ == "__main__":
    main()
