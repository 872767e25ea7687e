"""The `agentd` console script: the agent extra's modules are checked before anything runs."""

from __future__ import annotations

from drover.extras import absent, missing


def main() -> int:
    name = absent("agent")
    if name:
        return missing("agentd", "agent", ModuleNotFoundError(name=name))
    try:
        from agentd.cli import main as run
    except ModuleNotFoundError as err:
        return missing("agentd", "agent", err)
    return run()
