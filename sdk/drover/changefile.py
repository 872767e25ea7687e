"""Change files (YAML or JSON): project, goal, criteria, invariants, budget_usd and tasks.

A command Task's `files` may be a mapping of path to content (written into the workspace before the
command runs, after the project's setup) and its `workdir` a directory relative to the repository; a
list of paths under `files` is what the Task touches (routing).

`load` checks the file's shape and value types before anything is sent, and says where a problem is
as `file:line: field: what is wrong` (a string where a list belongs is an error, never a list of its
characters). The control plane checks the values again; this only makes a typo cheap to find.

An amendment file (`drover amend`, `load_amendment`) holds `tasks:` in the same format and `edges:`, a
list of `{task: KEY, depends_on: KEY}` that give Tasks of the Change, new or pending, more dependencies.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Callable
from typing import Any

import yaml

from drover.core import commands
from drover.errors import InvalidArgument

CHANGE_KEYS = {"project", "goal", "criteria", "invariants", "budget_usd", "tasks"}
AMENDMENT_KEYS = {"tasks", "edges"}
EDGE_KEYS = {"task", "depends_on"}
TASK_KEYS = {
    "key",
    "kind",
    "objective",
    "depends_on",
    "command",
    "env",
    "timeout_seconds",
    "files",
    "resources",
    "size",
    "complexity",
    "risk",
    "required_capabilities",
    "flags",
    "runtime",
    "workdir",
}
Check = Callable[[Any], str]
"""Answers "" when the value is fine, else what is wrong with it."""


def _string(value: Any) -> str:
    return "" if isinstance(value, str) else f"expected a string, not {_kind(value)}"


def _number(value: Any) -> str:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return "" if ok else f"expected a number, not {_kind(value)}"


def _integer(value: Any) -> str:
    ok = isinstance(value, int) and not isinstance(value, bool)
    return "" if ok else f"expected a whole number, not {_kind(value)}"


def _strings(value: Any) -> str:
    if isinstance(value, str):
        return "expected a list of strings, not a string"
    if not isinstance(value, list):
        return f"expected a list of strings, not {_kind(value)}"
    bad = next((v for v in value if not isinstance(v, str)), None)
    return "" if bad is None else f"expected a list of strings; one item is {_kind(bad)}"


def _argv(value: Any) -> str:
    if isinstance(value, str):
        return "an argv list, not a shell string"
    if not isinstance(value, list):
        return f"expected an argv list, not {_kind(value)}"
    bad = next((v for v in value if not isinstance(v, (str, int, float)) or isinstance(v, bool)), None)
    return "" if bad is None else f"expected an argv list of strings; one item is {_kind(bad)}"


def _env(value: Any) -> str:
    if not isinstance(value, dict):
        return f"expected a mapping of names to values, not {_kind(value)}"
    for k, v in value.items():
        if not isinstance(k, str):
            return f"a name must be a string, not {_kind(k)}"
        if not isinstance(v, (str, int, float)) or isinstance(v, bool):
            return f"{k}: expected a string or a number, not {_kind(v)}"
    return ""


def _files(value: Any) -> str:
    """A list of paths (routing), or a command Task's files: a mapping of path to content."""
    if not isinstance(value, dict):
        return _strings(value)
    bad = next((k for k, v in value.items() if not isinstance(k, str) or not isinstance(v, str)), None)
    return "" if bad is None else f"{bad}: expected a path mapped to its content (a string)"


def _flags(value: Any) -> str:
    if not isinstance(value, dict):
        return f"expected a mapping of flags to true/false, not {_kind(value)}"
    bad = next((k for k, v in value.items() if not isinstance(k, str) or not isinstance(v, bool)), None)
    return "" if bad is None else f"{bad}: expected true or false"


CHANGE: dict[str, Check] = {
    "project": _string,
    "goal": _string,
    "criteria": _strings,
    "invariants": _strings,
    "budget_usd": _number,
}
TASK: dict[str, Check] = {
    "key": _string,
    "kind": _string,
    "objective": _string,
    "depends_on": _strings,
    "command": _argv,
    "env": _env,
    "timeout_seconds": _integer,
    "files": _files,
    "resources": _strings,
    "size": _string,
    "complexity": _string,
    "risk": _string,
    "required_capabilities": _strings,
    "flags": _flags,
    "runtime": _string,
    "workdir": _string,
}


