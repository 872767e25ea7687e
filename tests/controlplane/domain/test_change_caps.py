"""controlplane/domain/scheduling.py admit_by_change: which ready runs of each Change may start given its
active runs, the open sandboxes among them, and its project's max_active_runs_per_change and
max_open_sandboxes_per_change; the rest stay queued (blocked_limit)."""

from __future__ import annotations

import pytest

from controlplane.domain.scheduling import (
    CappedRun,
    Hold,
    admit_by_change,
    cap_notice,
    changes_at_caps,
    check_change_cap,
    holding_cap,
    holds_after,
    sandbox_notice,
)
from drover.errors import InvalidArgument


def run(run_id: str, change: str, cap: int = 2) -> CappedRun:
    return CappedRun(run_id, change, cap)


def box(run_id: str, change: str, cap: int = 8, sandbox_cap: int = 2) -> CappedRun:
    """A run that opens a sandbox (a command run, or an implement/migrate/test/fix Task of a repository)."""
    return CappedRun(run_id, change, cap, sandbox_cap, sandbox=True)


def plain(run_id: str, change: str, cap: int = 8, sandbox_cap: int = 2) -> CappedRun:
    """A run that opens none (plan, review, ... or a Task of a project without a repository)."""
    return CappedRun(run_id, change, cap, sandbox_cap, sandbox=False)


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


@pytest.mark.parametrize(
    "runs, active, sandboxes, admitted, held",
    [
        pytest.param([box("r1", "c1"), box("r2", "c1")], {}, {}, ["r1", "r2"], [], id="under both caps: all start"),
        pytest.param(
            [box("r1", "c1"), box("r2", "c1"), box("r3", "c1")],
            {},
            {},
            ["r1", "r2"],
            ["r3"],
            id="the sandbox cap counts this pass",
        ),
        pytest.param([box("r1", "c1")], {"c1": 2}, {"c1": 2}, [], ["r1"], id="at the sandbox cap: held"),
        pytest.param(
            [box("r1", "c1"), plain("r2", "c1"), box("r3", "c1")],
            {"c1": 2},
            {"c1": 2},
            ["r2"],
            ["r1", "r3"],
            id="a Change at its sandbox cap still starts runs that open none",
        ),
        pytest.param(
            [plain("r1", "c1"), plain("r2", "c1"), plain("r3", "c1")],
            {},
            {},
            ["r1", "r2", "r3"],
            [],
            id="runs that open no sandbox never count against it",
        ),
        pytest.param(
            [box("r1", "c1"), box("r2", "c1")], {"c1": 3}, {"c1": 1}, ["r1"], ["r2"], id="only open sandboxes count"
        ),
        pytest.param(
            [box("r1", "c1", cap=2, sandbox_cap=4), box("r2", "c1", cap=2, sandbox_cap=4)],
            {"c1": 1},
            {"c1": 1},
            ["r1"],
            ["r2"],
            id="the active-run cap still holds sandbox runs",
        ),
        pytest.param(
            [plain("r1", "c1", cap=2), box("r2", "c1", cap=2)],
            {"c1": 1},
            {},
            ["r1"],
            ["r2"],
            id="a run that opens none takes an active-run slot",
        ),
        pytest.param(
            [box("r1", "c1"), box("r2", "c2"), box("r3", "c2")],
            {"c1": 2},
            {"c1": 2},
            ["r2", "r3"],
            ["r1"],
            id="one Change at its sandbox cap never holds another's runs",
        ),
        pytest.param(
            [box("r1", "c1", sandbox_cap=1), box("r2", "c2", sandbox_cap=3), box("r3", "c2", sandbox_cap=3)],
            {"c1": 1, "c2": 2},
            {"c1": 1, "c2": 1},
            ["r2", "r3"],
            ["r1"],
            id="each Change by its own project's sandbox cap",
        ),
        pytest.param([box("r1", "c1")], {"c1": 5}, {"c1": 5}, [], ["r1"], id="over it (lowered since): held"),
    ],
)
def test_admit_by_both_caps(
    runs: list[CappedRun], active: dict[str, int], sandboxes: dict[str, int], admitted: list[str], held: list[str]
) -> None:
    assert admit_by_change(runs, active, sandboxes) == (admitted, held)


