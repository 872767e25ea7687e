"""What a merge conflict does (seed 000, "Stacked workspaces" and "Escalation"). Pure.

A conflict is not terminal: the Task whose ChangeSet did not merge onto the others (in a dependent's
workspace, or in the Change's candidate) is reopened with a new dependency edge on the Tasks it
conflicted with, so it runs again stacked on their ChangeSets. At most `MAX_REOPENINGS` per Task; the
next conflict fails as before, naming the files.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence

from controlplane.domain import graph

MAX_REOPENINGS = 2
"""How often one Task is reopened after a conflict; the next conflict fails the Change."""

_RUN_ERROR = re.compile(r"merging ChangeSet (\S+) conflicts in ([^;]+)")


@dataclasses.dataclass(frozen=True)
class Merged:
    """A ChangeSet in merge order: its Task's key and the files it changed."""

    task: str
    files: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Decision:
    """Reopen `task` with new dependency edges on `depends_on`, or fail (`reopen` False, `reason` says why)."""

    reopen: bool
    task: str
    depends_on: tuple[str, ...] = ()
    reason: str = ""


def parse_run_error(error: str) -> tuple[str, tuple[str, ...]] | None:
    """The ChangeSet id and files of a run's `dependency_merge_conflict` error
    (gitspace.MergeConflict's message), or None when the error is not one."""
    found = _RUN_ERROR.search(error.strip())
    if found is None:
        return None
    return found.group(1), tuple(f for f in found.group(2).split(", ") if f)


def decide(
    order: Sequence[Merged],
    conflicting: str,
    files: Sequence[str],
    reopened: int,
    deps: Mapping[str, Sequence[str]],
) -> Decision:
    """After `conflicting`'s ChangeSet did not merge onto those before it in `order` (merge order),
    conflicting in `files`, having been reopened `reopened` times already: which edges to add.

    It conflicted with the earlier Tasks whose ChangeSets touch one of `files` (every earlier Task
    when none does: the files are known only from the merge). An earlier Task it already depends on,
    or one that depends on it, gets no edge; no edge left means a rerun cannot help."""
    if reopened >= MAX_REOPENINGS:
        return Decision(False, conflicting, reason=f"reopened {reopened} times already")
    keys = [m.task for m in order]
    if conflicting not in keys:
        return Decision(False, conflicting, reason="its ChangeSet is not in the merge")
    earlier = order[: keys.index(conflicting)]
    wanted = set(files)
    touching = [m.task for m in earlier if wanted & set(m.files)] or [m.task for m in earlier]
    have = graph.ancestors(conflicting, deps)
    edges = tuple(k for k in touching if k not in have and conflicting not in graph.ancestors(k, deps))
    if not edges:
        return Decision(False, conflicting, reason="it already stacks on every Task it conflicts with")
    return Decision(True, conflicting, edges)
