"""The project's workspace preparation checks and a command Task's files: tables of what passes and
what is refused, each refusal naming its field."""

from __future__ import annotations

import pytest

from controlplane.domain import graph, preparation
from drover.errors import InvalidArgument


@pytest.mark.parametrize(
    "template, change, task, title, expected",
    [
        ("", "chg_1", "tsk_2", "Fix it", "drover/chg_1/tsk_2"),
        ("ai/{slug}/{change}-{task}", "chg_1", "tsk_2", "Fix the login form!", "ai/fix-the-login-form/chg_1-tsk_2"),
        ("{change}/{task}", "c", "t", "", "c/t"),
        ("x/{slug}/{change}/{task}", "c", "t", "***", "x/change/c/t"),
    ],
)
def test_task_branch(template: str, change: str, task: str, title: str, expected: str) -> None:
    assert preparation.task_branch(template, change, task, title) == expected
    assert preparation.legal_branch(expected)


@pytest.mark.parametrize(
    "path, ok",
    [
        ("a.txt", True),
        ("dir/sub/file.py", True),
        ("./dir/file", True),
        (".github/workflows/ci.yml", True),
        ("../up", False),
        ("dir/../../up", False),
        ("/etc/passwd", False),
        (".git/config", False),
        ("./.git/hooks/pre-commit", False),
        ("", False),
        (".", False),
        ("a\\b", False),
        ("a\x00b", False),
        ("x" * 1025, False),
    ],
)
def test_workspace_paths(path: str, ok: bool) -> None:
    if ok:
        assert preparation.check_workspace_path(path, "f") == path
    else:
        with pytest.raises(InvalidArgument) as caught:
            preparation.check_workspace_path(path, "tasks[0].workspace_files")
        assert caught.value.field == "tasks[0].workspace_files"


def test_workspace_files_are_bounded_and_only_for_commands() -> None:
    check = preparation.check_workspace_files
    check({"a": "x"}, "sub", True, "tasks[0]")
    with pytest.raises(InvalidArgument) as caught:
        check({"a": "x"}, "", False, "tasks[1]")
    assert caught.value.field == "tasks[1].workspace_files"
    with pytest.raises(InvalidArgument) as caught:
        check({}, "sub", False, "tasks[1]")
    assert caught.value.field == "tasks[1].workdir"
    many = {f"f{i}": "" for i in range(preparation.MAX_WORKSPACE_FILES + 1)}
    with pytest.raises(InvalidArgument, match="at most 100 files"):
        check(many, "", True, "tasks[0]")
    big = "x" * (preparation.MAX_WORKSPACE_FILE_BYTES + 1)
    with pytest.raises(InvalidArgument) as caught:
        check({"big": big}, "", True, "tasks[0]")
    assert caught.value.field == "tasks[0].workspace_files['big']"
    half = "x" * preparation.MAX_WORKSPACE_FILE_BYTES
    with pytest.raises(InvalidArgument, match="in all"):
        check({f"f{i}": half for i in range(4)}, "", True, "tasks[0]")
    with pytest.raises(InvalidArgument) as caught:
        check({}, "../..", True, "tasks[2]")
    assert caught.value.field == "tasks[2].workdir"


def test_a_change_with_files_on_a_harness_task_is_refused() -> None:
    harness = graph.TaskSpec("h", "implement", "do it", workspace_files={"a.txt": "x"})
    with pytest.raises(InvalidArgument) as caught:
        graph.validate(graph.ChangeSpec("p", "goal", (harness,)))
    assert caught.value.field == "tasks[0].workspace_files"
    command = graph.TaskSpec("c", "test", "run", command=("true",), workspace_files={"../x": ""})
    with pytest.raises(InvalidArgument) as caught:
        graph.validate(graph.ChangeSpec("p", "goal", (command,)))
    assert caught.value.field == "tasks[0].workspace_files['../x']"
    fine = graph.TaskSpec("c", "test", "run", command=("true",), workspace_files={"t/a": "x"}, workdir="t")
    graph.validate(graph.ChangeSpec("p", "goal", (fine,)))
