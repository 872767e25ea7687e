"""`pip install drover` is the SDK and CLI only; the daemons need an extra. Their console scripts
import their code inside a guard and, when a dependency is missing, say which extra to install
instead of failing with a traceback."""

from __future__ import annotations

import sys


def missing(program: str, extra: str, err: ModuleNotFoundError) -> int:
    """Say what to install; the exit code of a usage error."""
    print(
        f"{program}: {err.name} is not installed; {program} needs the {extra} extra: pip install 'drover[{extra}]'",
        file=sys.stderr,
    )
    return 2
