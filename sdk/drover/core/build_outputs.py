"""Which files a ChangeSet leaves out: what the build wrote (seed 000: "the workspace then discards
the files that the build wrote, so the ChangeSet holds no build output").

A path is left out when it matches one of the build-output patterns, is not tracked at the commit
the workspace publishes on, and no write tool asked for it. Patterns follow .gitignore's shape: a
trailing `/` matches a directory (and so every file under it), a pattern without a `/` inside
matches a name at any depth, one with a `/` inside is anchored at the repository root; `*` and `?`
stay inside one name, `**` crosses directories. There is no negation (`!`).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence
from functools import lru_cache

DEFAULT_BUILD_OUTPUTS: tuple[str, ...] = (
    "__pycache__/",
    "*.pyc",
    "*.pyo",
    ".pytest_cache/",
    ".mypy_cache/",
    ".ruff_cache/",
    ".hypothesis/",
    ".tox/",
    ".nox/",
    ".venv/",
    "*.egg-info/",
    ".coverage",
    ".coverage.*",
    "htmlcov/",
    "node_modules/",
    ".next/",
    ".turbo/",
    "dist/",
    "build/",
    "target/",
    ".gradle/",
    "*.o",
    "*.class",
)
"""The well-known outputs of Python, JavaScript, Rust, JVM and C builds; a project's own list
(`controlplane project add --build-output`) replaces it."""


def check_patterns(patterns: Iterable[str]) -> list[str]:
    """The patterns, stripped; ValueError naming the first one that cannot be used."""
    out = []
    for i, raw in enumerate(patterns):
        pattern = raw.strip()
        if not pattern or pattern == "/":
            raise ValueError(f"build output pattern {i + 1} is empty")
        if pattern.startswith("!"):
            raise ValueError(f"build output pattern {raw!r}: negation ('!') is not supported")
        out.append(pattern)
    return out


def _glob(text: str) -> str:
    """A glob as a regular expression: `**` any run of characters, `*` and `?` within one name."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("**", i):
            out.append(".*")
            i += 2
        elif text[i] == "*":
            out.append("[^/]*")
            i += 1
        elif text[i] == "?":
            out.append("[^/]")
            i += 1
        elif text[i] == "[" and "]" in text[i + 2 :]:
            end = text.index("]", i + 2)
            body = text[i + 1 : end].replace("\\", "\\\\")
            out.append("[^" + body[1:] + "]" if body.startswith("!") else "[" + body + "]")
            i = end + 1
        else:
            out.append(re.escape(text[i]))
            i += 1
    return "".join(out)


@lru_cache(maxsize=64)
def _compiled(pattern: str) -> re.Pattern[str]:
    """A regex whose group 1 is the part of a path the pattern names (a directory or the file)."""
    directory = pattern.endswith("/")
    body = pattern.strip("/")
    anchored = "/" in pattern.rstrip("/")
    head = "^(" if anchored else "^((?:.*?/)??"  # lazy: the outermost directory that matches
    tail = ")/.+$" if directory else ")(?:/.*)?$"
    return re.compile(head + _glob(body) + tail, re.DOTALL)


def matched(path: str, patterns: Sequence[str]) -> str:
    """The outermost part of `path` a pattern names: a directory as `dir/`, the file itself, or
    "" when no pattern matches."""
    best = ""
    for pattern in patterns:
        found = _compiled(pattern).match(path)
        if found is None:
            continue
        part = found.group(1)
        part = part if part == path else part + "/"
        if not best or len(part) < len(best):
            best = part
    return best


def left_out(
    paths: Iterable[str], patterns: Sequence[str], tracked: Collection[str], asked_for: Collection[str]
) -> list[str]:
    """The paths a ChangeSet leaves out (sorted): a build output, not tracked, not asked for by a write tool."""
    return sorted(p for p in paths if p not in tracked and p not in asked_for and matched(p, patterns))


def summary(paths: Iterable[str], patterns: Sequence[str]) -> list[str]:
    """Left-out paths as a user reads them: a directory once, as `dir/ (N files)`, a file by its path."""
    counts: dict[str, int] = {}
    for path in paths:
        part = matched(path, patterns) or path
        counts[part] = counts.get(part, 0) + 1
    return [
        f"{part} ({n} file{'s' if n != 1 else ''})" if part.endswith("/") else part
        for part, n in sorted(counts.items())
    ]
