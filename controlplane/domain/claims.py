"""Claim rules (DESIGN.md "Claims"): leases and their renewal at half-life, what a Task claims, which
resources overlap (globs included), and which Tasks of a Change conflict. Pure: the store's side is
services/claims.py."""

from __future__ import annotations

import dataclasses
import datetime as dt
import fnmatch
import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from controlplane.domain import graph
from controlplane.domain.resources import GLOB as _GLOB
from controlplane.domain.resources import NAMED as _NAMED
from controlplane.domain.resources import normalise

LEASE = dt.timedelta(seconds=120)
"""How long a claim lasts without renewal."""


def lease_expired(expires_at: dt.datetime, now: dt.datetime) -> bool:
    return now >= expires_at


def needs_renewal(acquired_or_renewed_at: dt.datetime, expires_at: dt.datetime, now: dt.datetime) -> bool:
    """At half-life: a 120 s lease taken or renewed at t is due from t + 60 s."""
    return now >= acquired_or_renewed_at + (expires_at - acquired_or_renewed_at) / 2


def normalise_all(resources: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted({normalise(r) for r in resources}))


def task_resources(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """What a Task claims: its declared files and named resources (Task.spec, the routing traits)."""
    return normalise_all([*spec.get("files", ()), *spec.get("resources", ())])


def overlaps(a: str, b: str) -> bool:
    """Whether two normalised resources may name the same thing: the same kind (paths are one kind)
    and patterns some name matches both (`src/*.py` overlaps `src/app.py` and `src/a*`)."""
    kind_a, name_a = _split(a)
    kind_b, name_b = _split(b)
    if kind_a != kind_b:
        return False
    glob_a, glob_b = bool(_GLOB & set(name_a)), bool(_GLOB & set(name_b))
    if not glob_a and not glob_b:
        return name_a == name_b
    if not glob_a:
        return fnmatch.fnmatchcase(name_a, name_b)
    if not glob_b:
        return fnmatch.fnmatchcase(name_b, name_a)
    return _globs_intersect(_tokens(name_a), _tokens(name_b))


def _split(resource: str) -> tuple[str, str]:
    named = _NAMED.match(resource)
    return (named.group(1), named.group(2)) if named else ("", resource)


def _tokens(pattern: str) -> list[tuple[str, str]]:
    """fnmatch's pattern as tokens: ("*", ""), ("?", ""), ("[", class text) or ("c", a character)."""
    out, i, n = [], 0, len(pattern)
    while i < n:
        ch = pattern[i]
        if ch in "*?":
            out.append((ch, ""))
        elif ch == "[":
            end = i + 1
            end += pattern[end : end + 1] == "!"
            end += pattern[end : end + 1] == "]"  # a leading ] belongs to the class, as in fnmatch
            end = pattern.find("]", end)
            if end == -1:
                out.append(("c", ch))  # no closing bracket: a plain "["
            else:
                out.append(("[", pattern[i : end + 1]))
                i = end
        else:
            out.append(("c", ch))
        i += 1
    return out


def _one_char_in_both(a: tuple[str, str], b: tuple[str, str]) -> bool:
    if a[0] in "*?" or b[0] in "*?":
        return True
    if a[0] == "c" and b[0] == "c":
        return a[1] == b[1]
    if a[0] == "c" or b[0] == "c":
        char, klass = (a[1], b[1]) if a[0] == "c" else (b[1], a[1])
        return fnmatch.fnmatchcase(char, klass)
    return True  # two character classes: assume they share a character


def _globs_intersect(p: list[tuple[str, str]], q: list[tuple[str, str]]) -> bool:
    """Whether some name matches both patterns: a walk over the pair of positions in each."""
    todo, seen = [(0, 0)], set()
    while todo:
        i, j = todo.pop()
        if (i, j) in seen:
            continue
        seen.add((i, j))
        if i == len(p) and j == len(q):
            return True
        if i < len(p) and p[i][0] == "*":
            todo.append((i + 1, j))
        if j < len(q) and q[j][0] == "*":
            todo.append((i, j + 1))
        if i < len(p) and j < len(q) and _one_char_in_both(p[i], q[j]):
            todo.append((i if p[i][0] == "*" else i + 1, j if q[j][0] == "*" else j + 1))
    return False


def find_conflicts(
    order: Sequence[str],
    deps: Mapping[str, Sequence[str]],
    files: Mapping[str, Iterable[str]],
    contended: Iterable[tuple[str, str, str]],
) -> dict[tuple[str, str], tuple[list[str], list[str]]]:
    """Pairs of Tasks (in `order`) whose ChangeSets touch the same `files`, or that contended for a
    resource ((task, task, resource) triples), with those files and resources. A Task stacked on the
    other (a dependency, however far) built on its ChangeSet, so their shared files are no conflict."""
    rank = {task: n for n, task in enumerate(order)}
    found: dict[tuple[str, str], tuple[set[str], set[str]]] = {}
    own = {task: set(files.get(task, ())) for task in order}
    for a, b in itertools.combinations(order, 2):
        shared = own[a] & own[b]
        if shared and a not in graph.ancestors(b, deps) and b not in graph.ancestors(a, deps):
            found.setdefault((a, b), (set(), set()))[0].update(shared)
    for x, y, resource in contended:
        if x != y and x in rank and y in rank:
            pair = (x, y) if rank[x] < rank[y] else (y, x)
            found.setdefault(pair, (set(), set()))[1].add(resource)
    return {
        pair: (sorted(f), sorted(r))
        for pair, (f, r) in sorted(found.items(), key=lambda kv: (rank[kv[0][0]], rank[kv[0][1]]))
    }


@dataclasses.dataclass(frozen=True)
class ClaimState:
    resource: str
    run_id: str
    holder: str
    generation: int
    acquired_at: dt.datetime
    expires_at: dt.datetime
    released_at: dt.datetime | None = None
    contended_with: tuple[str, ...] = ()
    """Runs that held a live overlapping claim when this one was taken (both hold: claims are advisory)."""


@dataclasses.dataclass(frozen=True)
class Contention:
    """One `claim.contended` event: `contender_run` claimed `resource` while `holder_run` held `held_resource`."""

    resource: str
    held_resource: str
    holder_run: str
    holder_task: str
    holder_change: str
    contender_run: str
    contender_task: str
