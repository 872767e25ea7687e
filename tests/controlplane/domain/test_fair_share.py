"""controlplane/domain/scheduling.py fair_order: the order a pool's slots go to ready runs: by weight between
projects, round-robin between the Changes of a project, oldest first within a Change, counting the runs
already active; and check_weight, the project setting it reads."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from controlplane.domain.scheduling import FairRun, check_weight, fair_order
from drover.errors import InvalidArgument


def runs(change: str, count: int, project: str = "web", weight: int = 1) -> list[FairRun]:
    return [FairRun(f"{change}.{i}", change, project, weight) for i in range(count)]


def oldest_first(*groups: list[FairRun]) -> list[FairRun]:
    """Runs of several Changes as created one after another, interleaved by the order given."""
    return [run for run in itertools.chain(*itertools.zip_longest(*groups)) if run is not None]


@pytest.mark.parametrize(
    "queued, by_change, by_project, order",
    [
        pytest.param([], {}, {}, [], id="nothing ready"),
        pytest.param(runs("a", 3), {}, {}, ["a.0", "a.1", "a.2"], id="one Change: oldest first, unchanged"),
        pytest.param(runs("a", 3), {"a": 5}, {"web": 5}, ["a.0", "a.1", "a.2"], id="one Change, busy: unchanged"),
        pytest.param(
            runs("big", 4) + runs("small", 2),
            {},
            {},
            ["big.0", "small.0", "big.1", "small.1", "big.2", "big.3"],
            id="a young small Change interleaves with an old big one",
        ),
        pytest.param(
            runs("big", 4) + runs("small", 2),
            {"big": 3},
            {"web": 3},
            ["small.0", "small.1", "big.0", "big.1", "big.2", "big.3"],
            id="the Change with fewer active runs goes first",
        ),
        pytest.param(
            runs("a", 2) + runs("b", 2),
            {"a": 1, "b": 1},
            {"web": 2},
            ["a.0", "b.0", "a.1", "b.1"],
            id="ties between Changes: the older oldest run",
        ),
        pytest.param(
            runs("a", 2, "p") + runs("b", 2, "q"),
            {},
            {"p": 2},
            ["b.0", "b.1", "a.0", "a.1"],
            id="a project's active runs count for its every Change",
        ),
        pytest.param(
            runs("b", 2, "q") + runs("a", 2, "p"),
            {},
            {"q": 1, "p": 1},
            ["b.0", "a.0", "b.1", "a.1"],
            id="ties between projects: the older oldest run",
        ),
        pytest.param(
            runs("a", 3, "p") + runs("b", 3, "q"),
            {},
            {"p": 0, "q": 2, "elsewhere": 50},
            ["a.0", "a.1", "a.2", "b.0", "b.1", "b.2"],
            id="a project of another pool (busy or not) changes nothing here",
        ),
    ],
)
def test_fair_order(
    queued: list[FairRun], by_change: dict[str, int], by_project: dict[str, int], order: list[str]
) -> None:
    assert fair_order(queued, by_change, by_project) == order


def test_a_forty_run_change_and_a_two_run_change_share_the_first_slots() -> None:
    order = fair_order(runs("big", 40) + runs("small", 2), {}, {})
    assert order[:4] == ["big.0", "small.0", "big.1", "small.1"]
    assert order[4:] == [f"big.{i}" for i in range(2, 40)]


def test_weights_two_to_one_share_two_to_one() -> None:
    heavy, light = runs("h", 30, "heavy", weight=2), runs("l", 30, "light", weight=1)
    order = fair_order(oldest_first(heavy, light), {}, {})
    for slots in (3, 6, 9, 12, 30):
        share = Counter(run_id[0] for run_id in order[:slots])
        assert share == {"h": 2 * slots // 3, "l": slots // 3}, slots


def test_weights_count_active_runs_too() -> None:
    """heavy (weight 3) already runs 3, light (1) none: the next slot is light's, then they go 3:1."""
    order = fair_order(oldest_first(runs("h", 9, "heavy", 3), runs("l", 9, "light", 1)), {"h": 3}, {"heavy": 3})
    assert order[0] == "l.0"
    assert Counter(run_id[0] for run_id in order[:9]) == {"h": 6, "l": 3}  # (3+6)/3 == (0+3)/1


def test_round_robin_between_changes_inside_a_weighted_project() -> None:
    """Project p (weight 2) has Changes a and b, q (weight 1) has c: p takes two slots of three, and
    those go to a and b in turn."""
    queued = oldest_first(runs("a", 6, "p", 2), runs("b", 6, "p", 2), runs("c", 6, "q", 1))
    order = fair_order(queued, {}, {})
    assert order[:6] == ["a.0", "c.0", "b.0", "a.1", "c.1", "b.1"]


def test_pools_are_independent() -> None:
    """Each pool's order is the one it has alone, whatever the other pool's projects queue or run."""
    pool_a = oldest_first(runs("a1", 5, "pa"), runs("a2", 2, "pa"), runs("a3", 4, "pb", weight=3))
    pool_b = oldest_first(runs("b1", 8, "pc"), runs("b2", 3, "pd", weight=2))
    alone_a = fair_order(pool_a, {"a1": 1}, {"pa": 1})
    alone_b = fair_order(pool_b, {"b2": 4}, {"pd": 4})
    together = fair_order(oldest_first(pool_b, pool_a), {"a1": 1, "b2": 4}, {"pa": 1, "pd": 4})
    assert [r for r in together if r.startswith("a")] == alone_a
    assert [r for r in together if r.startswith("b")] == alone_b


def test_every_run_comes_once_and_the_counts_given_stay() -> None:
    by_change, by_project = {"a": 2}, {"p": 2}
    queued = oldest_first(runs("a", 7, "p", 2), runs("b", 3, "q"), runs("c", 5, "p", 2))
    order = fair_order(queued, by_change, by_project)
    assert sorted(order) == sorted(r.run_id for r in queued)
    assert by_change == {"a": 2} and by_project == {"p": 2}


@pytest.mark.parametrize("good", [1, 2, 1000])
def test_check_weight_takes_1_to_1000(good: int) -> None:
    assert check_weight(good) == good


@pytest.mark.parametrize("bad", [0, -1, 1001, True, 1.5, "2"])
def test_check_weight_refuses_anything_else_naming_it(bad: object) -> None:
    with pytest.raises(InvalidArgument) as err:
        check_weight(bad)  # type: ignore[arg-type]
    assert err.value.field == "weight"
