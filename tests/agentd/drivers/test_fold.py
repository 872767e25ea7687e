"""Context folding's pure part (seed 002): the token estimate, when to fold and what stays, as tables."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest

from agentd.drivers.harness.fold import (
    FOLD_SYSTEM,
    FoldPlan,
    estimate_tokens,
    fold_request,
    plan,
)

pytestmark = pytest.mark.timeout(10)


@pytest.mark.parametrize(
    "value, tokens",
    [
        ("", 0),
        ("a", 1),
        ("abcd", 1),
        ("abcde", 2),
        ("x" * 400, 100),
        ("é" * 8, 2),  # characters, not bytes
        ([], 1),  # "[]"
        ({"a": 1}, 2),  # '{"a": 1}' is 8 characters
        ({"text": "é"}, 4),  # ensure_ascii=False: '{"text": "é"}' is 13 characters
        ([{"type": "text", "text": "x" * 100}], 33),  # 130 characters of JSON
    ],
)
def test_estimate_tokens(value: object, tokens: int) -> None:
    assert estimate_tokens(value) == tokens


def test_estimate_tokens_of_a_value_is_that_of_its_json() -> None:
    value = {"role": "user", "content": [{"type": "tool_result", "content": "line\n" * 50}]}
    assert estimate_tokens(value) == estimate_tokens(json.dumps(value, ensure_ascii=False))


# window 1000 and fraction 0.5: fold past 500 tokens; tail_fraction 0.25 keeps a tail of at most 250.
WINDOW, FRACTION = 1000, 0.5

PLANS = [
    # (case, sizes, folded_through, fixed, tail_fraction, expected)
    ("empty and under", [], -1, 100, 0.25, None),
    ("under the threshold", [100, 100], -1, 100, 0.25, None),
    ("exactly at the threshold", [100, 100, 100, 100], -1, 100, 0.25, None),
    (
        "over: the oldest fold, a tail within a quarter of the window stays",
        [100, 100, 100, 100, 100],
        -1,
        100,
        0.25,
        FoldPlan(2),
    ),
    ("one token over", [100, 100, 100, 101], -1, 100, 0.25, FoldPlan(1)),
    ("a wider tail keeps more", [100, 100, 100, 100, 100], -1, 100, 0.4, FoldPlan(0)),
    ("already folded exchanges do not count toward the threshold", [1000, 1000, 100, 100], 1, 100, 0.25, None),
    (
        "already folded exchanges are not folded again",
        [100, 100, 100, 100, 100, 100, 100, 100],
        2,
        100,
        0.25,
        FoldPlan(5),
    ),
    ("a large older exchange folds with the ones before it", [50, 900, 50, 50], -1, 0, 0.25, FoldPlan(1)),
    (
        "the newest exchange alone over the tail budget stays; the rest fold",
        [100, 100, 400],
        -1,
        100,
        0.25,
        FoldPlan(1),
    ),
    (
        "nothing to fold: the whole live part fits the tail, the fixed part is over",
        [100, 100],
        -1,
        400,
        0.25,
        FoldPlan(-1),
    ),
    ("nothing to fold: everything is folded already", [100, 100], 1, 600, 0.25, FoldPlan(-1)),
    ("nothing to fold: no exchanges at all", [], -1, 600, 0.25, FoldPlan(-1)),
    ("nothing to fold: a single huge exchange stays", [900], -1, 0, 0.25, FoldPlan(-1)),
    ("nothing to fold: the only live exchange is huge", [100, 100, 900], 1, 0, 0.25, FoldPlan(-1)),
]


@pytest.mark.parametrize(
    "case, sizes, folded_through, fixed, tail_fraction, expected", PLANS, ids=[p[0] for p in PLANS]
)
def test_plan(
    case: str, sizes: list[int], folded_through: int, fixed: int, tail_fraction: float, expected: FoldPlan | None
) -> None:
    assert plan(sizes, folded_through, fixed, WINDOW, FRACTION, tail_fraction) == expected


def test_plan_tail_fraction_defaults_to_a_quarter() -> None:
    sizes = [100, 100, 100, 100, 100]
    assert plan(sizes, -1, 100, WINDOW, FRACTION) == plan(sizes, -1, 100, WINDOW, FRACTION, 0.25) == FoldPlan(2)


@pytest.mark.parametrize("seed", range(50))
def test_plan_keeps_whole_newest_exchanges_within_the_tail_budget(seed: int) -> None:
    rng = random.Random(seed)
    sizes = [rng.choice([10, 50, 120, 300, 700]) for _ in range(rng.randint(0, 12))]
    folded_through = rng.randint(-1, len(sizes) - 1)
    fixed = rng.randint(0, 600)
    decided = plan(sizes, folded_through, fixed, WINDOW, FRACTION)
    live = sizes[folded_through + 1 :]
    if fixed + sum(live) <= WINDOW * FRACTION:
        assert decided is None
        return
    assert decided is not None
    if decided.fold_through == -1:
        # Nothing folds only when the whole live part fits the tail, or it is the newest exchange alone.
        assert sum(live) <= WINDOW * 0.25 or len(live) <= 1
        return
    assert folded_through < decided.fold_through < len(sizes) - 1  # something folds, the newest stays
    tail = sizes[decided.fold_through + 1 :]
    assert sum(tail) <= WINDOW * 0.25 or len(tail) == 1  # only the newest exchange may be over alone
    assert sum(tail) + sizes[decided.fold_through] > WINDOW * 0.25  # the tail is as long as it can be


def test_fold_plan_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        FoldPlan(1).fold_through = 2  # type: ignore[misc]


def test_fold_request_carries_the_previous_summary_and_the_folded_exchanges() -> None:
    exchanges = [
        {"reply": [{"type": "text", "text": "reading"}], "results": [{"id": "t1", "text": "é", "error": False}]}
    ]
    request = fold_request("summary-1", exchanges)
    assert [m["role"] for m in request] == ["user"]
    text = request[0]["content"][0]["text"]
    assert text == (
        "Previous summary:\nsummary-1\n\nNewer work to fold in (JSON):\n"
        + json.dumps(exchanges, ensure_ascii=False)
        + "\n\nWrite the updated summary."
    )
    assert fold_request("", [])[0]["content"][0]["text"].startswith("Previous summary:\n(none)\n")
    assert "summarise" in FOLD_SYSTEM
