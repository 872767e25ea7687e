"""A project's workspace preparation and its forge link as the console's forms send them: textareas of
one command, one KEY=VALUE or one glob per line, a checkbox and text inputs, read into the settings
ProjectService takes. Pure: the API checks every value (a bad KEY, a branch template); only what a line cannot say
(an env line without '=', a KEY given twice) is refused here, named as the API would name it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from drover.errors import InvalidArgument

PREPARATION = ("setup", "setup_network", "env", "git_name", "git_email", "branch_template", "cache_key_files")
"""The settings the forms set: UpdateProject's update_mask from the project's page names exactly these."""


FORGE = (
    "forge",
    "forge_repo",
    "forge_api_url",
    "forge_label",
    "max_fix_rounds",
    "forge_budget_usd",
    "forge_branch_template",
    "forge_check_command",
)
"""The forge link's settings: UpdateProject's update_mask from the project's forge form names exactly these."""


def lines(text: str) -> list[str]:
    """Each non-blank line of a textarea, without the whitespace around it (browsers send CRLF)."""
    return [line.strip() for line in text.splitlines() if line.strip()]


def env_lines(text: str) -> dict[str, str]:
    """`KEY=VALUE` lines as a mapping (the value is everything after the first '='); InvalidArgument
    naming `project.env` for a line without '=', `project.env["KEY"]` (as the API names a map's key)
    for a KEY given twice."""
    env: dict[str, str] = {}
    for number, typed in enumerate(text.splitlines(), start=1):  # numbered as the textarea shows them
        line = typed.strip()
        if not line:
            continue
        key, eq, value = line.partition("=")
        key = key.strip()
        if not eq:
            raise InvalidArgument(f"line {number}, {line[:80]!r}, is not KEY=VALUE", field="project.env")
        if key in env:
            raise InvalidArgument(
                f"line {number} sets {key[:64]!r} again", field=f"project.env[{json.dumps(key)[:80]}]"
            )
        env[key] = value
    return env


def checked(value: str | None) -> bool:
    """A checkbox sent after a hidden "off" of the same name: the last value wins, so "on" when ticked,
    "off" when not, and None (a form without the field) is the default, on."""
    return value != "off"


def preparation(form: Mapping[str, str]) -> dict[str, Any]:
    """The preparation settings a form gives (each of PREPARATION)."""
    return {
        "setup": lines(form.get("setup", "")),
        "setup_network": checked(form.get("setup_network")),
        "env": env_lines(form.get("env", "")),
        "git_name": form.get("git_name", "").strip(),
        "git_email": form.get("git_email", "").strip(),
        "branch_template": form.get("branch_template", "").strip(),
        "cache_key_files": lines(form.get("cache_key_files", "")),
    }


def env_text(env: Mapping[str, str]) -> str:
    """A project's env as the form's textarea shows it: one KEY=VALUE per line, by KEY."""
    return "\n".join(f"{key}={value}" for key, value in sorted(env.items()))


def spans_lines(setup: list[str], env: Mapping[str, str]) -> bool:
    """Whether a setup command or an env value holds a newline, which the one-per-line form would split."""
    return any("\n" in text or "\r" in text for text in (*setup, *env.values()))


def number(
    form: Mapping[str, str], key: str, kind: type[int] | type[float], default: float = 0, prefix: str = ""
) -> Any:
    """A number input; empty is `default`; InvalidArgument naming `PREFIX` + KEY, as the API names the
    field, when it is not a number."""
    text = form.get(key, "").strip()
    try:
        return kind(text) if text else kind(default)
    except ValueError:
        raise InvalidArgument(f"{text[:40]!r} is not a number", field=prefix + key) from None


def forge_link(form: Mapping[str, str]) -> dict[str, Any]:
    """The forge settings a form gives (each of FORGE); the API checks each value."""
    text = {key: form.get(key, "").strip() for key in ("forge", "forge_repo", "forge_api_url", "forge_label")}
    return text | {
        "max_fix_rounds": number(form, "max_fix_rounds", int, 3, "project."),
        "forge_budget_usd": number(form, "forge_budget_usd", float, 0, "project."),
        "forge_branch_template": form.get("forge_branch_template", "").strip(),
        "forge_check_command": form.get("forge_check_command", "").strip(),
    }
