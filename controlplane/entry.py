"""The `controlplane` console script: the server extra's dependencies are checked before anything runs."""

from __future__ import annotations

from drover.extras import missing


def main() -> int:
    try:
        from controlplane.cli import main as run
    except ModuleNotFoundError as err:
        return missing("controlplane", "server", err)
    return run()
