"""Pure decisions over a Change's Task graph: validation, readiness, blocking, Change status."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from controlplane.domain import preparation
from drover.core import commands
from drover.errors import InvalidArgument

MAX_TASKS = 500
MAX_TEXT = 64 * 1024
TERMINAL_TASK = frozenset({"succeeded", "failed", "blocked", "cancelled"})
TERMINAL_CHANGE = frozenset({"succeeded", "failed", "cancelled", "budget_blocked"})


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    key: str
    kind: str
    objective: str
    depends_on: tuple[str, ...] = ()
    command: tuple[str, ...] = ()
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    timeout_seconds: int = 0
    traits: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """Routing inputs: files, resources, size, complexity, risk, required_capabilities, flags."""
    workspace_files: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """A command Task's files (path -> content), written into the workspace before it runs."""
    workdir: str = ""
    """Where a command Task runs, relative to the repository; "": its root."""


SIZES = ("", "small", "medium", "large")
LEVELS = ("", "low", "medium", "high")
FLAGS = frozenset({"destructive_migration", "billing", "authorization", "authorization_trivial", "design_conflict"})
RUNTIMES = ("harness", "claude-code", "opencode")
"""What works a Task without a command (seed 003 "Agent runs"); harness is Drover's own loop."""


@dataclasses.dataclass(frozen=True)
class ChangeSpec:
    project: str
    goal: str
    tasks: tuple[TaskSpec, ...]
    criteria: tuple[str, ...] = ()
    invariants: tuple[str, ...] = ()
    budget_usd: float = 0.0
    base_branch: str = ""
    """The branch the Change starts from ("": the project's)."""


def validate(change: ChangeSpec) -> None:
    """Raise InvalidArgument naming the first bad field; return when the Change can be stored."""
    if not change.project.strip():
        raise InvalidArgument("must name a project", field="project")
    if not change.goal.strip():
        raise InvalidArgument("must not be empty", field="goal")
    if len(change.goal) > MAX_TEXT:
        raise InvalidArgument(f"longer than {MAX_TEXT} characters", field="goal")
    if change.budget_usd < 0:
        raise InvalidArgument("must not be negative", field="budget_usd")
    if not change.tasks:
        raise InvalidArgument("a Change needs at least one Task", field="tasks")
    if len(change.tasks) > MAX_TASKS:
        raise InvalidArgument(f"at most {MAX_TASKS} Tasks", field="tasks")
    seen: set[str] = set()
    for i, task in enumerate(change.tasks):
        where = f"tasks[{i}]"
        if not task.key.strip():
            raise InvalidArgument("must not be empty", field=f"{where}.key")
        if task.key in seen:
            raise InvalidArgument(f"duplicate key {task.key!r}", field=f"{where}.key")
        seen.add(task.key)
        if not task.kind.strip():
            raise InvalidArgument("must not be empty", field=f"{where}.kind")
        if not task.objective.strip():
            raise InvalidArgument("must not be empty", field=f"{where}.objective")
        if len(task.objective) > MAX_TEXT:
            raise InvalidArgument(f"longer than {MAX_TEXT} characters", field=f"{where}.objective")
        if task.command and (refused := commands.refusal(task.command, task.env, argv_field="command")):
            # The rule agentd starts a command by: accepted here, it never fails to start for it.
            raise InvalidArgument(refused.reason, field=f"{where}.{refused.field}")
        if task.timeout_seconds < 0:
            raise InvalidArgument("must not be negative", field=f"{where}.timeout_seconds")
        if task.command and task.traits.get("runtime"):
            raise InvalidArgument(
                "a Task with a command runs on the command driver; leave runtime out", field=f"{where}.runtime"
            )
        _check_traits(task.traits, where)
        preparation.check_workspace_files(task.workspace_files, task.workdir, bool(task.command), where)
    keys = {t.key for t in change.tasks}
    for i, task in enumerate(change.tasks):
        for dep in task.depends_on:
            if dep not in keys:
                raise InvalidArgument(f"unknown Task {dep!r}", field=f"tasks[{i}].depends_on")
            if dep == task.key:
                raise InvalidArgument(f"Task {dep!r} depends on itself", field=f"tasks[{i}].depends_on")
    cycle = find_cycle({t.key: t.depends_on for t in change.tasks})
    if cycle:
        i = next(i for i, t in enumerate(change.tasks) if t.key == cycle[0])
        raise InvalidArgument("cycle " + " -> ".join(cycle), field=f"tasks[{i}].depends_on")


def _check_traits(traits: Mapping[str, Any], where: str) -> None:
    if traits.get("runtime", "harness") not in RUNTIMES:
        raise InvalidArgument(f"must be one of {', '.join(RUNTIMES)}", field=f"{where}.runtime")
    if traits.get("size", "") not in SIZES:
        raise InvalidArgument(f"must be one of {', '.join(s for s in SIZES if s)}", field=f"{where}.size")
    for name in ("complexity", "risk"):
        if traits.get(name, "") not in LEVELS:
            raise InvalidArgument(f"must be one of {', '.join(s for s in LEVELS if s)}", field=f"{where}.{name}")
    unknown = set(traits.get("flags", {})) - FLAGS
    if unknown:
        raise InvalidArgument(
            f"unknown flags {sorted(unknown)}; known: {', '.join(sorted(FLAGS))}", field=f"{where}.flags"
        )


