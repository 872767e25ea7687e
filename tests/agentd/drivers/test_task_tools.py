"""The Task tools (seed 000) on real workspaces in tmp_path: reads, writes, exact edits, allowlisted
commands in the real sandbox, the no-workspace and no-repository shapes, and how a run ends."""

from __future__ import annotations

import os
import pathlib
import pwd
import re
import sys

import pytest

from agentd.drivers.harness.tools import (
    COMMAND_OUTPUT,
    MAX_READS,
    NO_WORKSPACE,
    Finished,
    TaskTools,
    ToolResult,
)
from agentd.errors import SandboxFailed
from agentd.run.sandbox import BubblewrapSandbox, SandboxPolicy
from drover.core.allowlist import DEFAULT_PYTHON_POLICY
from drover.core.filewindow import READ_LIMIT

pytestmark = pytest.mark.timeout(30)
REMAIN = re.compile(r"\n\[(\d+) model calls? remains?\]\Z")


class CallsLeft:
    """The calls_left callable: a counter the test moves."""

    def __init__(self, left: int = 7) -> None:
        self.left = left

    def __call__(self) -> int:
        return self.left


def body(result: ToolResult) -> str:
    """The result text without its "[N model calls remain]" line (which must be there)."""
    found = REMAIN.search(result.text)
    assert found, f"no calls-remain line in {result.text[-200:]!r}"
    return result.text[: found.start()]


def env() -> dict[str, str]:
    # This interpreter's directory first, so `python` inside the sandbox is the one with pytest.
    return {
        "PATH": f"{os.path.dirname(sys.executable)}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTEST_ADDOPTS": "-p no:cacheprovider",
    }


