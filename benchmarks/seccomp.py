#!/usr/bin/env python3
"""What the seccomp filter costs a command: the same work in bubblewrap with and without it.

    python benchmarks/seccomp.py [--calls N] [--rounds N] [--package NAME]

Each round runs two commands in the sandbox as agentd runs them (as `nobody` when run as root), each
once with the filter (agentd/run/seccomp.py) and once without, alternating:

  getppid ns / ioctl ns / fork ns   CPU time per call, measured inside the command over --calls calls
              (minus an empty loop's): getppid is a call the kernel's filter cache answers, ioctl one
              whose argument the filter reads, fork one of clone's (its flags read too)
  compileall  CPU seconds (user + system) to byte-compile an installed package's real source
              (--package, default sqlalchemy): a build's mix of stat, open, read, write, rename

Each figure is the best of --rounds: on a shared machine the best is the one least disturbed.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import pathlib
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agentd.run.sandbox import BubblewrapSandbox, SandboxPolicy

PER_CALL = """
import fcntl, os, sys, termios, time
calls, fd = int(sys.argv[1]), os.open("/dev/null", os.O_RDONLY)
def nothing(): pass
def getppid(): os.getppid()
def ioctl():
    try: fcntl.ioctl(fd, termios.TCGETS, b"")
    except OSError: pass
def fork():
    pid = os.fork()
    if pid == 0: os._exit(0)
    os.waitpid(pid, 0)
spent = {}
for f, n in ((nothing, calls), (getppid, calls), (ioctl, calls), (fork, calls // 100)):
    t = time.process_time()
    for _ in range(n): f()
    spent[f.__name__] = (time.process_time() - t) / n * 1e9
print(*(spent[name] - spent["nothing"] for name in ("getppid", "ioctl", "fork")))
"""
COMPILE_ALL = """
import compileall, resource, sys
assert compileall.compile_dir(sys.argv[1], force=True, quiet=1)
usage = resource.getrusage(resource.RUSAGE_SELF)
print(usage.ru_utime + usage.ru_stime)
"""


def sandboxed(argv: list[str], workspace: pathlib.Path, filtered: bool) -> str:
    """The command's stdout."""
    policy = SandboxPolicy(user="nobody" if os.geteuid() == 0 else "", seccomp=filtered)
    # the byte code goes to the workspace: the package's own directory is read-only in the sandbox
    env = {"PATH": "/usr/bin:/bin", "HOME": str(workspace), "PYTHONPYCACHEPREFIX": str(workspace)}
    with BubblewrapSandbox(policy).wrap(argv, workspace, env) as launch:
        done = subprocess.run(launch.argv, capture_output=True, text=True, timeout=600, **launch.spawn_kwargs())
    if done.returncode != 0:
        raise SystemExit(f"{argv[:3]} failed: {done.stderr[-2000:]}")
    return done.stdout


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--calls", type=int, default=300_000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--package", default="sqlalchemy")
    args = p.parse_args()
    spec = importlib.util.find_spec(args.package)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"{args.package} is not an installed package")
    source = next(iter(spec.submodule_search_locations))
    best: dict[bool, list[float]] = {False: [float("inf")] * 4, True: [float("inf")] * 4}
    with tempfile.TemporaryDirectory(prefix="drover-seccomp-bench-") as scratch:
        workspace = pathlib.Path(scratch)
        os.chmod(workspace, 0o777)  # the session user writes the byte code here
        compile_all = [sys.executable, "-c", COMPILE_ALL, source]
        for _ in range(args.rounds):
            for filtered in (False, True):
                out = sandboxed([sys.executable, "-c", PER_CALL, str(args.calls)], workspace, filtered)
                cpu = sandboxed(compile_all, workspace, filtered)
                figures = [*map(float, out.split()), float(cpu)]
                best[filtered] = [min(a, b) for a, b in zip(best[filtered], figures, strict=True)]
    print(f"{'':12} {'getppid ns':>11} {'ioctl ns':>9} {'fork ns':>9} {'compileall s':>13}")
    for filtered in (False, True):
        g, i, f, c = best[filtered]
        print(f"{'filter' if filtered else 'no filter':12} {g:11.0f} {i:9.0f} {f:9.0f} {c:13.2f}")
    print(f"compileall of {args.package}: {100 * (best[True][3] / best[False][3] - 1):+.1f}% CPU with the filter")


if __name__ == "__main__":
    main()
