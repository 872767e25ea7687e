"""The `controlplane` console script: the server extra's modules are checked before anything runs."""

from __future__ import annotations

from drover.extras import absent, missing


def main() -> int:
    name = absent("server")
    if name:
        return missing("controlplane", "server", ModuleNotFoundError(name=name))
    try:
        from controlplane.cli import main as run
    except ModuleNotFoundError as err:
        return missing("controlplane", "server", err)
    return run()
