"""Every shell command README.md and docs/*.md tell a reader to run is either run by a test, as written, or
marked in the page as not run by the tests, with the reason (issue 26).

What counts as a shell command (`inventory`):
- each line of a ```sh, ```bash, ```shell, ```console or untagged code block (`\\` continuations joined,
  comment-only lines left out);
- an inline `code` span of the prose whose first word, after any `VAR=value`, is a program a reader runs
  (PROGRAMS) and which has more words; a span of one of our programs and one more word that is no flag
  (`drover change`) names a command rather than giving one, as in tests/sdk/test_documented_commands.py.

Each must be one of:
- EXECUTED: the test that runs it and a string of that test's source that shows it does (tests that read the
  command from the page, like tests/fleet/test_tour.py, are the strongest kind: the evidence is the page's name);
- marked in the page: `<!-- not run by the tests: REASON -->` on the line before a code block covers the block's
  lines a test does not run; `(not run by the tests: REASON)` in a line's own `#` comment, or in the comment
  lines right above it, covers that line; the HTML comment right after an inline command (before the next
  command of its paragraph) covers that command;
- NOT_COMMANDS: a span that shows text a reader does not run (a process as `ps` shows it, an allowlist
  pattern, a log line), with why.
"""

from __future__ import annotations

import dataclasses
import importlib
import pathlib
import re
from collections.abc import Iterator

import pytest

from tests.conftest import ROOT

SHELL_BLOCKS = {"", "sh", "bash", "shell", "console"}
OURS = ("controlplane", "drover", "agentd")
PROGRAMS = (
    *OURS,
    *("python", "python3", "pip", "pytest", "grpcurl", "npx", "ruff", "mypy", "buf", "git", "cat", "bwrap"),
    *("docker", "docker-compose", "kubectl", "systemctl", "systemd-analyze", "kubernetes-validate", "apt-get"),
)
MARK = "not run by the tests:"

RUN_FROM_THE_PAGES = (
    "tests/fleet/test_documented_commands_run.py",
    "tests/controlplane/test_documented_controlplane_commands.py",
    "tests/controlplane/api/test_documented_project_commands.py",
    "tests/controlplane/test_documented_credential_commands.py",
    "tests/controlplane/api/test_documented_forge_commands.py",
    "tests/controlplane/test_project_apply.py",
)
"""Tests that read their commands from the pages and run every one: each lists them in its RUN_FROM_THE_PAGES."""
TOUR = (
    *("controlplane project add sample --repo /path/to/repo", "controlplane serve --http-listen 127.0.0.1:8080"),
    *("agentd", "drover submit change.yaml --watch --logs", "drover change CHANGE", "drover runs --change CHANGE"),
    *("drover logs RUN", "drover changesets CHANGE", "drover patch CHANGESET", "drover spend CHANGE"),
    *("drover packet RUN", "drover agents"),
)
"""The README's tour, which tests/fleet/test_tour.py reads from the README and runs."""
EXECUTED: dict[str, tuple[str, str]] = {
    # command as the page shows it -> (the test that runs it, a string of that test's source that shows how)
    **dict.fromkeys(TOUR, ("tests/fleet/test_tour.py::test_the_tour_runs_as_written", "README.md")),
    "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[agent,server]' && python deploy/demo.py": (
        "tests/fleet/test_quick_start.py",
        "README.md",
    ),
    **dict.fromkeys(
        ("controlplane serve", "drover submit change.yaml --watch"),  # docs/getting-started.md's "By hand"
        ("tests/fleet/test_getting_started.py::test_by_hand_runs_as_written", "getting-started.md"),
    ),
    **dict.fromkeys(
        ("controlplane serve --metrics-listen 127.0.0.1:9464", "agentd --metrics-listen 127.0.0.1:9465"),
        (
            "tests/fleet/test_metrics.py::test_both_endpoints_move_during_a_real_run",
            '"--metrics-listen", "127.0.0.1:0"',
        ),
    ),
    # docs/configuration.md's "Workspace preparation": its project, then its Change file
    "controlplane project add pkg --repo /path/to/pkg --env PYTHONPATH=.deps --setup 'python -m pip install --no-deps "
    "--no-build-isolation --no-index --target .deps .' --git-name 'Pkg Bot' --git-email bot@pkg.invalid "
    "--branch-template 'ai/{slug}/{change}-{task}'": (
        "tests/fleet/test_workspace_preparation.py::test_the_documented_setup_installs_the_package_its_tests_import",
        '"configuration.md"',
    ),
    "drover usage --prefix provider-usd:": (
        "tests/fleet/test_own_calls_fleet.py::test_the_classifier_and_compaction_calls_are_priced_on_the_provider_meter",
        '"usage", "--prefix", "provider-usd:"',
    ),
    "ruff check . && ruff format --check . && mypy": ("tests/test_code_quality.py", '"ruff", "format", "--check"'),
    "npx @bufbuild/buf@1.75.0 lint proto": ("tests/test_code_quality.py::test_buf_lint", '"@bufbuild/buf@1.75.0"'),
    "docker-compose config": ("tests/deploy/test_artifacts.py", '"docker-compose", "-f", path, "config"'),
    "systemd-analyze verify": ("tests/deploy/test_artifacts.py", '"systemd-analyze", "verify"'),
    "kubernetes-validate --strict": ("tests/deploy/test_artifacts.py", '"kubernetes-validate"'),
    "printf 'sha256=%s\\n' \"$(openssl dgst -sha256 -hmac \"$SECRET\" -r body.json | cut -d' ' -f1)\"": (
        "tests/controlplane/dispatch/test_notification_delivery.py::test_the_documented_signature_checks_hold",
        '"operations.md"',
    ),
}
"""Commands that a test runs as the page shows them, adapting only where (host, port, paths, ids for the
page's placeholders). The tests of RUN_FROM_THE_PAGES read their commands from the pages and add themselves below."""

