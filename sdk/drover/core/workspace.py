"""A run's fresh workspace: a pygit2 clone of the project repository at its default branch."""

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


def trusting_pygit2() -> Any:
    """pygit2 with libgit2's owner check off: agentd (root) clones a workspace, hands it to the
    session user, and must still open and publish it; the check would refuse a repository owned
    by another user."""
    import pygit2  # here, not at the top: a run without a repository starts ~60 ms sooner

    pygit2.option(pygit2.enums.Option.SET_OWNER_VALIDATION, 0)
    return pygit2


def hand_over(path: pathlib.Path, user: str | tuple[int, int] | None) -> None:
    """Give `path` and everything in it to `user` (a name, or a uid and gid), so the command can work on
    its workspace. Nothing to do without a user or when agentd is not root (then the command runs as
    agentd's user)."""
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
            os.lchown(os.path.join(parent, name), uid, gid)


def _callbacks(token: str) -> pygit2.RemoteCallbacks | None:
    if not token:
        return None
    pygit2 = trusting_pygit2()
    return pygit2.RemoteCallbacks(credentials=pygit2.UserPass("x-access-token", token))


def prepare(path: pathlib.Path, repo: str, branch: str, token: str = "") -> str:
    """Clone `repo` at `branch` into `path` (an empty directory when there is no repo).
    Answers the commit checked out ("" for an empty workspace or an empty repository)."""
    path.mkdir(parents=True, exist_ok=True)
    if not repo:
        return ""
    pygit2 = trusting_pygit2()
    try:
        cloned = pygit2.clone_repository(repo, str(path), checkout_branch=branch or None, callbacks=_callbacks(token))
    except (pygit2.GitError, KeyError, ValueError) as err:
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True, exist_ok=True)
        try:  # an empty repository has no branch to check out
            cloned = pygit2.clone_repository(repo, str(path), callbacks=_callbacks(token))
        except (pygit2.GitError, KeyError, ValueError):
            raise WorkspaceError(f"cannot clone {redact_url(repo)}: {_clean(str(err), token)}") from None
        if not cloned.is_empty:
            raise WorkspaceError(
                f"cannot clone {redact_url(repo)} at branch {branch}: {_clean(str(err), token)}"
            ) from None
        return ""
    return "" if cloned.head_is_unborn else str(cloned.head.target)


def _clean(message: str, token: str) -> str:
    return redact_url(message.replace(token, "***") if token else message)


def remove(path: pathlib.Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
