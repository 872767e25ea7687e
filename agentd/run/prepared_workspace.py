"""A run's workspace from agentd's prepared-workspace cache (prepared_cache.py): on a hit the worktree
becomes the entry's tree with the run's own commit checked out, and setup is skipped; on a miss setup
runs and, when it succeeded on the project's own branch, its result is kept for the next run.

The run's copy of an entry is an overlay (the entry its read-only lower layer, the run's writes in an
upper layer beside the worktree) where agentd, as root, can mount one: starting costs no copy at all,
and the entry is never written. Elsewhere it is `cp -a --reflink=auto` (a reflink on btrfs or xfs,
else a copy). Never hard links: the run's user owns its workspace (`hand_over` chowns it) and would
then own, and could write, the cache's files. The sandbox binds the worktree alone, so neither the
entry nor the upper layer is visible inside; absolute paths setup wrote (a venv's scripts, an
editable install) name where setup ran, so the sandbox shows the worktree at that path too."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import shutil
import subprocess
import time
from collections.abc import Callable

from agentd.daemon import run_disk
from agentd.run import prepared_key
from agentd.run.output import Output
from agentd.run.prepared_cache import Entry, PreparedCache, copy_tree, hold, hold_path
from agentd.run.sandbox import Bind
from agentd.run.spec import RunSpec
from drover.core import workspace

LAYERS = ".prepared"
"""Beside the worktree in the run's workspace directory: the overlay's upper and work directories."""
RUN_ENV_PREFIX = "DROVER_"
"""Per-run variables (DROVER_RUN_ID, ...) that the key leaves out: they differ every run."""


@dataclasses.dataclass(frozen=True)
class Setup:
    """How the run's setup went (reported in its exit record)."""

    cached: bool = False
    """It came from the cache and setup was skipped."""
    seconds: float = 0.0
    """Spent on setup, or on a hit on starting from the entry."""
    origin: str = ""
    """On a hit, where setup ran (the sandbox shows the worktree there too)."""
    made: tuple[str, ...] = ()
    """What setup left untracked, as anchored patterns (`/.venv/`): kept out of the Task's ChangeSet."""
    entry: str = ""
    """On a hit, the entry the worktree starts from (held against eviction while the run lives)."""

    @property
    def reported(self) -> dict[str, float | bool]:
        """For the run's exit record (RunFinished)."""
        return {"setup_seconds": self.seconds, "setup_cached": self.cached}

    def save(self, path: pathlib.Path) -> None:
        path.write_text(json.dumps(dataclasses.asdict(self)))

    @classmethod
    def load(cls, path: pathlib.Path) -> Setup:
        """What `save` wrote (a supervisor started again on the run); Setup() when it cannot be read."""
        try:
            saved = json.loads(path.read_text())
            made = tuple(str(pattern) for pattern in saved["made"])
            entry = str(saved.get("entry", ""))
            return cls(bool(saved["cached"]), float(saved["seconds"]), str(saved["origin"]), made, entry)
        except (OSError, ValueError, KeyError, TypeError):
            return cls()

    def binds(self, repo_dir: pathlib.Path) -> list[Bind]:
        """What a command's sandbox shows beyond the worktree."""
        if not self.cached or not self.origin or self.origin == str(repo_dir):
            return []
        return [Bind(repo_dir, self.origin, writable=True)]


def cache_of(spec: RunSpec) -> PreparedCache | None:
    """The agent's cache, or None when it is off or the run has no setup to skip."""
    if not spec.prepared_cache_dir or spec.prepared_cache_max_bytes <= 0 or not spec.preparation.setup:
        return None
    if not spec.repo:  # nothing to key it by
        return None
    return PreparedCache(pathlib.Path(spec.prepared_cache_dir), spec.prepared_cache_max_bytes)


def key_of(spec: RunSpec, repo_dir: pathlib.Path) -> str:
    prep = spec.preparation
    env = {name: value for name, value in prep.env.items() if not name.startswith(RUN_ENV_PREFIX)}
    return prepared_key.cache_key(spec.repo, spec.branch, prep.setup, env, repo_dir, prep.cache_key_files)


def prepare_with_cache(spec: RunSpec, repo_dir: pathlib.Path, output: Output, setup: Callable[[], float]) -> Setup:
    """Start the cloned worktree `repo_dir` from a cached entry, else run `setup` (which answers its
    seconds, or raises when it fails) and keep what it made."""
    started = time.monotonic()
    cache = cache_of(spec)
    if cache is None:
        return Setup(False, setup() if spec.preparation.setup else 0.0)
    key = key_of(spec, repo_dir)
    project = spec.project or spec.repo
    entry = cache.lookup(project, key)
    if entry is not None and start_from(entry, repo_dir, output):
        output.write("system", f"setup: skipped, the workspace came prepared (key {key[:12]})\n")
        return Setup(True, time.monotonic() - started, entry.origin, entry=str(entry.path))
    output.write("system", f"setup: no prepared workspace for key {key[:12]}: running setup\n")
    seconds = setup()
    if spec.stack or spec.harness.resume_branch:  # a tree of Tasks' own work is not the project's to share
        return Setup(False, seconds)
    try:
        stored = cache.store(project, key, repo_dir, *tracked(repo_dir), str(repo_dir))
    except Exception as err:  # keeping it only saves the next run time: this run goes on whatever failed
        output.write("system", f"setup: the prepared workspace could not be kept: {err}\n")
        return Setup(False, seconds)
    if stored is not None:
        output.write("system", f"setup: prepared workspace kept for the next runs (key {key[:12]})\n")
    return Setup(False, seconds)


