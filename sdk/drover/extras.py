"""What the console scripts know of the installed distribution: its version, and its extras.

`pip install drover` is the SDK and CLI only; the daemons need an extra. Their console scripts check
that the extra's modules are installed before anything runs and, when one is missing, say which extra to
install instead of failing with a traceback (or, since the commands import their modules when they run,
halfway through a command)."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from typing import Any

MODULES = {
    "agent": ("anthropic", "httpx2", "pygit2", "tenacity", "prometheus_client", "h11"),
    "server": (
        "prometheus_client",
        "grpc_reflection",
        "grpc_health",
        "sqlalchemy",
        "alembic",
        "psycopg",
        "pygit2",
        "anthropic",
        "httpx2",
        "tenacity",
        "starlette",
        "jinja2",
        "uvicorn",
        "cryptography",
        "githubkit",
        "hishel",
    ),
}
"""The top-level modules each daemon's extra installs (pyproject.toml's optional dependencies). The memory
extra is optional: the control plane runs without it and says so."""


def absent(extra: str) -> str:
    """The first of the extra's modules that is not installed, found without importing any; "" if none."""
    for name in MODULES[extra]:
        if importlib.util.find_spec(name) is None:
            return name
    return ""


def missing(program: str, extra: str, err: ModuleNotFoundError) -> int:
    """Say what to install; the exit code of a usage error."""
    print(
        f"{program}: {err.name} is not installed; {program} needs the {extra} extra: pip install 'drover[{extra}]'",
        file=sys.stderr,
    )
    return 2


def version() -> str:
    """The installed distribution's version ("unknown" when run from a source tree)."""
    import importlib.metadata  # here: slow to import, and only `--version` needs it

    try:
        return importlib.metadata.version("drover")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


class Version(argparse.Action):
    """`--version`, printed as argparse's own action prints it, the version read only when asked."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        kwargs.setdefault("help", "show program's version number and exit")
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        print(f"{parser.prog} {version()}")
        parser.exit()
