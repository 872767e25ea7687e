"""Change files (YAML or JSON): project, goal, criteria, budget_usd and tasks."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import yaml

from drover.errors import InvalidArgument

CHANGE_KEYS = {"project", "goal", "criteria", "invariants", "budget_usd", "tasks"}
TASK_KEYS = {"key", "kind", "objective", "depends_on", "command", "env", "timeout_seconds", "files", "resources",
             "size", "complexity", "risk", "required_capabilities", "flags"}


def load(path: str | pathlib.Path) -> dict[str, Any]:
    """Read a Change file; unknown keys are errors, so a typo is not silently ignored."""
    text = pathlib.Path(path).read_text()
    data = json.loads(text) if str(path).endswith(".json") else yaml.safe_load(text)
    if not isinstance(data, dict):
        raise InvalidArgument(f"{path}: a Change file is a mapping with project, goal and tasks")
    unknown = set(data) - CHANGE_KEYS
    if unknown:
        raise InvalidArgument(f"{path}: unknown keys {sorted(unknown)}")
    for i, task in enumerate(data.get("tasks") or []):
        if not isinstance(task, dict):
            raise InvalidArgument(f"{path}: tasks[{i}] must be a mapping")
        bad = set(task) - TASK_KEYS
        if bad:
            raise InvalidArgument(f"{path}: tasks[{i}]: unknown keys {sorted(bad)}")
        if isinstance(task.get("command"), str):
            raise InvalidArgument(f"{path}: tasks[{i}].command: an argv list, not a shell string")
    return data
