"""A Task given as a dict (a Change file's, or `Client.submit_change`'s) as its drover.v1.Task message:
list fields must be lists, and a mistake is refused naming `tasks[i].field` before anything is sent."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drover.errors import InvalidArgument
from drover.v1 import types_pb2


def _list(spec: Mapping[str, Any], name: str, where: str) -> list[str]:
    """A list field of a Task; a lone string is refused, never taken as a list of its characters."""
    value = spec.get(name) or []
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise InvalidArgument(f"{where}.{name}: expected a list of strings, not {type(value).__name__}")
    return [str(v) for v in value]


def task_message(spec: Mapping[str, Any], i: int = 0) -> types_pb2.Task:
    """A Task as `submit_change` and `amend_change` take it (a dict), as its message; the i-th of the list."""
    where = f"tasks[{i}]"
    if not isinstance(spec, Mapping):
        raise InvalidArgument(f"{where}: a Task is a mapping, not {type(spec).__name__}")
    try:
        timeout = int(spec.get("timeout_seconds") or 0)
    except (TypeError, ValueError):
        raise InvalidArgument(f"{where}.timeout_seconds: expected a whole number") from None
    return types_pb2.Task(
        key=str(spec.get("key", "")),
        kind=str(spec.get("kind", "")),
        objective=str(spec.get("objective", "")),
        depends_on=_list(spec, "depends_on", where),
        command=_list(spec, "command", where),
        env={str(k): str(v) for k, v in (spec.get("env") or {}).items()},
        timeout_seconds=timeout,
        files=[] if isinstance(spec.get("files"), Mapping) else _list(spec, "files", where),
        resources=_list(spec, "resources", where),
        size=str(spec.get("size") or ""),
        complexity=str(spec.get("complexity") or ""),
        risk=str(spec.get("risk") or ""),
        required_capabilities=_list(spec, "required_capabilities", where),
        flags={str(k): bool(v) for k, v in (spec.get("flags") or {}).items()},
        runtime=str(spec.get("runtime") or ""),
        workspace_files=_workspace_files(spec, where),
        workdir=str(spec.get("workdir") or ""),
    )


def _workspace_files(spec: Mapping[str, Any], where: str) -> dict[str, str]:
    """A command Task's files: `workspace_files`, or `files` given as a mapping of path to content (a
    list of paths under `files` is the Task's routing files)."""
    files = spec.get("workspace_files") or (spec.get("files") if isinstance(spec.get("files"), Mapping) else None)
    if files is None:
        return {}
    if not isinstance(files, Mapping):
        raise InvalidArgument(f"{where}.workspace_files: expected a mapping of path to content")
    return {str(path): str(content) for path, content in files.items()}
