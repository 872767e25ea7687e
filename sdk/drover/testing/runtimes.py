"""The real coding-agent runtimes for tests and the demo: Claude Code and opencode from npm, pinned,
installed once into a cache folder (`DROVER_RUNTIMES_DIR`, default `.drover/runtimes` under the
current directory) and run offline against `drover.testing.fake_anthropic`.

    from drover.testing import runtimes
    claude = runtimes.executable("claude")   # installs on first use (npm), then answers the path
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

PACKAGES = {"claude": "@anthropic-ai/claude-code@2.1.197", "opencode": "opencode-ai@1.18.33"}
"""The versions Drover's drivers are tested with."""
OFFLINE_ENV = {
    # Claude Code: no title/summary side calls to the model, no telemetry, no update checks
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_NON_ESSENTIAL_MODEL_CALLS": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
}


def folder() -> pathlib.Path:
    return pathlib.Path(os.environ.get("DROVER_RUNTIMES_DIR") or ".drover/runtimes").resolve()


def executable(name: str) -> str:
    """The path of `claude` or `opencode`, installing the pinned packages with npm when missing."""
    path = folder() / "node_modules" / ".bin" / name
    if not path.exists():
        npm = shutil.which("npm")
        if npm is None:
            raise RuntimeError("npm is not installed: Debian's nodejs and npm packages install it")
        folder().mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--prefix", str(folder()), *PACKAGES.values()],
            check=True,
            capture_output=True,
            timeout=900,
        )
    return str(path)
