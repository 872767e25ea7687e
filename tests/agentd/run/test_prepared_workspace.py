"""Starting a run's worktree from a prepared entry: real git repositories, a real overlay (as root)
or copy, in tmp_path."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import shutil
import subprocess
from collections.abc import Callable

import pytest

from agentd.run import prepared_workspace
from agentd.run.output import Output
from agentd.run.prepared_cache import PreparedCache, listing
from agentd.run.sandbox import Bind
from agentd.run.spec import HarnessSpec, Preparation, RunSpec, StackedChangeSet
from drover.core import workspace

KEY = "c" * 64


def git(cwd: pathlib.Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def commit(origin: pathlib.Path, files: dict[str, str | None], message: str) -> str:
    for name, text in files.items():
        if text is None:
            git(origin, "rm", "-q", name)
        else:
            (origin / name).parent.mkdir(parents=True, exist_ok=True)
            (origin / name).write_text(text)
            git(origin, "add", name)
    git(origin, "commit", "-q", "-m", message)
    return git(origin, "rev-parse", "HEAD").strip()


@pytest.fixture
def origin(tmp_path: pathlib.Path) -> pathlib.Path:
    repo = tmp_path / "origin"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit(repo, {"a.py": "A = 1\n", "old.py": "gone later\n", "requirements.txt": "attrs\n"}, "first")
    return repo


def clone(origin: pathlib.Path, where: pathlib.Path) -> pathlib.Path:
    repo_dir = where / "repo"
    workspace.prepare(repo_dir, str(origin), "main")
    return repo_dir


def stored_entry(tmp_path: pathlib.Path, origin: pathlib.Path, cache_dir: str) -> tuple[PreparedCache, object]:
    """An entry made from a clone of the first commit plus what a setup made (untracked files)."""
    first = clone(origin, tmp_path / "first")
    (first / ".venv" / "bin").mkdir(parents=True)
    (first / ".venv" / "bin" / "tool").write_text("#!/bin/sh\n")
    cache = PreparedCache(tmp_path / cache_dir, 1 << 30)
    entry = cache.store("app", KEY, first, *prepared_workspace.tracked(first), str(first))
    assert entry is not None
    return cache, entry


@pytest.mark.parametrize("cache_dir", ["cache", "cache,copied"])  # a comma overlayfs cannot name: the copy
def test_a_run_starts_from_the_entry_at_its_own_commit(
    tmp_path: pathlib.Path, origin: pathlib.Path, cache_dir: str
) -> None:
    cache, entry = stored_entry(tmp_path, origin, cache_dir)
    before = listing(entry.tree)  # type: ignore[attr-defined]
    commit(origin, {"a.py": "A = 2\n", "old.py": None, "pkg/new.py": "NEW = 1\n"}, "second")
    repo_dir = clone(origin, tmp_path / "run")
    output = Output(tmp_path / "output.jsonl", [], 1 << 20)
    try:
        assert prepared_workspace.start_from(entry, repo_dir, output)  # type: ignore[arg-type]
        overlaid = os.path.ismount(repo_dir)
        assert overlaid is (os.geteuid() == 0 and "," not in cache_dir)
        assert (repo_dir / "a.py").read_text() == "A = 2\n"
        assert (repo_dir / "pkg" / "new.py").read_text() == "NEW = 1\n"
        assert not (repo_dir / "old.py").exists()
        assert (repo_dir / ".venv" / "bin" / "tool").read_text() == "#!/bin/sh\n"
        (repo_dir / ".venv" / "bin" / "tool").write_text("changed by the Task\n")
        (repo_dir / "requirements.txt").unlink()
        repo = workspace.open_repository(repo_dir)
        status = workspace.trusting_pygit2().enums.FileStatus
        assert repo.status() == {"requirements.txt": status.WT_DELETED, ".venv/bin/tool": status.WT_NEW}
    finally:
        prepared_workspace.release(repo_dir)
    assert not os.path.ismount(repo_dir)
    assert not (repo_dir.parent / prepared_workspace.LAYERS).exists()
    assert listing(entry.tree) == before  # type: ignore[attr-defined]
    assert cache.lookup("app", KEY) == entry


def test_a_tracked_path_under_a_symlink_is_never_removed_through_it(
    tmp_path: pathlib.Path, origin: pathlib.Path
) -> None:
    """A file tracked at the entry's commit whose directory is a symlink at the run's: left alone."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.py").write_text("not the run's\n")
    commit(origin, {"d/keep.py": "tracked\n"}, "with d")
    _, entry = stored_entry(tmp_path, origin, "cache")
    git(origin, "rm", "-q", "-r", "d")
    (origin / "d").symlink_to(outside)
    git(origin, "add", "d")
    git(origin, "commit", "-q", "-m", "d is a link now")
    repo_dir = clone(origin, tmp_path / "run")
    try:
        assert prepared_workspace.start_from(entry, repo_dir, Output(tmp_path / "o.jsonl", [], 1 << 20))  # type: ignore[arg-type]
        assert os.path.islink(repo_dir / "d")
    finally:
        prepared_workspace.release(repo_dir)
    assert (outside / "keep.py").read_text() == "not the run's\n"


