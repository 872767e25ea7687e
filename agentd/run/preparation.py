"""Workspace preparation (seed 003): after the clone and before the Task's work, the project's setup
commands run in order in the run's sandbox (the network allowed when `setup_network` says so), with the
project's env and DROVER_* variables; their output goes to the run's output, each line after `[setup] `.
Any failure ends the run `setup_failed`, naming the command and its exit code. Then a command Task's
files are written into the workspace and its workdir checked.

`prepare` is the seam a prepared-workspace cache wraps: given the workspace and the spec it runs the
setup and answers Prepared(seconds, cached=False), or raises SetupFailed. Everything that touches the
workspace from agentd's side treats it as hostile: setup ran in it, so any path may be a symlink out."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import stat
import time
from collections.abc import Callable
from typing import NamedTuple

from agentd import run_dir as run_dir_files
from agentd.errors import RunEnded, SetupFailed
from agentd.run import prepared_workspace
from agentd.run.command import Command, Invocation
from agentd.run.output import Output
from agentd.run.spec import RunSpec
from agentd.run.supervisor import Run
from drover.core import workspace
from drover.core.workspace import WorkspaceError

PREFIX = "[setup] "
"""Each line setup prints starts with this in the run's output."""
SHELL = ("sh", "-c")
"""A setup command is a shell command line, like a developer's."""


class Prepared(NamedTuple):
    seconds: float
    """Spent running the setup commands (0 when there are none)."""
    cached: bool
    """The workspace came prepared from the agent's cache (setup skipped)."""


Execute = Callable[[list[str], str], RunEnded]
"""Runs argv in the run's setup sandbox, its output lines after the prefix; answers how it ended."""


def prepare(root: pathlib.Path, spec: RunSpec, execute: Execute, output: Output) -> Prepared:
    """Run the project's setup commands in `root`, in order, each through `execute`. SetupFailed
    names the first that fails; a cancelled command ends the run cancelled (RunEnded)."""
    commands = spec.preparation.setup
    if not commands:
        return Prepared(0.0, False)
    started = time.monotonic()
    for index, line in enumerate(commands):
        output.write("system", f"setup: [{index + 1}/{len(commands)}] $ {line}\n")
        try:
            ended = execute([*SHELL, line], PREFIX)
        except RunEnded as err:  # it could not start: still the project's setup that failed
            ended = err
        if ended.status == "cancelled" or ended.code == "sandbox_failed":
            raise ended  # cancelled, or no sandbox: not the setup's doing
        if ended.status != "succeeded":
            why = "" if ended.code == "exit_code" else ended.reason
            raise SetupFailed(line, index, ended.exit_code, why)
    seconds = time.monotonic() - started
    output.write("system", f"setup: {len(commands)} commands done in {seconds:.1f} s\n")
    return Prepared(seconds, False)


def setup_workspace(run: Run, root: pathlib.Path) -> None:
    """The run's setup, once: from agentd's prepared workspaces when one matches (setup skipped), else
    in its sandbox; a supervisor started again on the run finds it done. What setup left untracked is
    kept out of the Task's ChangeSet (unless the Task writes it)."""
    done = run.run_dir / run_dir_files.PREPARED
    if done.exists():
        run.prepared = prepared_workspace.Setup.load(done)
        prepared_workspace.hold_again(run.spec, run.prepared, run.output)
    elif run.spec.preparation.setup:
        run.check_cancel()
        setup = prepared_workspace.prepare_with_cache(run.spec, root, run.output, lambda: run_setup(run, root))
        run.prepared = dataclasses.replace(setup, made=tuple(untracked(root)))
        run.prepared.save(done)
    run.setup_made = list(run.prepared.made)


def run_setup(run: Run, root: pathlib.Path) -> float:
    """The project's setup commands in the run's sandbox; answers their seconds."""
    spec = run.spec
    network = spec.preparation.setup_network or spec.commands_network
    sandbox = run.sandbox(network, hand_over=(root, run.home))
    env, binds = run.command_env(root, run.home)
    env["DROVER_TASK_KEY"] = spec.task_key
    env.update(run.command_secrets)

    def execute(argv: list[str], prefix: str) -> RunEnded:
        what = Invocation(argv, root, env, [root, run.home], binds, float(spec.timeout_seconds or 0), prefix)
        return Command(run.output, lambda: run.cancelled, spec.kill_grace_seconds, what).follow(sandbox)

    return prepare(root, spec, execute, run.output).seconds


def untracked(root: pathlib.Path) -> list[str]:
    """What git does not track in the workspace, as anchored build-output patterns (`/dir/`, `/file`):
    an untracked directory once, not each file in it. [] without a repository."""
    if not workspace.has_repository(root):
        return []
    repo = workspace.open_repository(root)
    found = repo.status(untracked_files="normal", ignored=False)
    new = workspace.trusting_pygit2().enums.FileStatus.WT_NEW
    return sorted("/" + path for path, flags in found.items() if flags & new)


def place_files(run: Run, root: pathlib.Path) -> pathlib.Path:
    """Write a command Task's files into the workspace and answer its working directory. WorkspaceError
    when a path leaves the workspace, goes into .git or through a symlink (setup may have made one)."""
    for relative, content in run.spec.files.items():
        write_file(root, relative, content.encode())
    if run.spec.files:
        run.output.write("system", f"workspace: wrote {len(run.spec.files)} files\n")
    if not run.spec.workdir:
        return root
    parts = _parts(run.spec.workdir)
    os.close(_open_dirs(root, parts))
    return root.joinpath(*parts)


def write_file(root: pathlib.Path, relative: str, data: bytes) -> None:
    """root/relative holds `data`, made anew (an existing file, link or FIFO there is replaced, never
    written through), its directories made as needed, no symlink followed."""
    parts = _parts(relative)
    fd = _open_dirs(root, parts[:-1])
    try:
        try:
            info = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            info = None
        if info is not None and stat.S_ISDIR(info.st_mode):
            raise WorkspaceError(f"cannot write {relative}: it is a directory")
        if info is not None:
            os.unlink(parts[-1], dir_fd=fd)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        leaf = os.open(parts[-1], flags, 0o644, dir_fd=fd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(leaf, view) :]
        finally:
            os.close(leaf)
    except OSError as err:
        raise WorkspaceError(f"cannot write {relative}: {err.strerror}") from None
    finally:
        os.close(fd)


def _parts(relative: str) -> list[str]:
    """The components of a path relative to the workspace; WorkspaceError when it could leave it."""
    path = pathlib.PurePosixPath(relative)
    parts = [part for part in path.parts if part not in ("", ".")]
    if not parts or path.is_absolute() or ".." in parts or parts[0] == ".git" or "\x00" in relative:
        raise WorkspaceError(f"{relative!r} is not a path inside the workspace")
    return parts


def _open_dirs(root: pathlib.Path, parts: list[str]) -> int:
    """An fd of root/parts..., each component a real directory (made when missing), no symlink followed."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(root, flags)
    try:
        for part in parts:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o755, dir_fd=fd)
            inner = os.open(part, flags, dir_fd=fd)
            os.close(fd)
            fd = inner
    except OSError as err:
        os.close(fd)
        raise WorkspaceError(f"cannot enter {'/'.join(parts)}: {err.strerror} (a directory is needed)") from None
    return fd
