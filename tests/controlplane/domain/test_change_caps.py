"""controlplane/domain/scheduling.py admit_by_change: which ready runs of each Change may start given its
active runs and its project's max_active_runs_per_change; the rest stay queued (blocked_limit)."""

from __future__ import annotations

import pytest

from controlplane.domain.scheduling import CappedRun, admit_by_change, cap_notice, check_change_cap
from drover.errors import InvalidArgument


def run(run_id: str, change: str, cap: int = 2) -> CappedRun:
    return CappedRun(run_id, change, cap)


@pytest.mark.parametrize(
    "runs, active, admitted, held",
    [
        pytest.param([], {}, [], [], id="nothing ready"),
        pytest.param([run("r1", "c1"), run("r2", "c1")], {}, ["r1", "r2"], [], id="under the cap: all start"),
        pytest.param(
            [run("r1", "c1"), run("r2", "c1"), run("r3", "c1")], {}, ["r1", "r2"], ["r3"], id="the cap counts this pass"
        ),
        pytest.param([run("r1", "c1"), run("r2", "c1")], {"c1": 1}, ["r1"], ["r2"], id="active runs count"),
        pytest.param([run("r1", "c1")], {"c1": 2}, [], ["r1"], id="at the cap: held"),
        pytest.param([run("r1", "c1")], {"c1": 5}, [], ["r1"], id="over the cap (lowered since): held"),
        pytest.param(
            [run("r1", "c1"), run("r2", "c1"), run("r3", "c2"), run("r4", "c2")],
            {"c1": 2},
            ["r3", "r4"],
            ["r1", "r2"],
            id="one Change at its cap never holds another's runs",
        ),
        pytest.param(
            [run("r1", "c1", cap=1), run("r2", "c2", cap=3), run("r3", "c1", cap=1), run("r4", "c2", cap=3)],
            {"c2": 1},
            ["r1", "r2", "r4"],
            ["r3"],
            id="each Change by its own project's cap",
        ),
        pytest.param(
            [run("r2", "c1"), run("r1", "c1")], {"c1": 1}, ["r2"], ["r1"], id="oldest first: the order given wins"
        ),
        pytest.param([run("r1", "c1", cap=8)], {"c9": 8}, ["r1"], [], id="a busy unrelated Change does not count"),
    ],
)
def test_admit_by_change(runs: list[CappedRun], active: dict[str, int], admitted: list[str], held: list[str]) -> None:
    assert admit_by_change(runs, active) == (admitted, held)


def test_admission_leaves_the_counts_given_alone() -> None:
    active = {"c1": 1}
    admit_by_change([run("r1", "c1"), run("r2", "c1")], active)
    assert active == {"c1": 1}


@pytest.mark.parametrize(
    "queued, active, cap, said",
    [
        (0, 8, 8, False),
        (3, 7, 8, False),
        (3, 8, 8, True),
        (1, 9, 8, True),
    ],
)
def test_cap_notice(queued: int, active: int, cap: int, said: bool) -> None:
    notice = cap_notice(queued, active, cap)
    assert bool(notice) == said
    if said:
        assert notice.startswith("blocked_limit: ")
        assert f"max_active_runs_per_change is {cap}" in notice and f"{active} active" in notice


@pytest.mark.parametrize("value", [1, 8, 1000])
def test_a_cap_of_1_to_1000_is_taken(value: int) -> None:
    assert check_change_cap(value) == value


@pytest.mark.parametrize("value", [0, -1, 1001])
def test_a_cap_outside_1_to_1000_is_refused_naming_the_setting(value: int) -> None:
    with pytest.raises(InvalidArgument) as err:
        check_change_cap(value)
    assert err.value.field == "max_active_runs_per_change"
