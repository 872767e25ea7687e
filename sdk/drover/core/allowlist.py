"""Which commands run_command may run: argv patterns, no shell syntax at all.

A rule is a pattern over argv words, for example "git status|diff|log [args]":

- `word`: that exact word.
- `a|b|c`: one of those words.
- `<script>`: one word that does not start with "-"; when the caller knows the project's
  script names, it must be one of them.
- `[paths]`: zero or more words, each a relative path: not an option, not absolute, no `..`.
- `[args]`: zero or more words of any kind (shell metacharacters are refused for every word).

`[paths]` and `[args]` may only end a rule. Commands run as an argv, never through a shell;
refusing metacharacters anyway keeps a model from believing it piped or redirected anything.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import dataclass

METACHARACTERS = ";|&$`<>(){}\\\n*?~!\r\x00"
_NAMES = {"\n": "a newline", "\r": "a carriage return", "\x00": "a NUL byte"}

PATHS, ARGS, SCRIPT = "[paths]", "[args]", "<script>"
_RULE_SYNTAX = "[]<>|"


class CommandRefused(Exception):
    """run_command will not run the command: `reason` says why (safe to show the model)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _rule_error(rule: str) -> str | None:
    """Why `rule` is not a valid pattern, or None when it is."""
    words = rule.split()
    if not words:
        return "the rule is empty"
    for position, word in enumerate(words):
        if word in (PATHS, ARGS):
            if position == 0:
                return f"{word} cannot be the program"
            if position != len(words) - 1:
                return f"{word} may only be the last word"
            continue
        if word == SCRIPT:
            if position == 0:
                return f"{word} cannot be the program"
            continue
        if word.startswith("<") or word.startswith("["):
            return f"unknown placeholder {word!r} (known: {SCRIPT}, {PATHS}, {ARGS})"
        for choice in word.split("|"):
            if not choice:
                return f"{word!r} has an empty alternative"
            bad = next((c for c in choice if c in _RULE_SYNTAX or c in METACHARACTERS), None)
            if bad is not None:
                return f"{word!r} contains {bad!r}, which no command word can contain"
    return None


@dataclass(frozen=True)
class CommandPolicy:
    """The argv patterns run_command accepts; see the module docstring for the grammar."""

    rules: tuple[str, ...]

    def __post_init__(self) -> None:
        for rule in self.rules:
            error = _rule_error(rule)
            if error is not None:
                raise ValueError(f"bad command rule {rule!r}: {error}")


def policy_from_strings(lines: Iterable[str]) -> CommandPolicy:
    """A policy from one rule per line; blank lines and lines starting with '#' are skipped.
    ValueError names the first bad rule."""
    rules = []
    for line in lines:
        rule = " ".join(line.split())
        if rule and not rule.startswith("#"):
            rules.append(rule)
    return CommandPolicy(tuple(rules))


DEFAULT_PYTHON_POLICY = CommandPolicy(
    (
        "pytest [args]",
        "python -m pytest [args]",
        "python3 -m pytest [args]",
        "python -m unittest [args]",
        "python3 -m unittest [args]",
        "python -m py_compile [paths]",
        "git status|diff|log|show [args]",
        "ls [paths]",
        "cat [paths]",
    )
)


def _metacharacter_reason(text: str) -> str | None:
    bad = next((c for c in text if c in METACHARACTERS), None)
    if bad is None:
        return None
    name = _NAMES.get(bad, f"'{bad}'")
    return (
        f"the command contains {name}, a shell metacharacter; commands run without a shell, "
        f"so run one plain command with no pipes, redirection, globs or substitution"
    )


def parse_command(command: str) -> list[str]:
    """`command` split into argv words (shlex, POSIX mode), or CommandRefused when it holds any
    shell metacharacter, does not parse, or is empty."""
    reason = _metacharacter_reason(command)
    if reason is not None:
        raise CommandRefused(reason)
    try:
        argv = shlex.split(command, posix=True)
    except ValueError as err:
        raise CommandRefused(f"the command cannot be parsed: {err}") from err
    if not argv:
        raise CommandRefused("the command is empty")
    return argv


@dataclass(frozen=True)
class _Miss:
    """How far argv got into one rule before it failed, and why."""

    depth: int
    reason: str
    expected: tuple[str, ...] = ()  # the literal words that would have matched at `depth`


def _path_problem(word: str) -> str | None:
    if not word:
        return "an empty word is not a path"
    if word.startswith("-"):
        return f"{word!r} is an option; only paths are allowed here"
    if word.startswith("/"):
        return f"{word!r} is absolute; name paths relative to the workspace root"
    if ".." in word.split("/"):
        return f"{word!r} has a '..' component; paths must stay inside the workspace"
    return None


def _match(argv: list[str], rule: str, scripts: frozenset[str] | None) -> _Miss | None:
    """None when argv matches `rule`, else where and why it does not."""
    words = rule.split()
    for depth, token in enumerate(words):
        if token in (PATHS, ARGS):
            if token == PATHS:
                for offset, word in enumerate(argv[depth:]):
                    problem = _path_problem(word)
                    if problem is not None:
                        return _Miss(depth + offset, problem)
            return None
        if depth >= len(argv):
            what = "a script name" if token == SCRIPT else " or ".join(token.split("|"))
            return _Miss(depth, f"it is missing {what} after {' '.join(argv)!r}")
        word = argv[depth]
        if token == SCRIPT:
            if word.startswith("-"):
                return _Miss(depth, f"a script name may not start with - (got {word!r})")
            if scripts is not None and word not in scripts:
                known = ", ".join(sorted(scripts)) or "none"
                return _Miss(depth, f"{word!r} is not a known script (known: {known})")
            continue
        choices = tuple(token.split("|"))
        if word not in choices:
            return _Miss(depth, "", choices)
    if len(argv) > len(words):
        return _Miss(len(words), f"unexpected extra word {argv[len(words)]!r}")
    return None


def _explain(argv: list[str], misses: list[_Miss]) -> str:
    """The reason of the rule that argv got furthest into."""
    deepest = max(miss.depth for miss in misses)
    best = [miss for miss in misses if miss.depth == deepest]
    stated = next((miss.reason for miss in best if miss.reason), None)
    if stated is not None:
        return stated
    word = argv[deepest]
    expected = sorted({choice for miss in best for choice in miss.expected})
    if deepest == 0:
        return f"{word!r} is not an allowed program"
    return (
        f"{word!r} is not allowed after {' '.join(argv[:deepest])!r} (expected {', '.join(repr(e) for e in expected)})"
    )


def check_command(argv: list[str], policy: CommandPolicy, scripts: frozenset[str] | None = None) -> None:
    """Return when `argv` matches a rule of `policy`; otherwise CommandRefused saying why,
    followed by every allowed pattern. `scripts`, when given, are the only names `<script>`
    accepts (for example the scripts of the workspace package.json)."""
    if not argv:
        raise CommandRefused("the command is empty")
    for word in argv:
        reason = _metacharacter_reason(word)
        if reason is not None:
            raise CommandRefused(reason)
    misses: list[_Miss] = []
    for rule in policy.rules:
        miss = _match(argv, rule, scripts)
        if miss is None:
            return
        misses.append(miss)
    allowed = "\n".join(f"  {rule}" for rule in policy.rules) or "  (none)"
    why = _explain(argv, misses) if misses else "no command is allowed"
    raise CommandRefused(f"command refused: {why}. Allowed patterns:\n{allowed}")