def hold_again(spec: RunSpec, setup: Setup, output: Output) -> None:
    """A supervisor started again on a run that began from an entry holds the entry again (the dead
    one's lock went with it), so that eviction still passes it by while the run's overlay lives."""
    if not setup.cached or not setup.entry or not spec.prepared_cache_dir:
        return
    entry, cache = pathlib.Path(setup.entry), pathlib.Path(spec.prepared_cache_dir)
    if entry.resolve().parent.parent != cache.resolve() or hold_path(entry) is None:  # kept open: see start_from
        output.write("system", "setup: the prepared workspace this run started from is gone\n")


def tracked(repo_dir: pathlib.Path) -> tuple[str, list[str]]:
    """The commit checked out in `repo_dir` and the paths git tracks there."""
    repo = workspace.open_repository(repo_dir)
    commit = "" if repo.head_is_unborn else str(repo.head.target)
    return commit, [item.path for item in repo.index]


def start_from(entry: Entry, repo_dir: pathlib.Path, output: Output) -> bool:
    """Make `repo_dir` (a fresh clone's worktree) the entry's tree with the clone's commit checked out.
    False, with the worktree as the clone left it, when that could not be done."""
    held = hold(entry)
    if held is None:  # evicted since the lookup
        return False
    try:
        _empty(repo_dir)
        if not mount_overlay(entry, repo_dir):
            copy_tree(entry.tree, repo_dir)
        check_out(entry, repo_dir)
    except Exception as err:  # whatever failed, the run goes on the slow way: setup runs
        output.write("system", f"setup: could not start from the prepared workspace: {err}\n")
        os.close(held)
        release(repo_dir)
        _empty(repo_dir)
        if workspace.has_repository(repo_dir):
            workspace.open_repository(repo_dir).checkout_head(strategy=_force())
        return False
    return True  # `held` stays open until the run's supervisor exits: the entry is not evicted meanwhile


def mount_overlay(entry: Entry, repo_dir: pathlib.Path) -> bool:
    """Mount the entry, read-only, under the run's own upper layer on `repo_dir`; False where overlayfs
    cannot be mounted (not root, a kernel without it, a path overlayfs options cannot name)."""
    if os.geteuid() != 0 or any(c in str(p) for p in (entry.tree, repo_dir.parent) for c in ",:\\"):
        return False
    layers = repo_dir.parent / LAYERS
    shutil.rmtree(layers, ignore_errors=True)
    (layers / "upper").mkdir(parents=True)
    (layers / "work").mkdir()
    base = f"lowerdir={entry.tree},upperdir={layers / 'upper'},workdir={layers / 'work'}"
    for options in (f"{base},metacopy=on", base):  # metacopy: a chown copies no file's data up
        done = subprocess.run(
            ["mount", "-t", "overlay", "overlay", "-o", options, str(repo_dir)],
            capture_output=True,
            stdin=subprocess.DEVNULL,
        )
        if done.returncode == 0:
            return True
    shutil.rmtree(layers, ignore_errors=True)
    return False


def check_out(entry: Entry, repo_dir: pathlib.Path) -> None:
    """The run's commit over the entry's tree: files tracked at the entry's commit and not at the run's
    removed, the run's tracked files written where they differ; what setup made (untracked) stays."""
    repo = workspace.open_repository(repo_dir)
    now = {item.path for item in repo.index}
    root = os.path.realpath(repo_dir)
    for path in entry.tracked:
        if path in now:
            continue
        target = os.path.join(root, path)
        # never through a symlink: only a path whose every directory is a real one inside the worktree
        if os.path.realpath(os.path.dirname(target)) == os.path.dirname(target) and os.path.lexists(target):
            with contextlib.suppress(OSError):
                os.unlink(target)
    repo.checkout_head(strategy=_force())


def release(repo_dir: pathlib.Path) -> None:
    """Unmount the run's overlay, when it has one (before its workspace is removed)."""
    run_disk.unmount(repo_dir)
    shutil.rmtree(repo_dir.parent / LAYERS, ignore_errors=True)


def _empty(directory: pathlib.Path) -> None:
    for child in directory.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def _force() -> int:
    pygit2 = workspace.trusting_pygit2()
    return int(pygit2.enums.CheckoutStrategy.FORCE)