@pytest.fixture
def workspace(tmp_path: pathlib.Path) -> pathlib.Path:
    root = tmp_path / "ws"
    (root / "pkg").mkdir(parents=True)
    (root / "README.md").write_text("# sample\n")
    (root / "pkg" / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    (tmp_path / "outside.txt").write_text("secret\n")
    return root


@pytest.fixture
def calls() -> CallsLeft:
    return CallsLeft()


@pytest.fixture
def tools(workspace: pathlib.Path, calls: CallsLeft) -> TaskTools:
    return TaskTools(workspace, True, DEFAULT_PYTHON_POLICY, BubblewrapSandbox(SandboxPolicy()), env(), calls)


# --- reading -----------------------------------------------------------------------------------


async def test_list_files_skips_the_git_directory(tools: TaskTools) -> None:
    result = await tools.call("list_files", {})
    assert not result.error
    assert body(result) == "README.md\npkg/calc.py"


async def test_list_files_of_an_empty_repository(tmp_path: pathlib.Path, calls: CallsLeft) -> None:
    tools = TaskTools(tmp_path, False, DEFAULT_PYTHON_POLICY, None, {}, calls)
    assert body(await tools.call("list_files", {})) == "(the repository is empty)"


async def test_read_file_windows_a_long_file_and_from_line_reads_on(tools: TaskTools, workspace: pathlib.Path) -> None:
    lines = [f"line {n:05d} " + "x" * 88 + "\n" for n in range(1, 601)]  # 100 characters each
    (workspace / "big.txt").write_text("".join(lines))
    first = body(await tools.call("read_file", {"path": "big.txt"}))
    shown = READ_LIMIT // 100
    assert first == "".join(lines[:shown]) + (
        f"[truncated: the file continues at line {shown + 1}; call read_file with from_line={shown + 1}]"
    )
    rest = body(await tools.call("read_file", {"path": "big.txt", "from_line": shown + 1}))
    assert rest == "".join(lines[shown:])


async def test_read_file_of_a_missing_file_is_an_error(tools: TaskTools) -> None:
    result = await tools.call("read_file", {"path": "nope.py"})
    assert result.error and body(result) == "no file 'nope.py'"


async def test_the_thirteenth_read_is_refused(tools: TaskTools) -> None:
    for _ in range(MAX_READS):
        result = await tools.call("read_file", {"path": "README.md"})
        assert not result.error and body(result) == "# sample\n"
    refused = await tools.call("read_file", {"path": "README.md"})
    assert refused.error
    assert body(refused) == f"read limit reached: at most {MAX_READS} reads per run"
    assert MAX_READS == 12


async def test_a_missing_argument_is_an_error(tools: TaskTools) -> None:
    result = await tools.call("read_file", {})
    assert result.error and body(result) == "missing argument 'path'"


@pytest.mark.parametrize(
    "tool, args",
    [
        ("edit_file", {"path": "pkg/calc.py", "edits": "a + b"}),
        ("edit_file", {"path": "pkg/calc.py", "edits": [{"old_text": 1, "new_text": 2}]}),
        ("write_file", {"path": "new.py", "content": 5}),
        ("read_file", {"path": ["README.md"]}),
        ("delete_file", {"path": 7}),
    ],
)
async def test_arguments_of_the_wrong_type_are_an_error_not_a_crash(
    tools: TaskTools, workspace: pathlib.Path, tool: str, args: dict[str, object]
) -> None:
    # The Messages API does not hold tool inputs to their schema; a bad one must not end the run.
    result = await tools.call(tool, args)
    assert result.error
    assert body(result).startswith(f"bad arguments for {tool}: ")
    assert (workspace / "pkg" / "calc.py").read_text() == "def add(a, b):\n    return a - b\n"
    assert not (workspace / "new.py").exists()


# --- writing -----------------------------------------------------------------------------------


async def test_write_edit_delete(tools: TaskTools, workspace: pathlib.Path) -> None:
    wrote = await tools.call("write_file", {"path": "new/dir/note.txt", "content": "one\ntwo\n"})
    assert not wrote.error and body(wrote) == "wrote new/dir/note.txt (8 characters)"
    assert (workspace / "new" / "dir" / "note.txt").read_text() == "one\ntwo\n"

    edited = await tools.call(
        "edit_file",
        {
            "path": "pkg/calc.py",
            "edits": [{"old_text": "def add", "new_text": "def plus"}, {"old_text": "a - b", "new_text": "a + b"}],
        },
    )
    assert not edited.error and body(edited) == "edited pkg/calc.py (2 edits)"
    assert (workspace / "pkg" / "calc.py").read_text() == "def plus(a, b):\n    return a + b\n"

    deleted = await tools.call("delete_file", {"path": "README.md"})
    assert not deleted.error and body(deleted) == "deleted README.md"
    assert not (workspace / "README.md").exists()
    again = await tools.call("delete_file", {"path": "README.md"})
    assert again.error and body(again) == "no file 'README.md'"


async def test_a_failed_edit_writes_nothing_and_names_the_edit(tools: TaskTools, workspace: pathlib.Path) -> None:
    before = (workspace / "pkg" / "calc.py").read_text()
    result = await tools.call(
        "edit_file",
        {
            "path": "pkg/calc.py",
            "edits": [{"old_text": "a - b", "new_text": "a + b"}, {"old_text": "no such text", "new_text": "x"}],
        },
    )
    assert result.error
    assert body(result) == "edit 1: old_text not found"
    assert (workspace / "pkg" / "calc.py").read_text() == before


async def test_editing_a_missing_file_is_an_error(tools: TaskTools) -> None:
    result = await tools.call("edit_file", {"path": "nope.py", "edits": [{"old_text": "a", "new_text": "b"}]})
    assert result.error and body(result) == "no file 'nope.py'"


@pytest.mark.parametrize(
    "tool, args",
    [
        ("read_file", {"path": "../outside.txt"}),
        ("read_file", {"path": "/etc/passwd"}),
        ("read_file", {"path": ".git/config"}),
        ("read_file", {"path": "link/outside.txt"}),
        ("write_file", {"path": "../escaped.txt", "content": "x"}),
        ("write_file", {"path": ".git/hooks/pre-commit", "content": "x"}),
        ("write_file", {"path": "link/escaped.txt", "content": "x"}),
        ("edit_file", {"path": "../outside.txt", "edits": [{"old_text": "secret", "new_text": "x"}]}),
        ("delete_file", {"path": "../outside.txt"}),
    ],
)
async def test_paths_outside_the_workspace_are_refused(
    tools: TaskTools, workspace: pathlib.Path, tool: str, args: dict[str, object]
) -> None:
    (workspace / "link").symlink_to(workspace.parent)
    result = await tools.call(tool, args)
    assert result.error
    assert body(result).startswith(f"refused path {args['path']!r}: ")
    assert (workspace.parent / "outside.txt").read_text() == "secret\n"
    assert not (workspace.parent / "escaped.txt").exists()
    assert not (workspace / ".git" / "hooks").exists()


# --- commands ------------------------------------------------------------------------------------


async def test_an_allowed_command_runs_in_the_sandbox(tools: TaskTools, workspace: pathlib.Path) -> None:
    (workspace / "test_tiny.py").write_text("def test_tiny():\n    assert 1 + 1 == 2\n")
    result = await tools.call("run_command", {"command": "python -m pytest -q test_tiny.py"})
    text = body(result)
    assert not result.error, text
    assert text.startswith("exit code 0\n")
    assert "1 passed" in text


async def test_a_failing_command_is_an_error_with_its_exit_code(tools: TaskTools, workspace: pathlib.Path) -> None:
    (workspace / "test_tiny.py").write_text("def test_tiny():\n    assert 1 + 1 == 3\n")
    result = await tools.call("run_command", {"command": "python -m pytest -q test_tiny.py"})
    assert result.error
    assert body(result).startswith("exit code 1\n") and "1 failed" in body(result)


MADE_TEST = (
    "import pathlib\n\n\ndef test_made():\n    here = pathlib.Path(__file__)\n"
    "    here.write_text(here.read_text() + '# changed by the command\\n')\n"
    "    (here.parent / 'made_by_the_command.txt').write_text('x')\n"
)


async def test_what_the_tools_make_belongs_to_the_session_user_whose_commands_can_change_it(
    tmp_path: pathlib.Path, calls: CallsLeft
) -> None:
    if os.geteuid() != 0:
        pytest.skip("running commands as another user needs root")
    nobody = pwd.getpwnam("nobody")
    shown, root = tmp_path / "ws", tmp_path / "ws" / "repo"
    root.mkdir(parents=True)
    for path in (shown, root):
        os.chown(path, nobody.pw_uid, nobody.pw_gid)
    tools = TaskTools(
        root,
        True,
        DEFAULT_PYTHON_POLICY,
        BubblewrapSandbox(SandboxPolicy(user="nobody")),
        env(),
        calls,
        shown=[shown],
        owner=(nobody.pw_uid, nobody.pw_gid),
    )
    written = await tools.call("write_file", {"path": "pkg/deep/test_made.py", "content": MADE_TEST})
    assert not written.error, written.text
    for made in ("pkg", "pkg/deep", "pkg/deep/test_made.py"):
        assert (root / made).stat().st_uid == nobody.pw_uid, made
    result = await tools.call("run_command", {"command": "python -m pytest -q pkg/deep/test_made.py"})
    assert not result.error and "1 passed" in body(result), body(result)
    assert (root / "pkg" / "deep" / "test_made.py").read_text().endswith("# changed by the command\n")
    assert (root / "pkg" / "deep" / "made_by_the_command.txt").stat().st_uid == nobody.pw_uid


async def test_a_sandbox_that_does_not_come_up_ends_the_run_instead_of_answering(
    workspace: pathlib.Path, calls: CallsLeft
) -> None:
    tools = TaskTools(
        workspace, True, DEFAULT_PYTHON_POLICY, BubblewrapSandbox(SandboxPolicy(), bwrap="/bin/false"), env(), calls
    )
    with pytest.raises(SandboxFailed, match="the sandbox did not start"):
        await tools.call("run_command", {"command": "ls"})


async def test_a_command_off_the_allowlist_is_refused(tools: TaskTools) -> None:
    result = await tools.call("run_command", {"command": "rm -rf /"})
    assert result.error
    text = body(result)
    assert text.startswith("command refused: 'rm' is not an allowed program. Allowed patterns:\n")
    for rule in DEFAULT_PYTHON_POLICY.rules:
        assert f"\n  {rule}" in text


@pytest.mark.parametrize(
    "command", ["ls; rm -rf /", "cat README.md | head", "ls > out.txt", "cat $(ls)", "ls && ls", "cat *.md"]
)
async def test_shell_metacharacters_are_refused(tools: TaskTools, workspace: pathlib.Path, command: str) -> None:
    result = await tools.call("run_command", {"command": command})
    assert result.error
    assert "a shell metacharacter; commands run without a shell" in body(result)
    assert not (workspace / "out.txt").exists()


async def test_command_output_is_cut_to_its_last_12000_characters(tools: TaskTools, workspace: pathlib.Path) -> None:
    lines = [f"{n:07d}\n" for n in range(2500)]  # 20,000 characters
    (workspace / "big.txt").write_text("".join(lines))
    result = await tools.call("run_command", {"command": "cat big.txt"})
    assert not result.error
    text = body(result)
    assert text == (
        "exit code 0\n[output cut: the first 8,000 characters are not shown]\n" + "".join(lines)[-COMMAND_OUTPUT:]
    )
    assert COMMAND_OUTPUT == 12_000


async def test_every_result_says_how_many_model_calls_remain(tools: TaskTools, calls: CallsLeft) -> None:
    calls.left = 5
    assert (await tools.call("list_files", {})).text.endswith("\n[5 model calls remain]")
    calls.left = 0
    assert (await tools.call("read_file", {"path": "nope"})).text.endswith("\n[0 model calls remain]")
    calls.left = 3
    assert (await tools.call("run_command", {"command": "rm -rf /"})).text.endswith("\n[3 model calls remain]")
    assert (await tools.call("no_such_tool", {})).text.endswith("\n[3 model calls remain]")


# --- shapes of a run -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tool, args",
    [
        ("write_file", {"path": "a.txt", "content": "x"}),
        ("edit_file", {"path": "README.md", "edits": [{"old_text": "sample", "new_text": "x"}]}),
        ("delete_file", {"path": "README.md"}),
        ("run_command", {"command": "ls"}),
    ],
)
async def test_a_read_only_task_has_no_workspace(
    workspace: pathlib.Path, calls: CallsLeft, tool: str, args: dict[str, object]
) -> None:
    tools = TaskTools(workspace, False, DEFAULT_PYTHON_POLICY, None, env(), calls)
    result = await tools.call(tool, args)
    assert result.error and body(result) == NO_WORKSPACE
    assert (workspace / "README.md").read_text() == "# sample\n"
    assert not (workspace / "a.txt").exists()


