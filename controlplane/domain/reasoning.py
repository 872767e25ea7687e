"""Thinking and effort: a tier's (seed 000's table) from the control plane's TOML, and a member's
ReasoningMode (seed 004's `reasoning`) over the tier's effort. Pure.

A tier's `thinking` is the Messages API `thinking` object: "off" (none), "adaptive" ({"type": "adaptive"}),
or a table sent as written (`{ type = "enabled", budget_tokens = 4000 }`); `thinking_display` ("omitted" or
"summarized") sets its `display`. `effort` is sent as `output_config.effort` ("off": none)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

EFFORTS = ("low", "medium", "high", "xhigh", "max")
"""The Messages API's `output_config.effort` levels, and the runtimes' (claude --effort, opencode's effort)."""
DISPLAYS = ("summarized", "omitted")
"""`thinking.display`: "omitted" returns a thinking block's signature without its text."""
THINKING_FORMS = ("off", "adaptive")


def tier_thinking(spec: Mapping[str, Any], base: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The `thinking` object of the TOML table `spec` of the tier at `where` (`tiers.sonnet`), whose built-in
    setting is `base`. ValueError naming the key."""
    value = spec.get("thinking", None)
    display = spec.get("thinking_display", None)
    if display is not None and display not in DISPLAYS:
        raise ValueError(f"{where}.thinking_display: {display!r} is not one of {', '.join(DISPLAYS)}")
    if value is None:
        thinking = dict(base)
    elif isinstance(value, dict):
        if not isinstance(value.get("type"), str):
            raise ValueError(f"{where}.thinking: a table needs a type (adaptive, enabled), not {value!r}")
        thinking = dict(value)
    elif value in THINKING_FORMS:
        thinking = {} if value == "off" else {"type": "adaptive"}
        if value == "adaptive" and display is None and "display" in base:
            thinking["display"] = base["display"]  # the built-in tier's display, unless the table says one
    else:
        raise ValueError(f"{where}.thinking: {value!r} is not off, adaptive or a table")
    if display is not None:
        if not thinking:
            raise ValueError(f"{where}.thinking_display: thinking is off")
        thinking["display"] = display
    return thinking


def tier_effort(spec: Mapping[str, Any], base: str, where: str) -> str:
    """The tier's `effort` ("" for "off" or none), else `base`. ValueError naming the key."""
    if "effort" not in spec:
        return base
    value = spec["effort"]
    if value in ("", "off"):
        return ""
    if value not in EFFORTS:
        raise ValueError(f"{where}.effort: {value!r} is not one of off, {', '.join(EFFORTS)}")
    return str(value)


def effort(tier: str, reasoning: str) -> str:
    """The effort a run asks for: its member's ReasoningMode when that is an effort level, else its tier's."""
    mode = reasoning.strip().lower()
    return mode if mode in EFFORTS else tier


def reasoning_problem(agent: str, reasoning: str) -> str:
    """Why a member's `reasoning` cannot be sent ("" when it can): an anthropic member's must be an effort level."""
    if agent != "anthropic" or not reasoning or reasoning.strip().lower() in EFFORTS:
        return ""
    return f"reasoning {reasoning!r} must be one of {', '.join(EFFORTS)} (or unset: the tier's effort)"