NOT_COMMANDS: dict[str, str] = {
    "python -m unittest": "what the demo's test Task runs, not a step for the reader",
    "python -X importtime": "names the tool the import times were measured with",
    "python -m agentd.daemon.prefork supervisor SPOOL ...": "a process as ps shows it",
    "python -m agentd.run.supervisor RUN_DIR": "a process as ps shows it",
    "python -m controlplane.web.child": "the console's process as ps shows it",
    "python3 -m venv": "the size of an empty virtual environment, for comparison",
    "pytest [args]": "an entry of the default command allowlist",
    "python -m pytest [args]": "an entry of the default command allowlist",
    "python3 -m pytest [args]": "an entry of the default command allowlist",
    "python -m unittest [args]": "an entry of the default command allowlist",
    "python -m py_compile [paths]": "an entry of the default command allowlist",
    "git status|diff|log|show [args]": "an entry of the default command allowlist",
    "cat [paths]": "an entry of the default command allowlist",
    "git log": "an example of a program a pipe stops, not a step",
    "git commit": "what the harness does in the workspace",
    "git config core.worktree /etc": "the attack the security review describes",
    "bwrap --seccomp FD": "how agentd calls bubblewrap",
    "python -m compileall": "what runs unchanged under the seccomp filter",
    "python -I -S": "the interpreter flags a benchmark compares",
    "python -m pytest -q": "the command Task a benchmark times",
    "drover console on http://127.0.0.1:8080/": "the control plane's start-up log line",
    "controlplane project add --answer-window-minutes": "names a flag in prose",
    "controlplane token ...": "a command group, in prose",
    "controlplane project ...": "a command group, in prose",
}


@dataclasses.dataclass(frozen=True)
class Shown:
    where: str
    command: str
    mark: str
    """The reason the page gives for not running it, or ""."""
    scope: str = "line"
    """Where the mark is: "line" (its own comment), "block" (before the code block) or "inline" (after the span)."""


def _words(text: str) -> list[str]:
    words = text.split()
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=\S*", words[0]):
        words.pop(0)
    return words


def is_command(span: str) -> bool:
    words = _words(span)
    if len(words) < 2 or words[0] not in PROGRAMS:
        return False
    return not (words[0] in OURS and len(words) == 2 and not words[1].startswith("-"))


def _reason(text: str) -> str:
    found = re.search(re.escape(MARK) + r"\s*(.*?)\s*(?:-->|\)\s*$|\)\s)", text)
    return found.group(1) if found else ""


def inventory(text: str, name: str) -> Iterator[Shown]:
    """Every shell command of the Markdown `text` of page `name`, with the page's mark."""
    lines = text.splitlines()
    prose: list[str] = []
    block: str | None = None
    block_mark = above = ""
    pending = ""
    for number, line in enumerate(lines, 1):
        fence = re.match(r"\s*```(\w*)", line)
        if fence:
            if block is None:
                block = fence.group(1)
                before = lines[number - 2] if number > 1 else ""
                block_mark = _reason(before) if before.strip().startswith("<!--") else ""
            else:
                block = None
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
        full, pending = pending + line, ""
        command = " ".join(re.sub(r"(^|\s)#.*$", "", full).split())
        if not command:  # a comment line: a mark in it is for the command below
            above = _reason(full) or above
            continue
        own = _reason(full) or above
        yield Shown(f"{name}:{number}", command, own or block_mark, "line" if own or not block_mark else "block")
        above = ""
    text = "\n".join(prose)
    for paragraph in re.finditer(r"(?:.+\n?)+", text):
        spans: list[tuple[int, str]] = []
        for span in re.finditer(r"`([^`]+)`", paragraph.group(0)):
            command = " ".join(span.group(1).replace("\\|", "|").split())
            if command in NOT_COMMANDS:  # shown text, not a command: no mark is meant for it
                yield Shown(f"{name}:{text.count(chr(10), 0, paragraph.start() + span.start()) + 1}", command, "")
            elif is_command(command):
                spans.append((paragraph.start() + span.start(), command))
        marks = [paragraph.start() + m.start() for m in re.finditer(r"<!--", paragraph.group(0))]
        for n, (start, command) in enumerate(spans):
            end = spans[n + 1][0] if n + 1 < len(spans) else paragraph.end()
            mark = next((_reason(text[m:]) for m in marks if start < m < end and _reason(text[m:])), "")
            yield Shown(f"{name}:{text.count(chr(10), 0, start) + 1}", command, mark, "inline")