async def test_a_read_only_task_still_lists_and_reads(workspace: pathlib.Path, calls: CallsLeft) -> None:
    tools = TaskTools(workspace, False, DEFAULT_PYTHON_POLICY, None, env(), calls)
    assert body(await tools.call("list_files", {})) == "README.md\npkg/calc.py"
    assert body(await tools.call("read_file", {"path": "README.md"})) == "# sample\n"


async def test_without_a_repository_only_the_ending_tools_exist(calls: CallsLeft) -> None:
    tools = TaskTools(None, False, DEFAULT_PYTHON_POLICY, None, {}, calls)
    assert [d["name"] for d in tools.definitions()] == ["complete_task", "fail_task"]
    result = await tools.call("read_file", {"path": "README.md"})
    assert result.error
    assert body(result) == "unknown tool 'read_file'; the tools are complete_task, fail_task"


async def test_definitions_name_every_tool_with_a_schema(tools: TaskTools) -> None:
    names = [d["name"] for d in tools.definitions()]
    assert names == [
        "list_files",
        "read_file",
        "write_file",
        "edit_file",
        "delete_file",
        "run_command",
        "complete_task",
        "fail_task",
    ]
    assert all(d["input_schema"]["type"] == "object" and d["description"] for d in tools.definitions())


async def test_complete_task_finishes_with_the_intent(tools: TaskTools) -> None:
    with pytest.raises(Finished) as raised:
        await tools.call(
            "complete_task",
            {"summary": "add adds", "files_changed": ["pkg/calc.py"], "tests_run": ["python -m pytest -q"]},
        )
    assert (raised.value.outcome, raised.value.reason) == ("completed", "add adds")
    assert raised.value.intent == {
        "summary": "add adds",
        "files_changed": ["pkg/calc.py"],
        "tests_run": ["python -m pytest -q"],
        "follow_ups": [],
    }


async def test_fail_task_finishes_with_the_reason(calls: CallsLeft) -> None:
    tools = TaskTools(None, False, DEFAULT_PYTHON_POLICY, None, {}, calls)
    with pytest.raises(Finished) as raised:
        await tools.call("fail_task", {"reason": "the spec contradicts itself"})
    assert (raised.value.outcome, raised.value.reason, raised.value.intent) == (
        "failed",
        "the spec contradicts itself",
        {},
    )
