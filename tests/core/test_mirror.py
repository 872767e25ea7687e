"""agentd's repository mirrors (drover/core/mirror.py) on real repositories: a run clones through the
mirror and always sees the branch as the forge has it now; the mirror follows deleted branches, is
root's alone and shares no file with a run's clone; a refused fetch fails the run rather than starting
it from what the mirror had; a damaged mirror is replaced; concurrent runs and agentd's refresh
between runs (`python -m drover.core.mirror`) share one mirror."""

from __future__ import annotations

import concurrent.futures
import json
import os
import pathlib
import stat
import subprocess
import sys
from collections.abc import Iterator

import pygit2
import pytest

from drover.core import mirror
from drover.core.mirror import prepare
from drover.core.workspace import WorkspaceError, git_dir, open_repository
from drover.testing.git_http import GitHttpServer
from tests.conftest import make_repo

TOKEN = "ghp_mirror-test-token-8c1f5a3e9b"


@pytest.fixture
def origin(tmp_path: pathlib.Path, git_repo: pathlib.Path) -> pathlib.Path:
    bare = tmp_path / "forge" / "app.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(git_repo), str(bare)], check=True)
    return bare


def commit_on(origin: pathlib.Path, branch: str, path: str, text: str) -> str:
    """A new commit on `branch` of the bare `origin` (from its current tip, or a root commit)."""
    repo = pygit2.Repository(str(origin))
    ref = f"refs/heads/{branch}"
    parents = [repo.references[ref].target] if ref in repo.references else []
    builder = repo.TreeBuilder(repo[parents[0]].peel(pygit2.Tree)) if parents else repo.TreeBuilder()
    builder.insert(path, repo.create_blob(text.encode()), pygit2.enums.FileMode.BLOB)
    who = pygit2.Signature("t", "t@example.com")
    return str(repo.create_commit(ref, who, who, f"edit {path}", builder.write(), parents))


def tip(origin: pathlib.Path, branch: str = "main") -> str:
    return str(pygit2.Repository(str(origin)).references[f"refs/heads/{branch}"].target)


def mirror_branches(mirrors: pathlib.Path, url: str) -> dict[str, str]:
    repo = pygit2.Repository(str(mirror.path_for(mirrors, url)))
    return {name: str(repo.references[f"refs/heads/{name}"].target) for name in repo.branches.local}


def test_a_run_clones_through_the_mirror_and_sees_the_branch_as_the_forge_has_it_now(
    tmp_path: pathlib.Path, origin: pathlib.Path
) -> None:
    mirrors, url = tmp_path / "mirrors", str(origin)
    assert prepare(tmp_path / "run1", url, "main", mirror_dir=mirrors) == tip(origin)
    assert mirror_branches(mirrors, url) == {"main": tip(origin)}
    newer = commit_on(origin, "main", "app.py", "print('newer')\n")
    assert prepare(tmp_path / "run2", url, "main", mirror_dir=mirrors) == newer
    assert (tmp_path / "run2" / "app.py").read_text() == "print('newer')\n"
    clone = open_repository(tmp_path / "run2")
    assert clone.remotes["origin"].url == url  # as a clone of the repository itself: never the mirror
    assert str(clone.head.target) == newer and clone.head.shorthand == "main"
    assert clone.branches.local["main"].upstream.branch_name == "origin/main"
    assert clone.references["refs/remotes/origin/main"].target == clone.head.target
    assert not (tmp_path / "run2" / ".git").exists()  # the git directory beside the worktree, as always
    # root's alone, and nothing of it in a run's clone: no file of the clone is a link to the mirror's
    assert stat.S_IMODE(os.stat(mirrors).st_mode) == 0o700
    assert all(
        os.stat(os.path.join(folder, name)).st_nlink == 1
        for folder, _, names in os.walk(git_dir(tmp_path / "run2"))
        for name in names
    )
    assert url not in "".join(p.read_text(errors="replace") for p in mirrors.rglob("config"))


def test_the_mirror_follows_branches_made_and_deleted_at_the_forge(
    tmp_path: pathlib.Path, origin: pathlib.Path
) -> None:
    mirrors, url = tmp_path / "mirrors", str(origin)
    feature = commit_on(origin, "feature", "f.py", "F = 1\n")
    assert prepare(tmp_path / "run1", url, "feature", mirror_dir=mirrors) == feature
    assert set(mirror_branches(mirrors, url)) == {"main", "feature"}
    assert set(open_repository(tmp_path / "run1").branches.remote) == {"origin/main", "origin/feature"}
    subprocess.run(["git", "-C", str(origin), "branch", "-D", "feature"], check=True, capture_output=True)
    prepare(tmp_path / "run2", url, "main", mirror_dir=mirrors)
    assert set(mirror_branches(mirrors, url)) == {"main"}
    with pytest.raises(WorkspaceError, match="at branch feature"):  # as a direct clone says it
        prepare(tmp_path / "run3", url, "feature", mirror_dir=mirrors)
    assert list((tmp_path / "run3").iterdir()) == []


