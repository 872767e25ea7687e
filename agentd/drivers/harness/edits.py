"""edit_file's rule: exact text edits, all or nothing.

Every old_text must occur exactly once in the file as it was before the call, the edits
are listed in the order their old_text appears, and no two touch the same text. When one
edit breaks a rule nothing is applied and the error names that edit, so a model can fix
just that edit and send the call again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentd.errors import AgentdError


@dataclass(frozen=True)
class Edit:
    """Replace `old_text` (which must occur exactly once in the file) with `new_text`."""

    old_text: str
    new_text: str


class EditError(AgentdError):
    """Edit number `index` (0-based, in the order given) could not be applied: `reason`."""

    def __init__(self, index: int, reason: str) -> None:
        super().__init__(f"edit {index}: {reason}")
        self.index = index
        self.reason = reason


def _occurrences(text: str, needle: str) -> list[int]:
    # Overlapping matches count too: "aa" occurs twice in "aaa", and either could be meant.
    found: list[int] = []
    at = text.find(needle)
    while at != -1:
        found.append(at)
        at = text.find(needle, at + 1)
    return found


def _not_found_reason(text: str, edits: Sequence[Edit], index: int) -> str:
    old = edits[index].old_text
    for earlier in range(index):
        if old in edits[earlier].new_text:
            return (
                f"old_text not found; it occurs only in the new_text of edit {earlier}, "
                f"and every old_text must match the file as it was before this call"
            )
    if old.strip() and old.strip() in text:
        return "old_text not found (it matches only with different leading or trailing whitespace)"
    return "old_text not found"


def apply_edits(text: str, edits: Sequence[Edit]) -> str:
    """`text` with every edit applied, or EditError naming the first edit that breaks a rule.

    The rules: old_text is not empty, occurs exactly once in `text`, the edits appear in
    ascending position order, and they do not overlap. The caller writes the file only when
    this returns.
    """
    spans: list[tuple[int, int]] = []
    for index, edit in enumerate(edits):
        if not edit.old_text:
            raise EditError(index, "old_text is empty")
        found = _occurrences(text, edit.old_text)
        if not found:
            raise EditError(index, _not_found_reason(text, edits, index))
        if len(found) > 1:
            raise EditError(index, f"old_text occurs {len(found)} times; it must occur exactly once")
        start, end = found[0], found[0] + len(edit.old_text)
        for earlier, (other_start, other_end) in enumerate(spans):
            if start < other_end and other_start < end:
                raise EditError(index, f"old_text overlaps the old_text of edit {earlier}")
        if spans and start < spans[-1][1]:
            raise EditError(
                index,
                f"old_text not found after edit {index - 1}; list the edits "
                f"in the order their old_text appears in the file",
            )
        spans.append((start, end))

    pieces: list[str] = []
    cursor = 0
    for edit, (start, end) in zip(edits, spans, strict=True):
        pieces.append(text[cursor:start])
        pieces.append(edit.new_text)
        cursor = end
    pieces.append(text[cursor:])
    return "".join(pieces)