def find_cycle(deps: Mapping[str, Sequence[str]]) -> list[str]:
    """A dependency cycle as a list of keys (first key repeated at the end), or []."""
    state: dict[str, int] = {}  # 1 visiting, 2 done
    for root in deps:
        if state.get(root):
            continue
        stack: list[tuple[str, Iterator[str]]] = [(root, iter(deps[root]))]
        path = [root]
        state[root] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[node] = 2
                stack.pop()
                path.pop()
            elif state.get(child) == 1:
                return path[path.index(child) :] + [child]
            elif not state.get(child):
                state[child] = 1
                stack.append((child, iter(deps[child])))
                path.append(child)
    return []


def driver(command: Sequence[str], traits: Mapping[str, Any]) -> str:
    """What runs a Task: the command driver, else its runtime (harness by default)."""
    return "command" if command else str(traits.get("runtime") or "harness")


def ready_tasks(statuses: Mapping[str, str], deps: Mapping[str, Sequence[str]]) -> list[str]:
    """Pending Tasks whose dependencies all succeeded, in the order of `deps`."""
    return [
        key
        for key, status in statuses.items()
        if status == "pending" and all(statuses[d] == "succeeded" for d in deps[key])
    ]


def newly_ready(dependents: Mapping[str, Sequence[str]], statuses: Mapping[str, str]) -> list[str]:
    """Of a finished Task's dependents (key -> its dependencies, in submission order), the pending ones
    whose dependencies all succeeded. `statuses` holds the dependents and their dependencies; when only
    the finished Task changed, this is what `ready_tasks` finds over the whole Change."""
    return [
        key
        for key, needs in dependents.items()
        if statuses.get(key) == "pending" and all(statuses.get(d) == "succeeded" for d in needs)
    ]


@dataclasses.dataclass(frozen=True)
class Tally:
    """A Change's Tasks counted by status, and whether a budget stop blocked one of them: all that
    settling the Change's status reads of its Tasks."""

    counts: Mapping[str, int]
    budget_stopped: bool = False


def tally(tasks: Iterable[tuple[str, str]]) -> Tally:
    """The Tally of (status, reason) pairs."""
    counts: dict[str, int] = {}
    budget_stopped = False
    for status, reason in tasks:
        counts[status] = counts.get(status, 0) + 1
        budget_stopped = budget_stopped or (status == "blocked" and reason.startswith("budget_stop"))
    return Tally(counts, budget_stopped)


def started(counts: Mapping[str, int], change_status_now: str) -> bool:
    """Whether the Change has started: it runs already, or one of its Tasks ran."""
    return change_status_now == "running" or any(counts.get(s, 0) > 0 for s in ("running", "succeeded", "failed"))


def settled_status(tasks: Tally, change_status_now: str, *, cancel_requested: bool) -> str:
    """The status the Change's Tasks give it (`change_status`); a Change failed only because a budget
    stopped one of its Tasks is budget_blocked: a person raises the budget (or cancels), and it goes on."""
    present = [s for s, n in tasks.counts.items() if n > 0]
    status = change_status(present, cancel_requested=cancel_requested, started=started(tasks.counts, change_status_now))
    return "budget_blocked" if status == "failed" and tasks.budget_stopped else status


def ancestors(key: str, deps: Mapping[str, Sequence[str]]) -> set[str]:
    """Every Task `key` depends on, however far."""
    found: set[str] = set()
    todo = list(deps.get(key, ()))
    while todo:
        current = todo.pop()
        if current not in found:
            found.add(current)
            todo.extend(deps.get(current, ()))
    return found


def dependents_to_block(failed: str, statuses: Mapping[str, str], deps: Mapping[str, Sequence[str]]) -> list[str]:
    """Pending Tasks that can no longer run because `failed` will not succeed: those that depend on
    it, however far, through pending Tasks; in the order of `deps`."""
    pending = {key: needs for key, needs in deps.items() if statuses[key] == "pending"}
    return [key for key in pending if failed in ancestors(key, pending | {failed: ()})]


def change_status(statuses: Iterable[str], *, cancel_requested: bool, started: bool) -> str:
    """The Change's status, following its Tasks."""
    values = list(statuses)
    if all(s == "succeeded" for s in values):
        return "succeeded"
    if any(s not in TERMINAL_TASK for s in values):
        return "running" if started else "open"
    return "cancelled" if cancel_requested else "failed"


def depth(deps: Mapping[str, Sequence[str]]) -> dict[str, int]:
    """Each Task's topological level: 0 without dependencies, else 1 + its deepest dependency."""
    levels: dict[str, int] = {}

    def level(key: str) -> int:
        if key not in levels:
            levels[key] = 1 + max((level(d) for d in deps[key]), default=-1)
        return levels[key]

    for key in deps:
        level(key)
    return levels


def stack_order(
    keys: Iterable[str], deps: Mapping[str, Sequence[str]], tie: Mapping[str, tuple[str, str]]
) -> list[str]:
    """Dependency ChangeSets in merge order: topological (dependencies first), then the tie-break
    (ChangeSet creation time, then Task id) for Tasks at the same level."""
    levels = depth(deps)
    return sorted(keys, key=lambda k: (levels[k], *tie[k]))