def spec_of(origin: pathlib.Path, cache: pathlib.Path, run_id: str, **changed: object) -> RunSpec:
    preparation = Preparation(setup=("make it",), env={"A": "1", "DROVER_RUN_ID": run_id}, cache_key_files=("*.txt",))
    spec = RunSpec(
        run_id=run_id,
        project="app",
        repo=str(origin),
        branch="main",
        preparation=preparation,
        prepared_cache_dir=str(cache),
        prepared_cache_max_bytes=1 << 30,
    )
    return dataclasses.replace(spec, **changed)  # type: ignore[arg-type]


def setup_making(repo_dir: pathlib.Path, ran: list[str]) -> Callable[[], float]:
    def setup() -> float:
        ran.append(str(repo_dir))
        (repo_dir / "made.txt.out").write_text("made by setup\n")
        return 0.5

    return setup


def test_a_miss_runs_setup_and_keeps_it_and_a_hit_skips_it(tmp_path: pathlib.Path, origin: pathlib.Path) -> None:
    """Per-run DROVER_* variables are no part of the key; a changed key file is."""
    cache, ran = tmp_path / "cache", list[str]()
    output = Output(tmp_path / "o.jsonl", [], 1 << 20)
    first = clone(origin, tmp_path / "one")
    setup = prepared_workspace.prepare_with_cache(spec_of(origin, cache, "r1"), first, output, setup_making(first, ran))
    assert setup == prepared_workspace.Setup(False, 0.5) and len(ran) == 1
    second = clone(origin, tmp_path / "two")
    try:
        hit = prepared_workspace.prepare_with_cache(
            spec_of(origin, cache, "r2"), second, output, setup_making(second, ran)
        )
        assert hit.cached and hit.origin == str(first) and len(ran) == 1
        assert (second / "made.txt.out").read_text() == "made by setup\n"
        assert hit.binds(second) == [Bind(second, str(first), writable=True)]
    finally:
        prepared_workspace.release(second)
    commit(origin, {"requirements.txt": "attrs==23\n"}, "a key file changes")
    third = clone(origin, tmp_path / "three")
    miss = prepared_workspace.prepare_with_cache(spec_of(origin, cache, "r3"), third, output, setup_making(third, ran))
    assert not miss.cached and len(ran) == 2


@pytest.mark.parametrize(
    "changed",
    [
        {"stack": (StackedChangeSet("cs1", "t1", "drover/c/t1", "abc"),)},  # on other Tasks' ChangeSets
        {"harness": HarnessSpec(resume_branch="drover/c/t1")},  # a parked session's own work
    ],
)
def test_a_run_on_tasks_work_never_stores(tmp_path: pathlib.Path, origin: pathlib.Path, changed: dict) -> None:
    cache, ran = tmp_path / "cache", list[str]()
    output = Output(tmp_path / "o.jsonl", [], 1 << 20)
    repo_dir = clone(origin, tmp_path / "one")
    spec = spec_of(origin, cache, "r1", **changed)
    assert not prepared_workspace.prepare_with_cache(spec, repo_dir, output, setup_making(repo_dir, ran)).cached
    assert ran and not list(PreparedCache(cache, 1 << 30).entries())


def test_without_a_cache_setup_just_runs(tmp_path: pathlib.Path, origin: pathlib.Path) -> None:
    ran: list[str] = []
    repo_dir = clone(origin, tmp_path / "one")
    off = spec_of(origin, tmp_path / "cache", "r1", prepared_cache_max_bytes=0)
    output = Output(tmp_path / "o.jsonl", [], 1 << 20)
    assert prepared_workspace.prepare_with_cache(off, repo_dir, output, setup_making(repo_dir, ran)).seconds == 0.5
    assert ran and not (tmp_path / "cache").exists()


def test_a_start_that_fails_half_way_leaves_the_clone_as_it_was(tmp_path: pathlib.Path, origin: pathlib.Path) -> None:
    _, entry = stored_entry(tmp_path, origin, "cache")
    shutil.rmtree(entry.tree)  # type: ignore[attr-defined]  # gone between the lookup and the start
    repo_dir = clone(origin, tmp_path / "run")
    output = Output(tmp_path / "o.jsonl", [], 1 << 20)
    try:
        assert not prepared_workspace.start_from(entry, repo_dir, output)  # type: ignore[arg-type]
    finally:
        prepared_workspace.release(repo_dir)
    assert not os.path.ismount(repo_dir)
    assert sorted(p.name for p in repo_dir.iterdir()) == ["a.py", "old.py", "requirements.txt"]
    assert workspace.open_repository(repo_dir).status() == {}
    assert "could not start from the prepared workspace" in (tmp_path / "o.jsonl").read_text()
