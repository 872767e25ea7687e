"""The Task tools the model is offered (seed 000): their names, descriptions and input schemas, and
the limits the descriptions state. agentd runs them (agentd/drivers/harness/tools.py); the control plane
lists them in each run's Context Packet."""

from __future__ import annotations

from typing import Any

MAX_READS = 12
COMMAND_OUTPUT = 12_000
COMMAND_SECONDS = 180.0


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


STR = {"type": "string"}
STRS = {"type": "array", "items": {"type": "string"}}
DEFINITIONS: dict[str, dict[str, Any]] = {
    "list_files": {
        "description": "List the files of the repository (paths relative to its root).",
        "input_schema": _schema({}, []),
    },
    "read_file": {
        "description": "Read a file: at most 40,000 characters from from_line (default 1), cut at a "
        "line boundary; a longer file ends with a note naming the next line. "
        f"At most {MAX_READS} reads per run.",
        "input_schema": _schema({"path": STR, "from_line": {"type": "integer", "minimum": 1}}, ["path"]),
    },
    "write_file": {
        "description": "Create or replace a whole file.",
        "input_schema": _schema({"path": STR, "content": STR}, ["path", "content"]),
    },
    "edit_file": {
        "description": "Change a file with exact text edits: each old_text must occur exactly once, "
        "edits in the order they appear in the file; all or nothing.",
        "input_schema": _schema(
            {
                "path": STR,
                "edits": {
                    "type": "array",
                    "items": _schema({"old_text": STR, "new_text": STR}, ["old_text", "new_text"]),
                },
            },
            ["path", "edits"],
        ),
    },
    "delete_file": {"description": "Delete a file.", "input_schema": _schema({"path": STR}, ["path"])},
    "run_command": {
        "description": "Run an allowed command (no shell) in the workspace sandbox; output is cut at "
        f"{COMMAND_OUTPUT:,} characters, {COMMAND_SECONDS:.0f} s at most.",
        "input_schema": _schema({"command": STR}, ["command"]),
    },
    "complete_task": {
        "description": "Finish the Task successfully with your intent: what you did and why.",
        "input_schema": _schema(
            {"summary": STR, "files_changed": STRS, "tests_run": STRS, "follow_ups": STRS}, ["summary"]
        ),
    },
    "fail_task": {
        "description": "Give up on the Task, saying why.",
        "input_schema": _schema({"reason": STR}, ["reason"]),
    },
}
TERMINAL = ("complete_task", "fail_task")
