"""The canonical commit of a project: its branch tip, read by the control plane for Context Packets
and the memory index. A local repository is read in place; a remote one through a bare mirror in
the data dir, fetched with the project's token (only in pygit2 credential callbacks)."""

from __future__ import annotations

import pathlib
import re

import pygit2

from drover.core.workspace import WorkspaceError, redact_url


def _callbacks(token: str) -> pygit2.RemoteCallbacks | None:
    if not token:
        return None
    return pygit2.RemoteCallbacks(credentials=pygit2.UserPass("x-access-token", token))


def _is_local(repo: str) -> bool:
    return ("://" not in repo and not repo.startswith("git@")) or repo.startswith("file://")


def open_canonical(
    project: str, repo: str, branch: str, mirrors: pathlib.Path, token: str = ""
) -> tuple[pygit2.Repository, str]:
    """The repository and the commit id at the tip of `branch` ("" for an empty repository)."""
    try:
        if _is_local(repo):
            found = pygit2.Repository(repo.removeprefix("file://"))
        else:
            path = mirrors / (re.sub(r"[^A-Za-z0-9_.-]", "_", project) + ".git")
            if path.exists():
                found = pygit2.Repository(str(path))
                found.remotes["origin"].fetch(["+refs/heads/*:refs/heads/*"], callbacks=_callbacks(token))
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                found = pygit2.clone_repository(repo, str(path), bare=True, callbacks=_callbacks(token))
    except (pygit2.GitError, KeyError, ValueError) as err:
        message = str(err).replace(token, "***") if token else str(err)
        raise WorkspaceError(f"cannot read {redact_url(repo)}: {redact_url(message)}") from None
    ref = found.references.get(f"refs/heads/{branch}")
    if ref is None:
        return found, ""
    return found, str(ref.peel(pygit2.Commit).id)
