"""The canonical commit of a project: its branch tip, read by the control plane for Context Packets
and the memory index. A local repository is read in place; a remote one through a bare mirror in
the data dir, fetched with the project's git secret, a token or an SSH key (only in pygit2 credential
callbacks; services/credentials.py `git_secret`)."""

from __future__ import annotations

import pathlib
import re
import shutil
import tempfile

import pygit2

from drover.core.git_auth import git_callbacks
from drover.core.workspace import WorkspaceError, redact_url, secret_parts
from drover.errors import InvalidArgument


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
                found.remotes["origin"].fetch(["+refs/heads/*:refs/heads/*"], callbacks=git_callbacks(token))
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                found = pygit2.clone_repository(repo, str(path), bare=True, callbacks=git_callbacks(token))
    except (pygit2.GitError, KeyError, ValueError) as err:
        message = str(err)
        for part in secret_parts(token):
            message = message.replace(part, "***")
        raise WorkspaceError(f"cannot read {redact_url(repo)}: {redact_url(message)}") from None
    ref = found.references.get(f"refs/heads/{branch}")
    if ref is None:
        return found, ""
    return found, str(ref.peel(pygit2.Commit).id)


def branches(repo: str, token: str = "") -> tuple[str, list[str]]:
    """The branch the repository's HEAD names ("" when it does not say) and its branches, read without
    cloning (`git ls-remote`). WorkspaceError when the repository cannot be read."""
    scratch = tempfile.mkdtemp(prefix="drover-ls-remote-")
    try:
        url = str(pathlib.Path(repo).resolve()) if _is_local(repo) and not repo.startswith("file://") else repo
        if _is_local(repo) and not pathlib.Path(url.removeprefix("file://")).exists():
            raise WorkspaceError(f"{repo} does not exist")
        remote = pygit2.init_repository(scratch, bare=True).remotes.create_anonymous(url)
        heads = remote.list_heads(callbacks=git_callbacks(token))
    except (pygit2.GitError, ValueError) as err:
        message = str(err)
        for part in secret_parts(token):
            message = message.replace(part, "***")
        raise WorkspaceError(f"cannot read {redact_url(repo)}: {redact_url(message)}") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    refs = [str(h.name or "") for h in heads]
    names = sorted(r.removeprefix("refs/heads/") for r in refs if r.startswith("refs/heads/"))
    head = next((str(h.symref_target) for h in heads if h.name == "HEAD" and h.symref_target), "")
    if not head and _is_local(repo):  # an empty repository still says which branch its first commit makes
        try:
            head = str(pygit2.Repository(url.removeprefix("file://")).references["HEAD"].target)
        except (pygit2.GitError, KeyError):
            head = ""
    return str(head).removeprefix("refs/heads/"), names


def checked_branch(repo: str, branch: str, token: str = "") -> tuple[str, str]:
    """The branch a project follows, checked against its repository before anything is stored: the
    repository must be readable and have the branch (default: the one its HEAD names). Answers the
    branch and a note for the operator. It reads the repository: call it outside a transaction."""
    if not repo:
        return branch or "main", ""
    try:
        head, names = branches(repo, token)
    except WorkspaceError as err:
        raise InvalidArgument(str(err), field="repo") from None
    branch = branch or head or "main"
    if not names:
        return branch, " (the repository has no commit yet: runs start once it has one)"
    if branch not in names:
        raise InvalidArgument(
            f"{redact_url(repo)} has no branch {branch!r}; its branches: {', '.join(names[:10])}", field="branch"
        )
    return branch, ""
