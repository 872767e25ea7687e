"""The real coding-agent runtimes for tests and the demo: Claude Code and opencode from npm, pinned,
installed once into a cache folder (`DROVER_RUNTIMES_DIR`, default `~/.cache/drover/runtimes`, kept
across checkouts) and run offline against `drover.testing.fake_anthropic`.

    from drover.testing import runtimes
    claude = runtimes.executable("claude")   # installs on first use (npm), then answers the path
"""

from __future__ import annotations

import fcntl
import os
import pathlib
import shutil
import subprocess

PACKAGES = {"claude": "@anthropic-ai/claude-code@2.1.197", "opencode": "opencode-ai@1.18.33"}
"""The versions Drover's drivers are tested with."""


def folder() -> pathlib.Path:
    default = pathlib.Path.home() / ".cache" / "drover" / "runtimes"
    return pathlib.Path(os.environ.get("DROVER_RUNTIMES_DIR") or default).resolve()


def executable(name: str) -> str:
    """The path of `claude` or `opencode`, installing the pinned packages with npm when missing. Safe to
    call from several processes at once (parallel test workers, two checkouts): one installs under a lock
    file beside the folder, the others wait for it and find the install done."""
    path = folder() / "node_modules" / ".bin" / name
    if path.exists() and _pinned(folder()):
        return str(path)
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm is not installed: Debian's nodejs and npm packages install it")
    folder().mkdir(parents=True, exist_ok=True)
    with open(folder().parent / f"{folder().name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        if not path.exists() or not _pinned(folder()):
            subprocess.run(
                [npm, "install", "--no-audit", "--no-fund", "--prefix", str(folder()), *PACKAGES.values()],
                check=True,
                capture_output=True,
                timeout=900,
            )
    return str(path)


def _pinned(where: pathlib.Path) -> bool:
    """Whether the installed versions are the pinned ones."""
    import json

    for package in PACKAGES.values():
        name, _, version = package.rpartition("@")
        manifest = where / "node_modules" / name / "package.json"
        try:
            if json.loads(manifest.read_text()).get("version") != version:
                return False
        except (OSError, ValueError):
            return False
    return True


if __name__ == "__main__":  # python -m drover.testing.runtimes: install (or check) both, print their paths
    for program in PACKAGES:
        print(executable(program))
