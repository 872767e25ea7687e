"""sdk/drover/changefile.py: a Change file's shape and types, with file:line messages."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

import drover
from drover import changefile

GOOD = "project: web\ngoal: g\ntasks:\n  - key: a\n    kind: test\n    objective: o\n    command: [make]\n"


@pytest.mark.parametrize(
    "name, text, message",
    [
        ("c.yaml", "project: [web\n", "c.yaml:2:1: not YAML"),
        ("c.json", '{"project": "web",\n "goal": }', "c.json:2:10: not JSON"),
        ("c.yaml", "- a\n- b\n", "c.yaml:1: a Change file is a mapping"),
        ("c.yaml", "project: web\nprojet: x\n", "c.yaml:2: projet: unknown key"),
        ("c.yaml", "project: web\nbudget_usd: lots\n", "c.yaml:2: budget_usd: expected a number, not a string"),
        ("c.yaml", "project: web\nbudget_usd: true\n", "c.yaml:2: budget_usd: expected a number, not true/false"),
        ("c.yaml", "project: 7\n", "c.yaml:1: project: expected a string, not a number"),
        (
            "c.yaml",
            "project: web\ncriteria: all good\n",
            "c.yaml:2: criteria: expected a list of strings, not a string",
        ),
        ("c.yaml", "project: web\ntasks: {a: 1}\n", "c.yaml:2: tasks: expected a list of Tasks, not a mapping"),
        ("c.yaml", "project: web\ntasks:\n  - just a string\n", "c.yaml:3: tasks[0]: a Task is a mapping"),
        (
            "c.yaml",
            GOOD + '    files: "../../"\n',
            "c.yaml:8: tasks[0].files: expected a list of strings, not a string",
        ),
        ("c.yaml", GOOD + "    timeout_seconds: soon\n", "c.yaml:8: tasks[0].timeout_seconds: expected a whole number"),
        (
            "c.yaml",
            GOOD.replace("command: [make]", "command: make test"),
            "c.yaml:7: tasks[0].command: an argv list, not a shell string",
        ),
        (
            "c.yaml",
            GOOD + "    env: {A: [1, 2]}\n",
            "c.yaml:8: tasks[0].env: A: expected a string or a number, not a list",
        ),
        (
            "c.yaml",
            GOOD + "    flags: {billing: yes please}\n",
            "c.yaml:8: tasks[0].flags: billing: expected true or false",
        ),
        ("c.yaml", GOOD + "    dependson: [b]\n", "c.yaml:8: tasks[0].dependson: unknown key"),
        (
            "c.yaml",
            GOOD.replace("command: [make]", "command: [A=b, make]"),
            "c.yaml:7: tasks[0].command[0]: a program name must not contain '='",
        ),
        (
            "c.yaml",
            GOOD + '    env: {"A=B": x}\n',
            "c.yaml:8: tasks[0].env.A=B: an environment variable name must not contain '=' or NUL",
        ),
        (
            "c.json",
            '{"project": "web", "tasks": [{"key": "a", "files": "x"}]}',
            "c.json:1: tasks[0].files: expected a list of strings, not a string",
        ),
        (
            "c.yaml",
            GOOD + "    files: {run.sh: [echo]}\n",
            "c.yaml:8: tasks[0].files: run.sh: expected a path mapped to its content",
        ),
        ("c.yaml", GOOD + "    workdir: [a]\n", "c.yaml:8: tasks[0].workdir: expected a string, not a list"),
    ],
)
def test_a_malformed_change_file_is_refused_with_where_and_what(
    tmp_path: pathlib.Path, name: str, text: str, message: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(drover.InvalidArgument) as caught:
        changefile.load(path)
    assert caught.value.message.startswith(f"{tmp_path}/"), caught.value.message
    assert message in caught.value.message, caught.value.message


def test_a_good_change_file_loads(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(GOOD + "    env: {N: 3}\n")
    data = changefile.load(path)
    assert data["tasks"][0]["command"] == ["make"] and data["tasks"][0]["env"] == {"N": 3}


@pytest.mark.parametrize("text", ["project: [web\n", "tasks: 3\n", "\x00\x01binary"])
def test_the_cli_never_prints_a_traceback(tmp_path: pathlib.Path, text: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    done = subprocess.run(
        [sys.executable, "-m", "drover.cli", "submit", str(path), "--target", "127.0.0.1:1"],
        capture_output=True,
        text=True,
        env={"DROVER_TOKEN": "x", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 2
    assert done.stderr.startswith("drover: ") and "Traceback" not in done.stderr, done.stderr
    assert str(path) in done.stderr


def test_a_command_tasks_files_and_workdir_load_and_go_on_the_wire(tmp_path: pathlib.Path) -> None:
    from drover.client import _task

    path = tmp_path / "c.yaml"
    path.write_text(GOOD + "    files:\n      tools/run.sh: |\n        echo hi\n    workdir: tools\n")
    spec = changefile.load(path)["tasks"][0]
    assert spec["files"] == {"tools/run.sh": "echo hi\n"} and spec["workdir"] == "tools"
    wire = _task(spec)
    assert dict(wire.workspace_files) == {"tools/run.sh": "echo hi\n"} and wire.workdir == "tools"
    assert list(wire.files) == []  # a mapping is the Task's files, not its routing paths
    assert list(_task({"key": "a", "files": ["src/a.py"]}).files) == ["src/a.py"]