def load_amendment(path: str | pathlib.Path) -> dict[str, Any]:
    """Read and check an amendment file (tasks and edges); raises InvalidArgument as `load` does."""
    return load(path, amendment=True)


def load(path: str | pathlib.Path, *, amendment: bool = False) -> dict[str, Any]:
    """Read and check a Change file; raises InvalidArgument with `file:line: field: problem`."""
    try:
        text = pathlib.Path(path).read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise InvalidArgument(f"{path}: cannot read the Change file: {err}") from None
    return parse(text, str(path), amendment=amendment, is_json=str(path).endswith(".json"))


def parse(text: str, path: str, *, amendment: bool = False, is_json: bool = False) -> dict[str, Any]:
    """Check the text of a Change or amendment file; `path` names it in the messages."""
    try:
        data = json.loads(text) if is_json else yaml.safe_load(text)
    except json.JSONDecodeError as err:
        raise InvalidArgument(f"{path}:{err.lineno}:{err.colno}: not JSON: {err.msg}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise InvalidArgument(f"{where}: not YAML: {getattr(err, 'problem', None) or err}") from None
    try:  # the same text as nodes, for line numbers (JSON is YAML too, nearly always)
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        node = None
    _check(data, node, path, AMENDMENT_KEYS if amendment else CHANGE_KEYS)
    return data


def _check(data: Any, node: Any, path: str, known: set[str]) -> None:
    def fail(where: tuple[Any, ...], message: str) -> None:
        line = _line(node, where)
        name = _name(where)
        raise InvalidArgument(f"{path}{f':{line}' if line else ''}: {name + ': ' if name else ''}{message}")

    if not isinstance(data, dict):
        shape = "an amendment file is a mapping with tasks and edges"
        fail((), shape if known == AMENDMENT_KEYS else "a Change file is a mapping with project, goal and tasks")
    for key in data:
        if key not in known:
            fail((key,), f"unknown key; known: {', '.join(sorted(known))}")
    edges = data.get("edges")
    if edges is not None and not isinstance(edges, list):
        fail(("edges",), f"expected a list of edges, not {_kind(edges)}")
    for i, edge in enumerate(edges or []):
        if not isinstance(edge, dict) or set(edge) != EDGE_KEYS:
            fail(("edges", i), "an edge is a mapping of task and depends_on (Task keys)")
        for key in sorted(EDGE_KEYS):
            if problem := _string(edge[key]):
                fail(("edges", i, key), problem)
    for key, check in CHANGE.items():
        if data.get(key) is not None and (problem := check(data[key])):
            fail((key,), problem)
    tasks = data.get("tasks")
    if tasks is None:
        return
    if not isinstance(tasks, list):
        fail(("tasks",), f"expected a list of Tasks, not {_kind(tasks)}")
    for i, task in enumerate(tasks):
        if not isinstance(task, dict):
            fail(("tasks", i), f"a Task is a mapping (key, kind, objective, ...), not {_kind(task)}")
        for key in task:
            if key not in TASK_KEYS:
                fail(("tasks", i, key), f"unknown key; known: {', '.join(sorted(TASK_KEYS))}")
        for key, check in TASK.items():
            if task.get(key) is not None and (problem := check(task[key])):
                fail(("tasks", i, key), problem)
        if task.get("command"):  # what agentd could not start is refused here, as at submit
            env = {str(k): str(v) for k, v in (task.get("env") or {}).items()}
            refused = commands.refusal([str(a) for a in task["command"]], env, argv_field="command")
            if refused is not None:
                fail(("tasks", i, *refused.path), refused.reason)


def _name(where: tuple[Any, ...]) -> str:
    out = ""
    for part in where:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _line(node: Any, where: tuple[Any, ...]) -> int:
    """The 1-based line of the value at `where` (or of the deepest part of it found), 0 when unknown."""
    if node is None:
        return 0
    line = node.start_mark.line + 1
    for part in where:
        if isinstance(node, yaml.MappingNode):
            pair = next(((k, v) for k, v in node.value if getattr(k, "value", None) == part), None)
            if pair is None:
                return line
            key, found = pair
            line = (found if found.start_mark.line >= key.start_mark.line else key).start_mark.line + 1
            node = found
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    return {
        bool: "true/false",
        int: "a number",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a mapping",
    }.get(type(value), type(value).__name__)
