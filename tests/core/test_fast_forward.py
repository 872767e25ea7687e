"""gitspace.fast_forward (issue 28, fix rounds): a fix round's candidate moves its pull request's branch
forward over git's smart HTTP with the project's token, never backwards or sideways, and a refusal or a
wrong token is an error that does not quote the token."""

from __future__ import annotations

import pathlib
import subprocess
from collections.abc import Iterator

import pytest

from drover.core.forge_branches import fast_forward
from drover.core.workspace import WorkspaceError
from drover.testing.git_http import GitHttpServer

TOKEN = "ghs_fast-forward-token-5b1c0e7a"


def git(cwd: pathlib.Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def origin(tmp_path: pathlib.Path) -> Iterator[tuple[GitHttpServer, pathlib.Path, dict[str, str]]]:
    """A bare origin served with TOKEN: main, pr (main + 1) and candidate (pr + 1), sideways (main + 1)."""
    work, root = tmp_path / "work", tmp_path / "forge"
    root.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True)
    commits = {}
    for branch, base in (("main", ""), ("pr", "main"), ("candidate", "pr"), ("sideways", "main")):
        if base:
            git(work, "checkout", "-q", "-b", branch, base)
        (work / f"{branch}.txt").write_text(branch)
        git(work, "add", ".")
        git(work, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", branch)
        commits[branch] = git(work, "rev-parse", "HEAD")
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(root / "app.git")], check=True)
    with GitHttpServer(root, {TOKEN}) as server:
        yield server, root / "app.git", commits


def test_the_candidate_fast_forwards_the_pull_request_branch(
    origin: tuple[GitHttpServer, pathlib.Path, dict[str, str]], tmp_path: pathlib.Path
) -> None:
    server, bare, commits = origin
    fast_forward(server.url("app"), "candidate", commits["candidate"], "pr", tmp_path / "scratch", TOKEN)
    assert git(bare, "rev-parse", "refs/heads/pr") == commits["candidate"]
    assert list((tmp_path / "scratch").iterdir()) == []  # the staging clone is removed
    fast_forward(server.url("app"), "candidate", commits["candidate"], "pr", tmp_path / "scratch", TOKEN)  # again
    assert git(bare, "rev-parse", "refs/heads/pr") == commits["candidate"]


def test_no_push_goes_sideways_or_from_a_moved_branch_and_no_error_quotes_the_token(
    origin: tuple[GitHttpServer, pathlib.Path, dict[str, str]], tmp_path: pathlib.Path
) -> None:
    server, bare, commits = origin
    with pytest.raises(WorkspaceError, match="not a fast-forward") as sideways:
        fast_forward(server.url("app"), "sideways", commits["sideways"], "pr", tmp_path, TOKEN)
    with pytest.raises(WorkspaceError, match=f"candidate is at {commits['candidate']}, not {commits['main']}"):
        fast_forward(server.url("app"), "candidate", commits["main"], "pr", tmp_path, TOKEN)
    with pytest.raises(WorkspaceError, match="cannot fetch") as refused:
        fast_forward(server.url("app"), "candidate", commits["candidate"], "pr", tmp_path, TOKEN[:-1])
    assert git(bare, "rev-parse", "refs/heads/pr") == commits["pr"]
    assert TOKEN[:-1] not in str(refused.value) and TOKEN not in str(sideways.value)
