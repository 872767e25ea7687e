"""What a command must be to start at all: one rule, asked at submit (the control plane, a Change
file) and again at run time (agentd), so a Task accepted at submit never fails to start for its argv
or env.

The rule is what exec(2) and the launcher can pass: a program, no NUL anywhere, environment names
that are not empty and have no '=', each string within the kernel's MAX_ARG_STRLEN and all of them
within room under ARG_MAX. A program name with '=' is refused too: it reads as a NAME=value
assignment wherever a command line is taken apart (env(1), a shell), and no real program has one.
The control plane adds its own stricter rules on top (POSIX names, sizes): this is the floor.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence

MAX_STRING_BYTES = 128 * 1024 - 1
"""One argument, or one NAME=value of the environment, in UTF-8: Linux refuses a longer one
(MAX_ARG_STRLEN, 128 KiB with its NUL) with E2BIG."""
MAX_COMMAND_BYTES = 1024 * 1024
"""All arguments and the environment together, counted as exec counts them (each string, its NUL
and its pointer): half of the usual ARG_MAX (2 MiB), the rest left to what agentd adds (its own
variables, the run's secrets)."""
POINTER = 8


@dataclasses.dataclass(frozen=True)
class Refusal:
    """Why a command cannot start: `path` is where, relative to the command's owner (("command", 0),
    ("env", "A=B")), `reason` what is wrong."""

    path: tuple[str | int, ...]
    reason: str

    @property
    def field(self) -> str:
        """The path as the control plane names fields: `command[0]`, `env["A=B"]`."""
        name, *keys = self.path
        return str(name) + "".join(f"[{k}]" if isinstance(k, int) else f"[{json.dumps(k)[:80]}]" for k in keys)

    def __str__(self) -> str:
        return f"{self.field}: {self.reason}"


def refusal(argv: Sequence[str], env: Mapping[str, str] | None = None, *, argv_field: str = "argv") -> Refusal | None:
    """Why `argv` with `env` cannot start (None: it can). `argv_field` names the argv in the answer
    (a Task calls it `command`)."""
    if not argv:
        return Refusal((argv_field,), "no program to run")
    if not argv[0]:
        return Refusal((argv_field, 0), "the program must not be empty")
    if "=" in argv[0]:
        return Refusal((argv_field, 0), f"a program name must not contain '=' ({_show(argv[0])})")
    total = 0
    for i, arg in enumerate(argv):
        size = _bytes(arg)
        problem = "must not contain NUL" if "\0" in arg else _too_long(size)
        if problem:
            return Refusal((argv_field, i), problem)
        total += size + 1 + POINTER
    for name, value in (env or {}).items():
        if not name:
            return Refusal(("env", name), "an environment variable needs a name")
        if "=" in name or "\0" in name:
            return Refusal(("env", name), "an environment variable name must not contain '=' or NUL")
        if "\0" in value:
            return Refusal(("env", name), "must not contain NUL")
        size = _bytes(name) + 1 + _bytes(value)
        if problem := _too_long(size, " as NAME=value"):
            return Refusal(("env", name), problem)
        total += size + 1 + POINTER
    if total > MAX_COMMAND_BYTES:
        return Refusal((argv_field,), f"the arguments and environment take {total} bytes; at most {MAX_COMMAND_BYTES}")
    return None


def _too_long(size: int, what: str = "") -> str:
    return f"{size} bytes{what}; at most {MAX_STRING_BYTES}" if size > MAX_STRING_BYTES else ""


def _bytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogateescape"))


def _show(value: str) -> str:
    return repr(value if len(value) <= 60 else value[:57] + "...")
