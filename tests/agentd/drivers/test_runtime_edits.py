"""Which paths a runtime's tool_use events ask its edit tools to write (kept in a ChangeSet even
where they look like build outputs)."""

from __future__ import annotations

import pathlib

import pytest

from agentd.drivers.runtimes import edited_path

ROOT = pathlib.Path("/spool/runs/r1/ws/repo")


@pytest.mark.parametrize(
    ("event", "path"),
    [
        ({"kind": "tool_use", "tool": "Write", "input": {"file_path": f"{ROOT}/dist/NOTES.md"}}, "dist/NOTES.md"),
        ({"kind": "tool_use", "tool": "Edit", "input": {"file_path": f"{ROOT}/calc.py"}}, "calc.py"),
        ({"kind": "tool_use", "tool": "MultiEdit", "input": {"file_path": "build/x.txt"}}, "build/x.txt"),
        ({"kind": "tool_use", "tool": "NotebookEdit", "input": {"notebook_path": f"{ROOT}/a.ipynb"}}, "a.ipynb"),
        ({"kind": "tool_use", "tool": "write", "input": {"filePath": f"{ROOT}/./out//a.js"}}, "out/a.js"),  # opencode
        ({"kind": "tool_use", "tool": "Bash", "input": {"command": "python -c 'import calc'"}}, ""),
        ({"kind": "tool_use", "tool": "Write", "input": {"file_path": "/etc/passwd"}}, ""),  # outside the workspace
        ({"kind": "tool_use", "tool": "Write", "input": {"file_path": f"{ROOT}/../home/x"}}, ""),
        ({"kind": "tool_use", "tool": "Write", "input": {"file_path": 7}}, ""),
        ({"kind": "tool_use", "tool": "Write", "input": {}}, ""),
        ({"kind": "tool_result", "tool": "Write", "input": {"file_path": f"{ROOT}/a"}}, ""),
    ],
)
def test_edited_path(event: dict, path: str) -> None:
    assert edited_path(event, ROOT) == path
