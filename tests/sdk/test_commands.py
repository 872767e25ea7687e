"""sdk/drover/core/commands.py: the one rule of what a command must be to start, as a table."""

from __future__ import annotations

import subprocess

import pytest

from drover.core import commands

EMOJI = "\U0001f600"  # four bytes in UTF-8


@pytest.mark.parametrize(
    "argv, env, where",
    [
        ([], {}, "argv"),
        ([""], {}, "argv[0]"),
        (["A=b"], {}, "argv[0]"),
        (["/usr/bin/x=y"], {}, "argv[0]"),
        (["true", "a\0b"], {}, "argv[1]"),
        (["x" * commands.MAX_STRING_BYTES + "x"], {}, "argv[0]"),
        (["true", EMOJI * 32768], {}, "argv[1]"),
        (["true"], {"": "1"}, 'env[""]'),
        (["true"], {"A=B": "1"}, 'env["A=B"]'),
        (["true"], {"A\0": "1"}, 'env["A\\u0000"]'),
        (["true"], {"A": "x\0"}, 'env["A"]'),
        (["true"], {"B": EMOJI * 32768}, 'env["B"]'),
        (["true"] + ["x" * 100_000] * 11, {}, "argv"),
    ],
)
def test_what_cannot_start_is_refused_naming_where(argv: list[str], env: dict[str, str], where: str) -> None:
    refused = commands.refusal(argv, env)
    assert refused is not None and refused.field == where, refused


@pytest.mark.parametrize(
    "argv, env",
    [
        (["true"], {}),
        (["true", "A=b", ""], {"A": "", "_x": "="}),
        (["true", EMOJI * 32767], {"B": EMOJI * 32767}),
        (["true"] + ["x" * 100_000] * 9, {}),
    ],
)
def test_what_the_rule_accepts_starts(argv: list[str], env: dict[str, str]) -> None:
    """The rule refuses nothing exec would take: each accepted command really starts."""
    assert commands.refusal(argv, env) is None
    assert subprocess.run(argv, env=env, check=False).returncode == 0


def test_a_task_names_its_argv_command() -> None:
    refused = commands.refusal(["A=b"], argv_field="command")
    assert refused is not None and str(refused).startswith("command[0]: a program name must not contain '='")
