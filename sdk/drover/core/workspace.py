"""A run's fresh workspace: a pygit2 clone of the project repository at its default branch.

The clone's git directory does not stay in the worktree: `prepare` moves it beside it (`git_dir`,
RUN/workspace/repo.git next to RUN/workspace/repo), where a run's sandbox sees it read-only at
repo/.git and can never write it. Everything agentd (root) does with git afterwards opens that
directory with `open_repository`, the worktree set in memory: nothing the Task could have written
(a `.git` in the worktree, `core.worktree`, a remote's URL, hooks, includes) is ever read, and no
user or system git configuration is (`trusting_pygit2`)."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pygit2


class WorkspaceError(Exception):
    """The workspace could not be prepared; the message is safe to show (no credentials)."""


def redact_url(url: str) -> str:
    """Drop any user:password@ from a URL before it is shown."""
    return re.sub(r"(://)[^/@]+@", r"\1", url)


SAFE_DIRECTORY_ENV = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "*"}
"""For a command's environment: git inside the sandbox reads the repository agentd owns (its git
directory is root's, bound read-only), which git's ownership check would otherwise refuse."""


def git_dir(repo_dir: pathlib.Path) -> pathlib.Path:
    """Where the git directory of the worktree `repo_dir` lives: beside it (repo -> repo.git), never in it."""
    return repo_dir.parent / f"{repo_dir.name}.git"


def trusting_pygit2() -> Any:
    """pygit2 with libgit2's owner check off (agentd, root, hands a workspace to the run's user and
    must still open and publish it) and no global, XDG or system configuration searched: only the
    repository's own, which agentd wrote."""
    import pygit2  # here, not at the top: a run without a repository starts ~60 ms sooner

    pygit2.option(pygit2.enums.Option.SET_OWNER_VALIDATION, 0)
    for level in (
        pygit2.enums.ConfigLevel.GLOBAL,
        pygit2.enums.ConfigLevel.XDG,
        pygit2.enums.ConfigLevel.SYSTEM,
        pygit2.enums.ConfigLevel.PROGRAMDATA,
    ):
        pygit2.settings.search_path[level] = "/nonexistent/drover-no-git-config"
    return pygit2


def separate_git_dir(repo_dir: pathlib.Path) -> None:
    """Move a fresh clone's `.git` beside the worktree (see git_dir)."""
    inside, beside = repo_dir / ".git", git_dir(repo_dir)
    if beside.exists():
        shutil.rmtree(beside)
    if inside.is_dir() and not inside.is_symlink():
        os.rename(inside, beside)


def open_repository(repo_dir: pathlib.Path) -> pygit2.Repository:
    """The workspace's repository from agentd's git directory, its worktree `repo_dir` set in memory
    only (no `core.worktree` is read or written). WorkspaceError when there is none."""
    pygit2 = trusting_pygit2()
    path = git_dir(repo_dir)
    if not (path / "HEAD").is_file() or path.is_symlink():
        raise WorkspaceError("the workspace has no repository")
    repo = pygit2.Repository(str(path), pygit2.enums.RepositoryOpenFlag.NO_SEARCH)
    repo.workdir = str(repo_dir)
    return repo


def has_repository(repo_dir: pathlib.Path) -> bool:
    return (git_dir(repo_dir) / "HEAD").is_file()


def hand_over(path: pathlib.Path, user: str | tuple[int, int] | None) -> None:
    """Give `path` and everything in it to `user` (a name, or a uid and gid), so the command can work on
    its workspace. Nothing to do without a user or when agentd is not root (then the command runs as
    agentd's user). A file the user owns already is left alone: on a prepared workspace's overlay
    (agentd/run/prepared_workspace.py) a chown copies the file up, even to the owner it has."""
    if not user or os.geteuid() != 0:
        return
    if isinstance(user, str):
        import pwd

        entry = pwd.getpwnam(user)
        uid, gid = entry.pw_uid, entry.pw_gid
    else:
        uid, gid = user
    os.lchown(path, uid, gid)
    for parent, dirs, files in os.walk(path):
        for name in dirs + files:
            full = os.path.join(parent, name)
            info = os.lstat(full)
            if info.st_uid != uid or info.st_gid != gid:
                os.lchown(full, uid, gid)


def prepare(path: pathlib.Path, repo: str, branch: str, token: str = "") -> str:
    """Clone `repo` at `branch` into `path` (an empty directory when there is no repo); agentd's runs
    clone through its mirror of `repo` instead (drover/core/mirror.py).
    Answers the commit checked out ("" for an empty workspace or an empty repository)."""
    path.mkdir(parents=True, exist_ok=True)
    if not repo:
        return ""
    pygit2 = trusting_pygit2()
    from drover.core.git_auth import git_callbacks

    try:
        cloned = pygit2.clone_repository(
            repo, str(path), checkout_branch=branch or None, callbacks=git_callbacks(token)
        )
    except (pygit2.GitError, KeyError, ValueError) as err:
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True, exist_ok=True)
        try:  # an empty repository has no branch to check out
            cloned = pygit2.clone_repository(repo, str(path), callbacks=git_callbacks(token))
        except (pygit2.GitError, KeyError, ValueError):
            raise WorkspaceError(f"cannot clone {redact_url(repo)}: {_clean(str(err), token)}") from None
        if not cloned.is_empty:
            cloned.free()
            shutil.rmtree(path, ignore_errors=True)
            path.mkdir(parents=True, exist_ok=True)
            raise WorkspaceError(
                f"cannot clone {redact_url(repo)} at branch {branch}: {_clean(str(err), token)}"
            ) from None
        cloned.free()
        separate_git_dir(path)
        return ""
    commit = "" if cloned.head_is_unborn else str(cloned.head.target)
    cloned.free()
    separate_git_dir(path)
    return commit


def secret_parts(secret: str) -> list[str]:
    """What to redact for `secret`: itself and, for a multi-line one (an SSH key), each long line."""
    if not secret:
        return []
    return [secret, *(line.strip() for line in secret.splitlines() if len(line.strip()) >= 16 and line != secret)]


def _clean(message: str, token: str) -> str:
    for part in secret_parts(token):
        message = message.replace(part, "***")
    return redact_url(message)


def remove(path: pathlib.Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
