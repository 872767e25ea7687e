"""The `agentd` console script: the agent extra's dependencies are checked before anything runs."""

from __future__ import annotations

from drover.extras import missing


def main() -> int:
    try:
        from agentd.cli import main as run
    except ModuleNotFoundError as err:
        return missing("agentd", "agent", err)
    return run()