def pages() -> list[pathlib.Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def everything() -> list[Shown]:
    return [shown for page in pages() for shown in inventory(page.read_text(), str(page.relative_to(ROOT)))]


def executed() -> dict[str, tuple[str, str]]:
    """EXECUTED and what the tests of RUN_FROM_THE_PAGES run from the pages."""
    found = dict(EXECUTED)
    for path in RUN_FROM_THE_PAGES:
        module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
        found.update({command: (path, evidence) for command, evidence in module.RUN_FROM_THE_PAGES.items()})
    return found


def test_every_shell_command_is_run_by_a_test_or_marked_with_a_reason() -> None:
    found = everything()
    assert len(found) > 100, f"the inventory found only {len(found)} commands: it is broken"
    runs = executed()
    unaccounted = [
        f"{shown.where}: {shown.command}"
        for shown in found
        if shown.command not in runs and not shown.mark and shown.command not in NOT_COMMANDS
    ]
    assert not unaccounted, (
        "shell commands of the docs that no test runs and the page does not mark "
        f"(add a test, or `<!-- {MARK} REASON -->`):\n" + "\n".join(unaccounted)
    )


def test_a_command_a_test_runs_is_not_also_marked_as_not_run() -> None:
    """A block's mark covers the lines of the block no test runs; a line's or a span's own mark is for it alone."""
    runs = executed()
    both = [f"{s.where}: {s.command}" for s in everything() if s.mark and s.scope != "block" and s.command in runs]
    assert not both, "marked as not run, but a test runs it: drop the mark\n" + "\n".join(both)


def test_the_registries_name_only_what_the_pages_still_show() -> None:
    shown = {s.command for s in everything()}
    stale = sorted((executed().keys() | NOT_COMMANDS.keys()) - shown)
    assert not stale, f"no longer in the docs, drop them: {stale}"


def test_each_registered_test_exists_and_shows_how_it_runs_the_command() -> None:
    wrong = []
    for command, (test, evidence) in executed().items():
        path, _, function = test.partition("::")
        source = (ROOT / path).read_text() if (ROOT / path).is_file() else ""
        if not source:
            wrong.append(f"{command}: no file {path}")
        elif function and f"def {function}(" not in source:
            wrong.append(f"{command}: {path} has no {function}")
        elif evidence not in source:
            wrong.append(f"{command}: {path} does not contain {evidence!r}")
    assert not wrong, "\n".join(wrong)


def test_the_marks_the_pages_carry_say_why() -> None:
    """A mark without a reason is no mark: every `not run by the tests:` is followed by words."""
    bare = [
        f"{page.relative_to(ROOT)}:{n}"
        for page in pages()
        for n, line in enumerate(page.read_text().splitlines(), 1)
        if MARK in line and len(_reason(line).split()) < 2
    ]
    assert not bare, f"marks without a reason: {bare}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("```sh\ndrover agents   # all\n# a comment\n```", [("drover agents", "")]),
        ("```sh\nA=1 controlplane serve \\\n  --listen x:1\n```", [("A=1 controlplane serve --listen x:1", "")]),
        ("```python\nimport os\n```", []),
        (
            "<!-- not run by the tests: needs a cluster -->\n```sh\nkubectl apply -f k.yaml\n```",
            [("kubectl apply -f k.yaml", "needs a cluster")],
        ),
        ("```sh\nmake x   # builds (not run by the tests: writes /opt)\n```", [("make x", "writes /opt")]),
        ("```sh\n# 2. (not run by the tests: slow)\nmake y\nmake z\n```", [("make y", "slow"), ("make z", "")]),
        (
            "Run `docker compose up` <!-- not run by the tests: no Docker -->, then `drover change`, `git\n status`.",
            [("docker compose up", "no Docker"), ("git status", "")],
        ),
        ("`drover change` and `controlplane serve --listen X`\n\n`pip install x`", [
            ("controlplane serve --listen X", ""),
            ("pip install x", ""),
        ]),
    ],
)  # fmt: skip
def test_commands_and_marks_are_found(text: str, expected: list[tuple[str, str]]) -> None:
    assert [(s.command, s.mark) for s in inventory(text, "page.md")] == expected
