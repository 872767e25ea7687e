"""controlplane/graph.py: validation, cycles, readiness, blocking and a Change's status."""

from __future__ import annotations

import dataclasses

import pytest

from controlplane.domain import graph
from controlplane.domain.graph import ChangeSpec, TaskSpec
from drover.errors import InvalidArgument


def t(key: str, *depends_on: str, kind: str = "test", objective: str = "do it") -> TaskSpec:
    return TaskSpec(key=key, kind=kind, objective=objective, depends_on=tuple(depends_on))


GOOD = ChangeSpec(project="web", goal="ship it", tasks=(t("a"), t("b", "a"), t("c", "a", "b")))


def test_a_good_change_validates() -> None:
    graph.validate(GOOD)  # no exception


def replace_tasks(*tasks: TaskSpec) -> ChangeSpec:
    return dataclasses.replace(GOOD, tasks=tasks)


@pytest.mark.parametrize(
    "spec, field, message",
    [
        pytest.param(dataclasses.replace(GOOD, project=""), "project", "must name a project", id="empty project"),
        pytest.param(dataclasses.replace(GOOD, project="   "), "project", "must name a project", id="blank project"),
        pytest.param(dataclasses.replace(GOOD, goal=""), "goal", "must not be empty", id="empty goal"),
        pytest.param(dataclasses.replace(GOOD, tasks=()), "tasks", "a Change needs at least one Task", id="no tasks"),
        pytest.param(replace_tasks(t("a"), t("b"), t("a")), "tasks[2].key", "duplicate key 'a'", id="duplicate key"),
        pytest.param(replace_tasks(t("a"), t("")), "tasks[1].key", "must not be empty", id="empty key"),
        pytest.param(
            replace_tasks(t("a"), t("b", objective=" ")),
            "tasks[1].objective",
            "must not be empty",
            id="empty objective",
        ),
        pytest.param(replace_tasks(t("a", kind="")), "tasks[0].kind", "must not be empty", id="empty kind"),
        pytest.param(
            replace_tasks(t("a"), t("b", "nope")), "tasks[1].depends_on", "unknown Task 'nope'", id="unknown dependency"
        ),
        pytest.param(
            replace_tasks(t("a"), t("b", "b")),
            "tasks[1].depends_on",
            "Task 'b' depends on itself",
            id="self-dependency",
        ),
        pytest.param(
            replace_tasks(t("root"), t("x", "z"), t("y", "x"), t("z", "y")),
            "tasks[1].depends_on",
            "cycle x -> z -> y -> x",
            id="3-cycle",
        ),
        pytest.param(
            replace_tasks(dataclasses.replace(t("a"), traits={"runtime": "codex"})),
            "tasks[0].runtime",
            "must be one of harness, claude-code, opencode",
            id="unknown runtime",
        ),
        pytest.param(
            replace_tasks(dataclasses.replace(t("a"), command=("true",), traits={"runtime": "claude-code"})),
            "tasks[0].runtime",
            "a Task with a command runs on the command driver; leave runtime out",
            id="runtime with a command",
        ),
    ],
)
def test_validate_names_the_first_bad_field(spec: ChangeSpec, field: str, message: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        graph.validate(spec)
    assert caught.value.field == field
    assert str(caught.value) == f"{field}: {message}"


@pytest.mark.parametrize(
    "deps, cycle",
    [
        pytest.param({}, [], id="empty"),
        pytest.param({"a": [], "b": ["a"], "c": ["a", "b"]}, [], id="DAG"),
        pytest.param({"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]}, [], id="diamond"),
        pytest.param({"a": ["a"]}, ["a", "a"], id="self loop"),
        pytest.param({"a": ["b"], "b": ["a"]}, ["a", "b", "a"], id="2-cycle"),
        pytest.param({"a": ["b"], "b": ["c"], "c": ["a"]}, ["a", "b", "c", "a"], id="3-cycle"),
        pytest.param(
            {"r": [], "a": ["r", "b"], "b": ["c"], "c": ["b"]}, ["b", "c", "b"], id="cycle below an acyclic root"
        ),
    ],
)
def test_find_cycle(deps: dict[str, list[str]], cycle: list[str]) -> None:
    assert graph.find_cycle(deps) == cycle


DEPS = {"a": [], "b": ["a"], "c": ["a", "b"], "d": []}


@pytest.mark.parametrize(
    "statuses, ready",
    [
        pytest.param({"a": "pending", "b": "pending", "c": "pending", "d": "pending"}, ["a", "d"], id="roots"),
        pytest.param(
            {"a": "succeeded", "b": "pending", "c": "pending", "d": "running"},
            ["b"],
            id="one of two dependencies succeeded",
        ),
        pytest.param(
            {"a": "succeeded", "b": "succeeded", "c": "pending", "d": "ready"}, ["c"], id="all dependencies succeeded"
        ),
        pytest.param({"a": "failed", "b": "pending", "c": "pending", "d": "succeeded"}, [], id="dependency failed"),
        pytest.param(
            {"a": "running", "b": "pending", "c": "pending", "d": "ready"}, [], id="only pending tasks become ready"
        ),
    ],
)
def test_ready_tasks(statuses: dict[str, str], ready: list[str]) -> None:
    assert graph.ready_tasks(statuses, DEPS) == ready


@pytest.mark.parametrize(
    "failed, statuses, blocked",
    [
        pytest.param(
            "a", {"a": "failed", "b": "pending", "c": "pending", "d": "pending"}, ["b", "c"], id="direct and transitive"
        ),
        pytest.param(
            "b", {"a": "succeeded", "b": "failed", "c": "pending", "d": "pending"}, ["c"], id="only dependents"
        ),
        pytest.param("d", {"a": "pending", "b": "pending", "c": "pending", "d": "failed"}, [], id="no dependents"),
        pytest.param(
            "a",
            {"a": "failed", "b": "succeeded", "c": "running", "d": "pending"},
            [],
            id="dependents no longer pending",
        ),
    ],
)
def test_dependents_to_block(failed: str, statuses: dict[str, str], blocked: list[str]) -> None:
    assert sorted(graph.dependents_to_block(failed, statuses, DEPS)) == blocked


def test_dependents_to_block_follows_a_long_chain() -> None:
    deps = {"t0": [], **{f"t{i}": [f"t{i - 1}"] for i in range(1, 6)}}
    statuses = dict.fromkeys(deps, "pending") | {"t0": "failed"}
    assert graph.dependents_to_block("t0", statuses, deps) == ["t1", "t2", "t3", "t4", "t5"]


@pytest.mark.parametrize(
    "statuses, cancel_requested, started, status",
    [
        pytest.param(["succeeded", "succeeded"], False, True, "succeeded", id="all succeeded"),
        pytest.param(["pending", "ready"], False, False, "open", id="nothing started"),
        pytest.param(["succeeded", "ready"], False, True, "running", id="started, work left"),
        pytest.param(["succeeded", "failed", "blocked"], False, True, "failed", id="ended with a failure"),
        pytest.param(["succeeded", "cancelled"], True, True, "cancelled", id="ended after a cancel"),
        pytest.param(["cancelled", "running"], True, True, "running", id="cancel still winding down"),
    ],
)
def test_change_status(statuses: list[str], cancel_requested: bool, started: bool, status: str) -> None:
    assert graph.change_status(statuses, cancel_requested=cancel_requested, started=started) == status


@pytest.mark.parametrize(
    "command, traits, driver",
    [
        ((), {}, "harness"),
        ((), {"runtime": "claude-code"}, "claude-code"),
        ((), {"runtime": "opencode"}, "opencode"),
        (("make",), {}, "command"),
    ],
)
def test_the_driver_of_a_task_is_its_command_or_its_runtime(command, traits, driver) -> None:
    assert graph.driver(command, traits) == driver


DIAMOND = {"a": ["r"], "b": ["r"], "d": ["a", "b"], "e": ["a"]}
"""The dependents of Tasks in a diamond r -> a, b -> d (and e after a alone)."""


@pytest.mark.parametrize(
    "finished, statuses, ready",
    [
        pytest.param("r", {"r": "succeeded", "a": "pending", "b": "pending"}, ["a", "b"], id="the root fans out"),
        pytest.param(
            "a", {"a": "succeeded", "b": "running", "d": "pending", "e": "pending"}, ["e"], id="d waits for b"
        ),
        pytest.param(
            "b", {"a": "succeeded", "b": "succeeded", "d": "pending"}, ["d"], id="the last dependency of the join"
        ),
        pytest.param("b", {"a": "failed", "b": "succeeded", "d": "pending"}, [], id="a dependency failed"),
        pytest.param("b", {"a": "succeeded", "b": "succeeded", "d": "blocked"}, [], id="a dependent not pending"),
        pytest.param("a", {"a": "succeeded", "e": "ready"}, [], id="already ready"),
        pytest.param("b", {"b": "succeeded", "d": "pending"}, [], id="a dependency's status unknown"),
    ],
)
def test_newly_ready(finished: str, statuses: dict[str, str], ready: list[str]) -> None:
    dependents = {key: needs for key, needs in DIAMOND.items() if finished in needs and key in statuses}
    assert graph.newly_ready(dependents, statuses) == ready


@pytest.mark.parametrize(
    "finished, statuses",
    [
        pytest.param("r", {"r": "succeeded", "a": "pending", "b": "pending", "d": "pending", "e": "pending"}),
        pytest.param("a", {"r": "succeeded", "a": "succeeded", "b": "ready", "d": "pending", "e": "pending"}),
        pytest.param("b", {"r": "succeeded", "a": "succeeded", "b": "succeeded", "d": "pending", "e": "ready"}),
    ],
)
def test_newly_ready_finds_what_ready_tasks_finds_over_the_whole_change(
    finished: str, statuses: dict[str, str]
) -> None:
    deps = {"r": [], **DIAMOND}
    dependents = {key: needs for key, needs in deps.items() if finished in needs}
    assert graph.newly_ready(dependents, statuses) == graph.ready_tasks(statuses, deps)


@pytest.mark.parametrize(
    "tasks, counts, budget_stopped",
    [
        pytest.param([], {}, False, id="none"),
        pytest.param([("succeeded", ""), ("pending", ""), ("succeeded", "")], {"succeeded": 2, "pending": 1}, False),
        pytest.param([("blocked", "budget_stop: change")], {"blocked": 1}, True, id="budget stop"),
        pytest.param([("blocked", "dependency a failed")], {"blocked": 1}, False, id="blocked by a dependency"),
        pytest.param([("failed", "budget_stop: change")], {"failed": 1}, False, id="only a blocked Task counts"),
    ],
)
def test_tally(tasks: list[tuple[str, str]], counts: dict[str, int], budget_stopped: bool) -> None:
    assert graph.tally(tasks) == graph.Tally(counts, budget_stopped)


@pytest.mark.parametrize(
    "counts, now, started",
    [
        pytest.param({"pending": 3}, "open", False, id="nothing ran"),
        pytest.param({"pending": 2, "ready": 1}, "open", False, id="ready is not started"),
        pytest.param({"pending": 2, "running": 1}, "open", True, id="one runs"),
        pytest.param({"pending": 2, "succeeded": 1}, "open", True, id="one succeeded"),
        pytest.param({"pending": 2, "failed": 1}, "open", True, id="one failed"),
        pytest.param({"pending": 2, "running": 0}, "open", False, id="a zero count"),
        pytest.param({"ready": 3}, "running", True, id="the Change runs already"),
    ],
)
def test_started(counts: dict[str, int], now: str, started: bool) -> None:
    assert graph.started(counts, now) is started


@pytest.mark.parametrize(
    "counts, budget_stopped, now, cancel_requested, status",
    [
        pytest.param({"succeeded": 3}, False, "running", False, "succeeded", id="all succeeded"),
        pytest.param({"succeeded": 1, "ready": 2}, False, "running", False, "running", id="runs"),
        pytest.param({"ready": 2}, False, "open", False, "open", id="open"),
        pytest.param({"succeeded": 1, "failed": 1, "blocked": 1}, False, "running", False, "failed", id="failed"),
        pytest.param({"succeeded": 1, "blocked": 1}, True, "running", False, "budget_blocked", id="budget"),
        pytest.param({"cancelled": 2}, True, "running", True, "cancelled", id="cancelled"),
        pytest.param({"succeeded": 1, "failed": 0}, False, "running", False, "succeeded", id="a zero count"),
    ],
)
def test_settled_status(
    counts: dict[str, int], budget_stopped: bool, now: str, cancel_requested: bool, status: str
) -> None:
    assert graph.settled_status(graph.Tally(counts, budget_stopped), now, cancel_requested=cancel_requested) == status
