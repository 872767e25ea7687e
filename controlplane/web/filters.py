"""How the console's templates show values: times, money, JSON, diffs."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from markupsafe import Markup, escape


def when(at: dt.datetime | None) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S UTC") if at else ""


def usd(micros: int | float) -> str:
    return f"${micros / 1e6:,.4f}" if abs(micros) < 1e6 else f"${micros / 1e6:,.2f}"


def dollars(value: float) -> str:
    return f"${value:,.2f}"


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def diff(patch: str) -> Markup:
    """A unified diff with each line marked by its kind (added, removed, hunk, file), escaped.

    Each line is a block of its own (a full-width background), so the blocks are joined with nothing
    between them: a newline between blocks inside a <pre> is an empty line of its own."""
    out = []
    for line in patch.splitlines():
        kind = (
            "file"
            if line.startswith(("diff ", "--- ", "+++ ", "index "))
            else "hunk"
            if line.startswith("@@")
            else "add"
            if line.startswith("+")
            else "del"
            if line.startswith("-")
            else "ctx"
        )
        out.append(f'<span class="d-{kind}">{escape(line)}</span>')
    return Markup("".join(out))


def labels(values: dict[str, str]) -> str:
    """An agent's labels but its pool (shown on its own)."""
    return ", ".join(f"{k}={v}" for k, v in sorted(values.items()) if k != "pool")


FILTERS = {"labels": labels, "when": when, "usd": usd, "dollars": dollars, "pretty": pretty, "diff": diff}
