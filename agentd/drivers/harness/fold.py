"""Context folding (seed 002), the pure part: when to fold and what to keep.

Past `fraction` of the context window, older exchanges are folded into one running
summary; the system prompt, the opening user message (verbatim), the summary and a
token-budgeted tail of whole exchanges stay. Tokens are estimated as characters / 4."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any


def estimate_tokens(value: Any) -> int:
    """A deterministic estimate: one token per four characters of the JSON form."""
    return (len(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)) + 3) // 4


@dataclasses.dataclass(frozen=True)
class FoldPlan:
    fold_through: int  # index of the last exchange to fold into the summary; -1: nothing to fold


def plan(
    sizes: Sequence[int], folded_through: int, fixed: int, window: int, fraction: float, tail_fraction: float = 0.25
) -> FoldPlan | None:
    """`sizes` are the token estimates of every exchange; exchanges up to `folded_through` are already
    in the summary, and `fixed` counts the system prompt, tools, opening message and summary.
    Answers None while under the threshold; otherwise which exchanges to fold (the newest whole
    exchanges that fit in the tail budget stay)."""
    threshold = window * fraction
    live = list(range(folded_through + 1, len(sizes)))
    if fixed + sum(sizes[i] for i in live) <= threshold:
        return None
    budget, tail = window * tail_fraction, 0
    keep_from = len(sizes)
    for i in reversed(live):
        if tail + sizes[i] > budget:
            break
        tail += sizes[i]
        keep_from = i
    if keep_from == len(sizes) and live:
        keep_from = live[-1]  # the newest exchange always stays, even when it alone is over budget
    return FoldPlan(fold_through=keep_from - 1 if keep_from - 1 > folded_through else -1)


FOLD_SYSTEM = (
    "You summarise the work of a coding agent so it can go on without its older messages. "
    "Keep every fact it needs: files read and what they contain that matters, edits made, "
    "commands run and their results, decisions, open problems. Be concise; no preamble."
)


def fold_request(previous_summary: str, exchanges: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages of the summary call: the previous summary and the exchanges to fold."""
    body = json.dumps(exchanges, ensure_ascii=False)
    text = (
        f"Previous summary:\n{previous_summary or '(none)'}\n\nNewer work to fold in (JSON):\n{body}\n\n"
        "Write the updated summary."
    )
    return [{"role": "user", "content": [{"type": "text", "text": text}]}]
