"""Every `controlplane`, `drover` and `agentd` command line the README, docs/ and the console's pages show parses
with the program's real argument parser, so a documented command cannot name a flag that does not exist
or leave out one that is required (issue 25: `controlplane token create alice --role submit` was shown
for months and fails with `the following arguments are required: --kind, --name`).

Where commands are found:
- README.md and docs/*.md: lines of ```sh (or untagged) code blocks, after joining `\\` continuations, and inline
  `code` spans of the prose (a span may wrap across lines);
- controlplane/web/templates/*.html: the text of `<code>` and `<pre>` elements.
A line or span is a command when, after any `VAR=value` prefixes, its first word is one of the three
programs and at least one word follows (a bare `drover` names the program). A prose span of just two
words, the second no flag (`drover change`, "`drover change` and `watch` print them") names a command: only that the
command exists is checked.

Normalisation of the documentation's notation, before `shlex.split`:
- ` # comment` to the end of a line is dropped;
- `A | B` is two commands (alternatives, or a pipe into another program: only ours are checked);
- `[` and `]` are dropped, so optional parts are checked too (`[--watch [--logs]]` -> `--watch --logs`);
- a lone `...` ("and more flags") is dropped; `run_...` stays, it is a value;
- placeholders are plain words and parse as strings (NAME, RUN, CHANGE, P); the few that stand for a
  typed value are given one: PLACEHOLDERS below.
"""

from __future__ import annotations

import argparse
import contextlib
import html
import io
import pathlib
import re
import shlex
from collections.abc import Callable, Iterator

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROGRAMS = ("controlplane", "drover", "agentd")
PLACEHOLDERS = {"N": "5", "ID": "7", "USD": "2.5", "S": "running"}
"""Placeholders for typed values: --limit N, --after ID, raise-budget CHANGE USD, --state S (checked)."""
SKIP = {
    # "creating ... tokens and adding or removing projects is `controlplane token ...` / `controlplane
    # project ...`": a command group, not a command line.
    "controlplane token ...",
    "controlplane project ...",
    # names the flag in prose ("a project's `answer_window_minutes` (`controlplane project add
    # --answer-window-minutes`, default 15)"), not a command to type.
    "controlplane project add --answer-window-minutes",
    # the start-up line the control plane logs ("The start-up line says where: `drover console on
    # http://127.0.0.1:8080/`"), not a command.
    "drover console on http://127.0.0.1:8080/",
}
SHELL_BLOCKS = {"", "sh", "bash", "shell", "console"}


def _parsers() -> dict[str, Callable[[], argparse.ArgumentParser]]:
    from agentd.cli import parser as agentd_parser
    from controlplane.cli import parser as controlplane_parser
    from drover.cli import parser as drover_parser

    return {"controlplane": controlplane_parser, "drover": drover_parser, "agentd": agentd_parser}


def _commands_in_line(line: str) -> Iterator[str]:
    """The commands of ours in one shell line: split at pipes, `&&` and `;`, past `VAR=value`."""
    line = re.sub(r"(^|\s)#.*$", "", line)
    for part in re.split(r"\s(?:\|\|?|&&|;)\s", line):
        words = part.split()
        while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=\S*", words[0]):
            words.pop(0)
        if len(words) >= 2 and words[0] in PROGRAMS:
            yield " ".join(words)


def readme_commands(text: str, name: str = "README.md") -> Iterator[tuple[str, str]]:
    """(where, command) for every command line of the Markdown text of file `name`."""
    prose: list[str] = []
    block: str | None = None
    pending = ""
    for number, line in enumerate(text.splitlines(), 1):
        fence = re.match(r"\s*```(\w*)", line)
        if fence:
            block = fence.group(1) if block is None else None
            prose.append("")
            continue
        if block is None:
            prose.append(line)
            continue
        prose.append("")
        if block not in SHELL_BLOCKS:
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        for command in _commands_in_line(pending + line):
            yield f"{name}:{number}", command
        pending = ""
    joined = "\n".join(prose)
    for span in re.finditer(r"`([^`]+)`", joined):
        words = " ".join(span.group(1).replace("\\|", "|").split())  # `\|`: a pipe inside a table cell
        for command in _commands_in_line(words):
            where = f"{name}:{joined.count(chr(10), 0, span.start()) + 1}"
            words = command.split()
            names = len(words) == 2 and not words[1].startswith("-")
            yield (f"{where} (names a command)" if names else where), command


