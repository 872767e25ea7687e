"""A run's fresh workspace: a pygit2 clone of the project repository at its default branch."""

from __future__ import annotations

import pathlib
import re
import shutil

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pygit2


class WorkspaceError(Exception):
    """The workspace could not be prepared; the message is safe to show (no credentials)."""


def redact_url(url: str) -> str:
    """Drop any user:password@ from a URL before it is shown."""
    return re.sub(r"(://)[^/@]+@", r"\1", url)


def _callbacks(token: str) -> "pygit2.RemoteCallbacks | None":
    if not token:
        return None
    import pygit2
    return pygit2.RemoteCallbacks(credentials=pygit2.UserPass("x-access-token", token))


def prepare(path: pathlib.Path, repo: str, branch: str, token: str = "") -> str:
    """Clone `repo` at `branch` into `path` (an empty directory when there is no repo).
    Answers the commit checked out ("" for an empty workspace or an empty repository)."""
    path.mkdir(parents=True, exist_ok=True)
    if not repo:
        return ""
    import pygit2  # here, not at the top: a run without a repository starts ~60 ms sooner
    try:
        cloned = pygit2.clone_repository(repo, str(path), checkout_branch=branch or None,
                                         callbacks=_callbacks(token))
    except (pygit2.GitError, KeyError, ValueError) as err:
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True, exist_ok=True)
        try:  # an empty repository has no branch to check out
            cloned = pygit2.clone_repository(repo, str(path), callbacks=_callbacks(token))
        except (pygit2.GitError, KeyError, ValueError):
            raise WorkspaceError(f"cannot clone {redact_url(repo)}: {_clean(str(err), token)}") from None
        if not cloned.is_empty:
            raise WorkspaceError(f"cannot clone {redact_url(repo)} at branch {branch}: "
                                 f"{_clean(str(err), token)}") from None
        return ""
    return "" if cloned.head_is_unborn else str(cloned.head.target)


def _clean(message: str, token: str) -> str:
    return redact_url(message.replace(token, "***") if token else message)


def remove(path: pathlib.Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
