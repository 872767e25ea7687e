"""agentd's setup phase, its pure parts: the setup commands in order, the first failure named with its
exit code and output prefixed, and a command Task's files written into a workspace setup may have made
hostile (symlinks out, FIFOs, hard links), never through one."""

from __future__ import annotations

import os
import pathlib

import pytest

from agentd.errors import RunEnded, SetupFailed
from agentd.run import preparation
from agentd.run.command import Command, Invocation
from agentd.run.output import Output
from agentd.run.sandbox import PlainSandbox, SandboxPolicy
from agentd.run.spec import Preparation, RunSpec
from drover.core.workspace import WorkspaceError


def _records(path: pathlib.Path) -> str:
    import json

    return "".join(json.loads(line).get("t", "") for line in path.read_text().splitlines())


def _shell(tmp_path: pathlib.Path, output: Output) -> preparation.Execute:
    """Runs each setup command for real (sh -c), unsandboxed, in tmp_path."""

    def execute(argv: list[str], prefix: str) -> RunEnded:
        env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
        what = Invocation(argv, tmp_path, env, [tmp_path], [], 30.0, prefix)
        return Command(output, lambda: False, 1.0, what).follow(PlainSandbox(SandboxPolicy()))

    return execute


def test_setup_runs_in_order_and_stops_at_the_first_failure(tmp_path: pathlib.Path) -> None:
    out_file = tmp_path / "output.jsonl"
    output = Output(out_file, [], 1 << 20)
    work = tmp_path / "ws"
    work.mkdir()
    setup = ("echo one > a", "printf 'two\\nthree' ; echo err >&2; exit 7", "touch never")
    spec = RunSpec(run_id="r", preparation=Preparation(setup=setup))
    with pytest.raises(SetupFailed) as caught:
        preparation.prepare(work, spec, _shell(work, output), output)
    assert (caught.value.index, caught.value.exit_code) == (1, 7)
    assert "setup command 2 (printf" in str(caught.value) and "exited with 7" in str(caught.value)
    assert (work / "a").read_text() == "one\n" and not (work / "never").exists()
    said = _records(out_file)
    assert "setup: [1/3] $ echo one > a\n" in said and "[3/3]" not in said
    assert "[setup] two\n[setup] three" in said and "[setup] err\n" in said


def test_setup_answers_its_time_and_that_it_was_not_cached(tmp_path: pathlib.Path) -> None:
    output = Output(tmp_path / "output.jsonl", [], 1 << 20)
    spec = RunSpec(run_id="r", preparation=Preparation(setup=("sleep 0.2",)))
    seconds, cached = preparation.prepare(tmp_path, spec, _shell(tmp_path, output), output)
    assert seconds >= 0.2 and cached is False
    assert preparation.prepare(tmp_path, RunSpec(run_id="r"), _shell(tmp_path, output), output) == (0.0, False)


def test_files_are_written_under_the_workspace(tmp_path: pathlib.Path) -> None:
    preparation.write_file(tmp_path, "a/b/c.txt", b"hello")
    preparation.write_file(tmp_path, "./top.txt", b"x")
    preparation.write_file(tmp_path, "top.txt", b"replaced")
    assert (tmp_path / "a/b/c.txt").read_bytes() == b"hello"
    assert (tmp_path / "top.txt").read_bytes() == b"replaced"


@pytest.mark.parametrize("path", ["../out.txt", "/etc/x", ".git/config", "a/../../x", ""])
def test_paths_that_leave_the_workspace_are_refused(tmp_path: pathlib.Path, path: str) -> None:
    (tmp_path / "ws").mkdir()
    with pytest.raises(WorkspaceError):
        preparation.write_file(tmp_path / "ws", path, b"x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ws"]


def test_no_write_goes_through_what_setup_left(tmp_path: pathlib.Path) -> None:
    outside, ws = tmp_path / "outside", tmp_path / "ws"
    outside.mkdir()
    ws.mkdir()
    (outside / "secret").write_text("keep")
    (ws / "escape").symlink_to(outside)  # a directory link out
    (ws / "link").symlink_to(outside / "secret")  # a file link out
    os.link(outside / "secret", ws / "hard")  # a hard link to a file outside
    os.mkfifo(ws / "fifo")
    with pytest.raises(WorkspaceError):
        preparation.write_file(ws, "escape/pwned", b"x")
    preparation.write_file(ws, "link", b"mine")  # the link is replaced, its target untouched
    preparation.write_file(ws, "hard", b"mine")
    preparation.write_file(ws, "fifo", b"mine")  # never blocks on a FIFO
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]
    assert (outside / "secret").read_text() == "keep"
    assert not (ws / "link").is_symlink() and (ws / "link").read_text() == "mine"
    assert (ws / "hard").read_text() == "mine" and (ws / "fifo").read_text() == "mine"


def test_a_setup_command_that_cannot_start_is_a_setup_failure(tmp_path: pathlib.Path) -> None:
    output = Output(tmp_path / "output.jsonl", [], 1 << 20)

    def cannot_start(argv: list[str], prefix: str) -> RunEnded:
        raise RunEnded("failed", "cannot start sh: No such file", code="start_failed", exit_code=-1)

    spec = RunSpec(run_id="r", preparation=Preparation(setup=("make deps",)))
    with pytest.raises(SetupFailed, match=r"setup command 1 \(make deps\) cannot start sh"):
        preparation.prepare(tmp_path, spec, cannot_start, output)