def template_commands(path: pathlib.Path) -> Iterator[tuple[str, str]]:
    text = path.read_text()
    for element in re.finditer(r"<(code|pre)\b[^>]*>(.*?)</\1>", text, re.S):
        line = text.count("\n", 0, element.start()) + 1
        body = html.unescape(re.sub(r"<[^>]+>", "", element.group(2)))
        for command in _commands_in_line(" ".join(body.split())):
            yield f"{path.relative_to(ROOT)}:{line}", command


def argv(command: str) -> list[str]:
    """The documentation's notation made into an argv (the module docstring's rules)."""
    words = shlex.split(command.replace("[", " ").replace("]", " "))
    return [PLACEHOLDERS.get(word, word) for word in words if word != "..."]


def parse_error(program: Callable[[], argparse.ArgumentParser], args: list[str]) -> str:
    """ "" when the program's parser accepts args, else what it printed."""
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said), contextlib.redirect_stdout(io.StringIO()):
            program().parse_args(args)
    except SystemExit as stop:
        if stop.code not in (0, None):  # --version and --help exit 0
            return said.getvalue().strip().splitlines()[-1] if said.getvalue().strip() else f"exit {stop.code}"
    return ""


def subcommands(parser: argparse.ArgumentParser) -> set[str]:
    """The names of the parser's commands (none for agentd, which has none)."""
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {name for action in actions for name in action.choices}


def documented() -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        found += list(readme_commands(doc.read_text(), str(doc.relative_to(ROOT))))
    for path in sorted((ROOT / "controlplane" / "web" / "templates").glob("*.html")):
        found += list(template_commands(path))
    return found


def test_every_documented_command_parses() -> None:
    parsers = _parsers()
    found = documented()
    assert len(found) > 60, f"the extraction found only {len(found)} commands: it is broken"
    wrong = []
    for where, command in found:
        if command in SKIP:
            continue
        args = argv(command)
        if where.endswith("(names a command)"):
            error = "" if args[1] in subcommands(parsers[args[0]]()) else f"no command {args[1]!r}"
        else:
            error = parse_error(parsers[args[0]], args[1:])
        if error:
            wrong.append(f"{where}: `{command}`: {error}")
    assert not wrong, "documented commands that do not parse:\n" + "\n".join(wrong)


def test_the_skip_list_names_only_fragments_that_are_still_there() -> None:
    commands = {command for _, command in documented()}
    assert commands >= SKIP, f"no longer in the docs, drop them from SKIP: {sorted(SKIP - commands)}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("```sh\ndrover agents   # all\n```", ["drover agents"]),
        ("```sh\nA=1 controlplane serve \\\n  --listen x:1\n```", ["controlplane serve --listen x:1"]),
        ("```sh\ndrover drain A | drover undrain A\n```", ["drover drain A", "drover undrain A"]),
        ("```python\ndrover agents\n```", []),
        (
            "one from `controlplane token create\n  alice`. And `agentd` alone, `drover.v1`.",
            ["controlplane token create alice"],
        ),
    ],
)
def test_commands_are_found_in_blocks_and_wrapped_spans(text: str, expected: list[str]) -> None:
    assert [command for _, command in readme_commands(text)] == expected


def test_a_wrong_command_is_reported() -> None:
    """The very mistake of issue 25 is caught, with argparse's own words."""
    error = parse_error(_parsers()["controlplane"], argv("controlplane token create NAME --role submit")[1:])
    assert "the following arguments are required: --kind, --name" in error
    assert argv("drover runs [--state S] [--limit N] ...") == ["drover", "runs", "--state", "running", "--limit", "5"]
