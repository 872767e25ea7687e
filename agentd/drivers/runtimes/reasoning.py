"""The run's thinking and effort as each runtime takes them (seed 004's ReasoningMode). Pure.

`effort` is the run's (its member's reasoning, else its tier's: low, medium, high, xhigh, max; "": none) and
`thinking` its tier's Messages API `thinking` object ({}: off). The runtime sends them on its own calls,
through the run's model gateway:

- Claude Code (2.1.x): `--effort LEVEL`, with CLAUDE_CODE_ALWAYS_ENABLE_EFFORT=1 so a model id it does not
  know still gets it; `--thinking adaptive|disabled` and `--thinking-display summarized|omitted`.
- opencode (1.18.x): the model's provider options, which its Anthropic provider sends as
  `output_config.effort` and `thinking` ({"type": "adaptive", "display": ...} or {"type": "enabled",
  "budgetTokens": N})."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def claude_code_args(effort: str, thinking: Mapping[str, Any]) -> list[str]:
    """Claude Code's command-line options for the run's effort and thinking."""
    args = ["--effort", effort] if effort else []
    kind = thinking.get("type") if thinking else None
    if kind in ("adaptive", "enabled"):  # Claude Code's "enabled" is adaptive too
        args += ["--thinking", "adaptive"]
        if thinking.get("display") in ("summarized", "omitted"):
            args += ["--thinking-display", str(thinking["display"])]
    elif not thinking or kind == "disabled":
        args += ["--thinking", "disabled"]
    return args


def claude_code_env(effort: str) -> dict[str, str]:
    """The environment that makes Claude Code send the effort whatever the model's id."""
    return {"CLAUDE_CODE_ALWAYS_ENABLE_EFFORT": "1"} if effort else {}


def opencode_options(effort: str, thinking: Mapping[str, Any]) -> dict[str, Any]:
    """opencode's model `options` (its Anthropic provider's options) for the run's effort and thinking."""
    options: dict[str, Any] = {"effort": effort} if effort else {}
    kind = thinking.get("type") if thinking else None
    if kind == "adaptive":
        options["thinking"] = {"type": "adaptive"}
        if thinking.get("display") in ("summarized", "omitted"):
            options["thinking"]["display"] = thinking["display"]
    elif kind == "enabled" and isinstance(thinking.get("budget_tokens"), int):
        options["thinking"] = {"type": "enabled", "budgetTokens": thinking["budget_tokens"]}
    return options
