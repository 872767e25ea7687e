"""A forge's branches moved for a pull request (issue 28): a composed candidate put on the pull request's
branch (force-updated: the branch is Drover's), and a fix round's candidate fast-forwarded onto it (never
forced: a reviewer may have pushed). Both through a bare scratch clone removed afterwards, with the same
credential-safe fetch and push as drover.core.gitspace, whose errors never hold the token."""

from __future__ import annotations

import pathlib
import shutil
import tempfile

import pygit2

from drover.core import gitspace


class PushRefused(gitspace.WorkspaceError):
    """The forge was reached and the move is refused for good: the candidate is not where it was, does
    not descend from the branch's tip, or the forge refused the update (trying again will not help)."""


def push_branch(repo_url: str, source: str, commit: str, target: str, work_dir: pathlib.Path, token: str = "") -> None:
    """Force-update branch `target` at `repo_url` to `commit`, which must be on branch `source` there (a
    composed candidate onto its pull request's branch), through a bare scratch clone removed afterwards."""
    target = gitspace._checked_branch(target)
    work_dir.mkdir(parents=True, exist_ok=True)
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="branch-", dir=work_dir))
    try:
        repo = pygit2.init_repository(str(scratch / "repo.git"), bare=True)
        found = repo[
            gitspace._fetch(
                repo, repo_url, gitspace.StackItem("", "", gitspace._checked_branch(source), commit, ""), token
            )
        ]
        gitspace._push(repo, repo_url, target, found.peel(pygit2.Commit), token)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def fast_forward(
    repo_url: str, source_branch: str, commit: str, branch: str, work_dir: pathlib.Path, token: str = ""
) -> None:
    """Move `branch` at `repo_url` to `commit`, the tip of `source_branch` there, when it descends from
    `branch`'s tip (a fix round's candidate onto its pull request's branch); never a forced update.
    PushRefused when it does not or the forge refuses the update, gitspace.WorkspaceError when the forge
    could not be reached; both free of the token."""
    work_dir.mkdir(parents=True, exist_ok=True)
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="fast-forward-", dir=work_dir))
    try:
        repo = pygit2.init_repository(str(scratch), bare=True)
        refs = {gitspace._checked_branch(b): f"refs/remotes/origin/{b}" for b in (source_branch, branch)}
        with gitspace._git_errors(f"cannot fetch {source_branch} and {branch}", token):
            specs = [f"+refs/heads/{b}:{ref}" for b, ref in refs.items()]
            repo.remotes.create_anonymous(repo_url).fetch(specs, callbacks=gitspace.GitCallbacks(token))
            source, tip = repo.references[refs[source_branch]].target, repo.references[refs[branch]].target
        if str(source) != commit:
            raise PushRefused(f"{source_branch} is at {source}, not {commit}")
        if source != tip and not repo.descendant_of(source, tip):
            raise PushRefused(f"{commit} does not descend from {branch}'s tip {tip}: not a fast-forward")
        callbacks, ref = gitspace.GitCallbacks(token), f"refs/heads/{branch}"
        with gitspace._git_errors(f"cannot push {branch}", token):
            repo.references.create(ref, source, force=True)
            repo.remotes.create_anonymous(repo_url).push([f"{ref}:{ref}"], callbacks=callbacks)
        if callbacks.rejected:
            raise PushRefused(f"origin refused {branch}: {gitspace._clean(callbacks.rejected.popitem()[1], token)}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