def test_an_empty_repository_clones_empty_through_the_mirror(tmp_path: pathlib.Path) -> None:
    empty = tmp_path / "empty.git"
    pygit2.init_repository(str(empty), bare=True)
    assert prepare(tmp_path / "run", str(empty), "main", mirror_dir=tmp_path / "mirrors") == ""
    assert (git_dir(tmp_path / "run") / "HEAD").is_file()


@pytest.fixture
def forge(tmp_path: pathlib.Path, origin: pathlib.Path) -> Iterator[GitHttpServer]:
    with GitHttpServer(origin.parent, {TOKEN}) as server:
        yield server


def test_a_refused_fetch_fails_the_run_instead_of_starting_it_from_the_mirror(
    tmp_path: pathlib.Path, origin: pathlib.Path, forge: GitHttpServer
) -> None:
    mirrors, url = tmp_path / "mirrors", forge.url("app")
    assert prepare(tmp_path / "run1", url, "main", TOKEN, mirrors) == tip(origin)
    newer = commit_on(origin, "main", "app.py", "print('newer')\n")
    forge.tokens.clear()  # the credential revoked at the forge
    with pytest.raises(WorkspaceError, match="cannot clone") as refused:
        prepare(tmp_path / "run2", url, "main", TOKEN, mirrors)
    assert TOKEN not in str(refused.value)
    assert list((tmp_path / "run2").iterdir()) == []
    assert mirror_branches(mirrors, url)["main"] != newer  # kept as it was, for when the forge answers
    forge.tokens.add(TOKEN)
    assert prepare(tmp_path / "run3", url, "main", TOKEN, mirrors) == newer
    on_disk = b"".join(p.read_bytes() for p in mirrors.rglob("*") if p.is_file())
    assert TOKEN.encode() not in on_disk and b"127.0.0.1" not in on_disk  # neither credential nor URL


def test_a_damaged_mirror_is_replaced_and_the_run_goes_on(tmp_path: pathlib.Path, origin: pathlib.Path) -> None:
    mirrors, url = tmp_path / "mirrors", str(origin)
    prepare(tmp_path / "run1", url, "main", mirror_dir=mirrors)
    source = mirror.path_for(mirrors, url)
    (source / "HEAD").write_text("garbage\n")
    assert prepare(tmp_path / "run2", url, "main", mirror_dir=mirrors) == tip(origin)
    assert not source.exists()  # removed: the next run makes a new one
    assert prepare(tmp_path / "run3", url, "main", mirror_dir=mirrors) == tip(origin)
    assert mirror_branches(mirrors, url) == {"main": tip(origin)}


def test_concurrent_runs_and_a_refresh_share_one_mirror(tmp_path: pathlib.Path, forge: GitHttpServer) -> None:
    mirrors, url = tmp_path / "mirrors", forge.url("app")
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        commits = list(pool.map(lambda i: prepare(tmp_path / f"run{i}", url, "main", TOKEN, mirrors), range(4)))
    assert len(set(commits)) == 1 and commits[0]
    newer = commit_on(tmp_path / "forge" / "app.git", "main", "app.py", "print('refreshed')\n")
    told = {"mirror": str(mirror.path_for(mirrors, url)), "url": url, "secret": TOKEN}
    refreshed = subprocess.run(
        [sys.executable, "-m", "drover.core.mirror"], input=json.dumps(told), capture_output=True, text=True
    )
    assert refreshed.returncode == 0, refreshed.stderr
    assert mirror_branches(mirrors, url)["main"] == newer
    forge.tokens.clear()
    refused = subprocess.run(
        [sys.executable, "-m", "drover.core.mirror"], input=json.dumps(told), capture_output=True, text=True
    )
    assert refused.returncode == 1 and "cannot clone" in refused.stderr and TOKEN not in refused.stderr


def test_without_a_branch_the_repository_is_cloned_directly(tmp_path: pathlib.Path) -> None:
    repo = make_repo(tmp_path / "r", {"a.txt": "a\n"})
    assert prepare(tmp_path / "run", str(repo), "", mirror_dir=tmp_path / "mirrors")
    assert not (tmp_path / "mirrors").exists()


def test_a_mirror_fetched_many_times_is_fetched_anew_before_its_packs_pile_up(
    tmp_path: pathlib.Path, origin: pathlib.Path
) -> None:
    mirrors, url = tmp_path / "mirrors", str(origin)
    source = mirror.path_for(mirrors, url)
    counts = []
    for i in range(mirror.MAX_PACKS + 4):
        newest = commit_on(origin, "main", "n.txt", f"{i}\n")
        mirror.refresh(source, url)
        counts.append(len(list((source / "objects" / "pack").glob("*.pack"))))
    assert max(counts) == mirror.MAX_PACKS + 1 and counts[-1] < 5  # each fetch a pack, then one whole fetch
    assert prepare(tmp_path / "run", url, "main", mirror_dir=mirrors) == newest
