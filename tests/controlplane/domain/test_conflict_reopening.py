"""Which Task a merge conflict reopens, with which new edge, and when the bound is hit (seed 000), as tables."""

from __future__ import annotations

import pytest

from controlplane.domain.conflicts import MAX_REOPENINGS, Decision, Merged, decide, parse_run_error

pytestmark = pytest.mark.timeout(10)

A, B, C = Merged("a", ("f.txt",)), Merged("b", ("f.txt",)), Merged("c", ("g.txt",))
STACKED = "it already stacks on every Task it conflicts with"
FREE = {"a": [], "b": [], "c": []}


@pytest.mark.parametrize(
    ("order", "conflicting", "files", "reopened", "deps", "expected"),
    [
        # two independent Tasks: the later one is reopened on the earlier one
        ([A, B], "b", ["f.txt"], 0, FREE, Decision(True, "b", ("a",))),
        ([A, B], "b", ["f.txt"], 1, FREE, Decision(True, "b", ("a",))),
        # the bound: a third conflict of the same Task fails
        ([A, B], "b", ["f.txt"], MAX_REOPENINGS, FREE, Decision(False, "b", reason="reopened 2 times already")),
        # only the earlier Tasks that touch a conflicting file get an edge
        ([A, C, Merged("d", ("f.txt", "h.txt"))], "d", ["f.txt"], 0, {**FREE, "d": []}, Decision(True, "d", ("a",))),
        # files nobody else lists (a rename, say): every earlier Task
        ([A, C, B], "b", ["z.txt"], 0, FREE, Decision(True, "b", ("a", "c"))),
        # already stacked on the one it conflicts with: a rerun cannot help
        (
            [A, B],
            "b",
            ["f.txt"],
            0,
            {"a": [], "b": ["a"], "c": []},
            Decision(False, "b", reason=STACKED),
        ),
        # an edge that would close a cycle is never added
        (
            [A, B],
            "b",
            ["f.txt"],
            0,
            {"a": ["b"], "b": [], "c": []},
            Decision(False, "b", reason=STACKED),
        ),
        # the first ChangeSet cannot conflict with nothing
        ([B, A], "b", ["f.txt"], 0, FREE, Decision(False, "b", reason=STACKED)),
        ([A], "x", ["f.txt"], 0, FREE, Decision(False, "x", reason="its ChangeSet is not in the merge")),
    ],
)
def test_decide(
    order: list[Merged], conflicting: str, files: list[str], reopened: int, deps: dict, expected: Decision
) -> None:
    assert decide(order, conflicting, files, reopened, deps) == expected


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        ("merging ChangeSet cs_1 conflicts in f.txt", ("cs_1", ("f.txt",))),
        ("merging ChangeSet cs_2 conflicts in a.py, b/c.py", ("cs_2", ("a.py", "b/c.py"))),
        ("merging ChangeSet cs_3 conflicts in a.py; memory.max reached", ("cs_3", ("a.py",))),
        ("clone failed: no such repository", None),
        ("", None),
    ],
)
def test_parse_run_error(error: str, expected: tuple | None) -> None:
    assert parse_run_error(error) == expected