@pytest.mark.parametrize(
    "queued, active, sandboxes, hold",
    [
        pytest.param(plain("r", "c", cap=8), 7, 7, None, id="room under both"),
        pytest.param(box("r", "c", cap=8), 7, 1, None, id="a sandbox run with room under both"),
        pytest.param(plain("r", "c", cap=8), 8, 0, Hold("max_active_runs_per_change", 8, 8), id="the active cap"),
        pytest.param(plain("r", "c"), 3, 2, None, id="no sandbox: the sandbox cap does not hold it"),
        pytest.param(box("r", "c"), 3, 2, Hold("max_open_sandboxes_per_change", 2, 2), id="the sandbox cap"),
        pytest.param(box("r", "c", cap=3), 3, 2, Hold("max_active_runs_per_change", 3, 3), id="both: the active cap"),
    ],
)
def test_holding_cap_says_which_cap_holds_a_run(queued: CappedRun, active: int, sandboxes: int, hold: Hold) -> None:
    assert holding_cap(queued, {"c": active}, {"c": sandboxes}) == hold


def test_a_held_run_is_said_with_the_counts_after_the_pass() -> None:
    runs = [box("r1", "c1"), plain("r2", "c1"), box("r3", "c1"), plain("r4", "c2", cap=1)]
    admitted, held = admit_by_change(runs, {"c1": 1, "c2": 1}, {"c1": 1})
    assert (admitted, held) == (["r1", "r2"], ["r3", "r4"])
    assert holds_after(runs, admitted, {"c1": 1, "c2": 1}, {"c1": 1}) == {
        "r3": Hold("max_open_sandboxes_per_change", 2, 2),
        "r4": Hold("max_active_runs_per_change", 1, 1),
    }


@pytest.mark.parametrize(
    "active, sandboxes, caps, full, boxed",
    [
        pytest.param({}, {}, {}, [], [], id="no Change waits"),
        pytest.param({"c1": 3}, {"c1": 1}, {"c1": (8, 4)}, [], [], id="under both"),
        pytest.param({"c1": 8}, {"c1": 4}, {"c1": (8, 4)}, ["c1"], [], id="at the active cap: full, whatever else"),
        pytest.param({"c1": 4}, {"c1": 4}, {"c1": (8, 4)}, [], ["c1"], id="at the sandbox cap only"),
        pytest.param(
            {"c2": 2, "c1": 1}, {"c2": 2}, {"c1": (1, 4), "c2": (8, 2), "c3": (8, 4)}, ["c1"], ["c2"], id="each its own"
        ),
    ],
)
def test_changes_at_caps(
    active: dict[str, int],
    sandboxes: dict[str, int],
    caps: dict[str, tuple[int, int]],
    full: list[str],
    boxed: list[str],
) -> None:
    assert changes_at_caps(active, sandboxes, caps) == (full, boxed)


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


@pytest.mark.parametrize(
    "queued, opened, cap, said",
    [
        (0, 4, 4, False),
        (2, 3, 4, False),
        (2, 4, 4, True),
        (1, 6, 4, True),
    ],
)
def test_sandbox_notice(queued: int, opened: int, cap: int, said: bool) -> None:
    notice = sandbox_notice(queued, opened, cap)
    assert bool(notice) == said
    if said:
        assert notice.startswith("blocked_limit: ")
        assert f"max_open_sandboxes_per_change is {cap}" in notice and f"open sandboxes: {opened}" in notice


@pytest.mark.parametrize("value", [1, 8, 1000])
def test_a_cap_of_1_to_1000_is_taken(value: int) -> None:
    assert check_change_cap(value) == value


@pytest.mark.parametrize("value", [0, -1, 1001])
def test_a_cap_outside_1_to_1000_is_refused_naming_the_setting(value: int) -> None:
    with pytest.raises(InvalidArgument) as err:
        check_change_cap(value)
    assert err.value.field == "max_active_runs_per_change"


def test_the_sandbox_cap_is_refused_by_its_own_name() -> None:
    with pytest.raises(InvalidArgument) as err:
        check_change_cap(0, field="max_open_sandboxes_per_change")
    assert err.value.field == "max_open_sandboxes_per_change"
