"""Stacked workspaces and ChangeSet publishing with pygit2 (seed 000, "Stacked workspaces").

A Task's workspace is a clone of the project repository at its branch (the base commit) with
the ChangeSets of the Tasks it depends on merged in (the start commit). Publishing commits the
workspace, force-updates `drover/<change_id>/<task_id>` and pushes it to origin. A Candidate is
the same merge of ChangeSets onto the base branch, pushed as `drover/<change_id>/candidate`.

The git secret (a token, or an SSH deploy key held in memory) only ever reaches git through
`pygit2.RemoteCallbacks` credentials: never in a URL, a file, an exception message, a result or a
log line, and never a run's command.

Nothing here trusts the worktree, which a run's sandbox wrote: the repository is opened from
agentd's git directory beside it (`workspace.open_repository`), fetches and pushes go to the URL
the assignment names (never a remote's configured URL), and the commit is the worktree's files as
libgit2 reads them: symlinks as links (never followed), FIFOs and devices left out, no filter,
hook or fsmonitor run (libgit2 has none of them).
"""

from __future__ import annotations

import dataclasses
import pathlib
import shutil
import tempfile
import urllib.parse
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager

import pygit2
from pygit2.enums import DiffOption, ResetMode

from drover.core import build_outputs, mirror
from drover.core.git_auth import GitCallbacks
from drover.core.workspace import (
    WorkspaceError,
    _clean,
    open_repository,
    trusting_pygit2,
)

# agentd (root) hands each workspace to the session user and must still open and publish it;
# libgit2's owner check (git's safe.directory) would refuse a repository another user owns.
trusting_pygit2()

DEFAULT_IDENTITY = ("Drover Agent", "agent@drover.invalid")
"""Author and committer of workspace commits: (name, email)."""


class MergeConflict(WorkspaceError):
    """Merging ChangeSet `changeset_id` conflicted in `files`; nothing was committed or pushed."""

    def __init__(self, changeset_id: str, files: list[str]) -> None:
        super().__init__(f"merging ChangeSet {changeset_id} conflicts in {', '.join(files)}")
        self.changeset_id = changeset_id
        self.files = files


@dataclasses.dataclass(frozen=True)
class StackItem:
    """A published ChangeSet to merge: its branch in origin and the commit recorded for it."""

    changeset_id: str
    task_id: str
    branch: str
    commit: str
    """Commit to merge; "" merges the branch tip."""
    created_at: str
    """ISO-8601 UTC creation time, all in one format so that strings sort chronologically."""


@dataclasses.dataclass(frozen=True)
class ChangeSetResult:
    """A published ChangeSet (seed 000's ChangeSet table)."""

    branch: str
    commit: str
    base_commit: str
    start_commit: str
    stacked_on: list[str]
    """ChangeSet ids merged before the first edit, in merge order."""
    files: list[str]
    """Every path that differs from base_commit (dependencies' files included)."""
    own_files: list[str]
    """Paths that differ between start_commit and commit: this Task's own edits."""
    patch: str
    """Unified git diff (binary-safe) from start_commit to commit; start == base when not stacked."""
    left_out: list[str] = dataclasses.field(default_factory=list)
    """Build outputs in the workspace that the commit leaves out (drover.core.build_outputs), sorted."""


@dataclasses.dataclass(frozen=True)
class CandidateResult:
    """A composed Candidate pushed to origin."""

    branch: str
    commit: str
    files: list[str]
    """Every path that differs from base_commit."""
    base_commit: str


@contextmanager
def _git_errors(what: str, token: str) -> Iterator[None]:
    """Turn pygit2 failures into WorkspaceError with a message free of credentials."""
    try:
        yield
    except (pygit2.GitError, KeyError, ValueError) as err:
        raise WorkspaceError(f"{what}: {_clean(str(err), token)}") from None


class Workspace:
    """A clone with its stack merged; the agent edits `path`, then `publish` ships it."""

    def __init__(
        self,
        path: pathlib.Path,
        base_commit: str,
        start_commit: str,
        stacked_on: list[str],
        token: str,
        identity: tuple[str, str],
        repo_url: str = "",
    ) -> None:
        self.path = path
        self.repo_url = repo_url
        """Where ChangeSets are pushed: the assignment's repository, never a remote of the workspace."""
        self.base_commit = base_commit
        """Tip of the branch the workspace was cloned at ("" for an empty repository)."""
        self.start_commit = start_commit
        """HEAD after the stacked merges (== base_commit when nothing is stacked)."""
        self.stacked_on = list(stacked_on)
        self._token = token
        self._identity = identity

    def __repr__(self) -> str:
        return (
            f"Workspace(path={str(self.path)!r}, base_commit={self.base_commit!r}, "
            f"start_commit={self.start_commit!r}, stacked_on={self.stacked_on!r})"
        )

    def publish(
        self,
        change_id: str,
        task_id: str,
        message: str,
        leave_out: Sequence[str] = build_outputs.DEFAULT_BUILD_OUTPUTS,
        asked_for: Collection[str] = (),
        branch: str = "",
    ) -> ChangeSetResult:
        """Commit everything in the workspace (adds, edits, deletions; .gitignore respected) on
        top of HEAD, force-update `branch` (the project's Task branch; "": `drover/<change_id>/<task_id>`)
        there and push it to origin.

        Build outputs are left out: a path matching a pattern of `leave_out` that HEAD does not
        track and no write tool asked for (`asked_for`, paths relative to the root) stays in the
        workspace but not in the commit; the result lists them.

        When the tree equals HEAD's no commit is made and HEAD is published as it is: an
        untouched workspace publishes start_commit with own_files == [] (and files == [] unless
        stacked), and publishing again without further edits gives the same result."""
        branch = _checked_branch(branch) if branch else _branch_name(change_id, task_id)
        if not self.repo_url:
            raise WorkspaceError("nothing to publish to: the workspace has no repository URL")
        repo = open_repository(self.path)
        with _git_errors("cannot commit the workspace", self._token):
            repo.index.read()
            repo.index.add_all()  # also drops deleted files; ignored untracked files stay out
            left_out = _leave_out(repo, leave_out, asked_for)
            repo.index.write()
            tree = repo.index.write_tree()
            head = None if repo.head_is_unborn else repo.head.target
            if head is not None and repo[head].peel(pygit2.Commit).tree_id == tree:
                commit = head
            elif head is None and not len(repo[tree].peel(pygit2.Tree)):
                raise WorkspaceError("nothing to publish: the repository is empty and so is the workspace")
            else:
                sig = pygit2.Signature(*self._identity)
                commit = repo.create_commit("HEAD", sig, sig, message, tree, [head] if head else [])
        _push(repo, self.repo_url, branch, repo[commit].peel(pygit2.Commit), self._token)
        return ChangeSetResult(
            branch=branch,
            commit=str(commit),
            base_commit=self.base_commit,
            start_commit=self.start_commit,
            stacked_on=list(self.stacked_on),
            files=_changed_paths(_diff(repo, self.base_commit, str(commit))),
            own_files=_changed_paths(_diff(repo, self.start_commit, str(commit))),
            patch=_diff(repo, self.start_commit, str(commit)).patch or "",
            left_out=left_out,
        )


def _leave_out(repo: pygit2.Repository, patterns: Sequence[str], asked_for: Collection[str]) -> list[str]:
    """Drop from the index the build outputs HEAD does not track and no write tool asked for; answer them."""
    tracked = pygit2.Index()
    if not repo.head_is_unborn:
        tracked.read_tree(repo.head.peel(pygit2.Tree))
    known = {entry.path for entry in tracked}
    left = build_outputs.left_out((entry.path for entry in repo.index), patterns, known, set(asked_for))
    for path in left:
        repo.index.remove(path)
    return left


def open_workspace(
    path: pathlib.Path,
    repo_url: str,
    branch: str,
    stack: Sequence[StackItem],
    token: str = "",
    identity: tuple[str, str] = DEFAULT_IDENTITY,
    mirror_dir: pathlib.Path | None = None,
) -> Workspace:
    """Clone `repo_url` at `branch` into `path` (absent or empty; through this agent's mirror under
    `mirror_dir` when given, drover/core/mirror.py), then fetch each stack item's
    branch from origin and merge its commit into HEAD in the order given (the control plane sends
    dependencies first): fast-forward when possible, otherwise a merge commit.

    Raises MergeConflict naming the ChangeSet and files, or WorkspaceError; either way `path` is
    left an empty directory."""
    if not repo_url:
        raise WorkspaceError("a workspace needs a repository")
    base = mirror.prepare(path, repo_url, branch, token, mirror_dir)  # WorkspaceError leaves `path` empty
    try:
        repo = open_repository(path)
        with _git_errors("cannot prepare the workspace", token):
            if repo.head_is_unborn and branch:  # an empty clone's HEAD names `master`
                repo.set_head(f"refs/heads/{branch}")
            for item in stack:
                _merge(repo, item, _fetch(repo, repo_url, item, token), pygit2.Signature(*identity))
            start = "" if repo.head_is_unborn else str(repo.head.target)
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True, exist_ok=True)
        raise
    return Workspace(path, base, start, [item.changeset_id for item in stack], token, identity, repo_url)


def compose_candidate(
    repo_url: str,
    base_branch: str,
    change_id: str,
    changesets: Sequence[StackItem],
    work_dir: pathlib.Path,
    token: str = "",
    identity: tuple[str, str] = DEFAULT_IDENTITY,
) -> CandidateResult:
    """Merge every ChangeSet, in the order given, onto `base_branch` in a fresh clone (a new
    directory under `work_dir`, removed afterwards) and push it as `drover/<change_id>/candidate`.
    A conflict raises MergeConflict and pushes nothing."""
    branch = _branch_name(change_id, "candidate")
    work_dir.mkdir(parents=True, exist_ok=True)
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="candidate-", dir=work_dir))
    clone = scratch / "repo"
    try:
        ws = open_workspace(clone, repo_url, base_branch, changesets, token, identity)
        repo = open_repository(clone)
        if repo.head_is_unborn:
            raise WorkspaceError("nothing to compose: the repository is empty and so is the stack")
        _push(repo, repo_url, branch, repo.head.peel(pygit2.Commit), token)
        return CandidateResult(
            branch=branch,
            commit=ws.start_commit,
            base_commit=ws.base_commit,
            files=_changed_paths(_diff(repo, ws.base_commit, ws.start_commit)),
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _branch_name(change_id: str, task_id: str) -> str:
    if not change_id or not task_id:
        raise WorkspaceError(f"not a valid branch name: 'drover/{change_id}/{task_id}'")
    return _checked_branch(f"drover/{change_id}/{task_id}")


def _checked_branch(name: str) -> str:
    if not pygit2.reference_is_valid_name(f"refs/heads/{name}"):
        raise WorkspaceError(f"not a valid branch name: {name!r}")
    return name


def _fetch(repo: pygit2.Repository, url: str, item: StackItem, token: str) -> pygit2.Oid:
    """Fetch the item's branch from `url` (the assignment's repository); answer the commit to merge."""
    ref = f"refs/remotes/origin/{item.branch}"
    with _git_errors(f"cannot fetch ChangeSet {item.changeset_id} ({item.branch})", token):
        repo.remotes.create_anonymous(url).fetch([f"+refs/heads/{item.branch}:{ref}"], callbacks=GitCallbacks(token))
        tip = repo.references[ref].target
        commit = repo.get(item.commit) if item.commit else repo[tip]
    if commit is None or (commit.id != tip and not repo.descendant_of(tip, commit.id)):
        raise WorkspaceError(f"ChangeSet {item.changeset_id}: commit {item.commit} is not on {item.branch}")
    return commit.id


def _merge(repo: pygit2.Repository, item: StackItem, theirs: pygit2.Oid, sig: pygit2.Signature) -> None:
    """Merge `theirs` into HEAD without touching the work tree until the result is whole."""
    if repo.head_is_unborn:
        branch = repo.references["HEAD"].target  # HEAD is symbolic while unborn: the branch's name
        repo.references.create(str(branch), theirs)
        repo.checkout_head(strategy=pygit2.enums.CheckoutStrategy.FORCE)
        return
    ours = repo.head.target
    if ours == theirs or repo.descendant_of(ours, theirs):
        return
    if repo.descendant_of(theirs, ours):
        repo.reset(theirs, ResetMode.HARD)
        return
    index = repo.merge_commits(ours, theirs)
    if index.conflicts is not None:
        files = sorted({entry.path for entries in index.conflicts for entry in entries if entry})
        raise MergeConflict(item.changeset_id, files)
    tree = index.write_tree(repo)
    message = f"Merge ChangeSet {item.changeset_id} ({item.branch})"
    repo.reset(repo.create_commit(None, sig, sig, message, tree, [ours, theirs]), ResetMode.HARD)


def detach(path: pathlib.Path) -> None:
    """Leave the clone at `path` on its commit, detached: its branch (a parked Task's) is then published
    like any other, force-updated to the new commit."""
    repo = open_repository(path)
    if not repo.head_is_unborn and not repo.head_is_detached:
        repo.set_head(repo.head.target)


def _push(repo: pygit2.Repository, url: str, branch: str, commit: pygit2.Commit, token: str) -> None:
    """Force-update `branch` locally and at `url`, the assignment's repository (pushing the same
    commit again is a no-op)."""
    ref = f"refs/heads/{branch}"
    with _git_errors(f"cannot push {branch}", token):
        repo.branches.local.create(branch, commit, force=True)
        local = _local_repository(url)
        if local is not None and not local.is_bare:
            _push_to_non_bare(local, repo, ref)
            return
        callbacks = GitCallbacks(token)
        repo.remotes.create_anonymous(url).push([f"+{ref}:{ref}"], callbacks=callbacks)
    if callbacks.rejected:
        raise WorkspaceError(f"origin refused {branch}: {_clean(callbacks.rejected.popitem()[1], token)}")


def _local_repository(url: str) -> pygit2.Repository | None:
    """The origin repository when `url` is a path on this machine, else None."""
    if url.startswith("file://"):
        url = urllib.parse.unquote(urllib.parse.urlparse(url).path)
    elif "://" in url or not pathlib.Path(url).is_dir():
        return None
    try:
        return pygit2.Repository(url)
    except pygit2.GitError:
        return None


def _push_to_non_bare(origin: pygit2.Repository, repo: pygit2.Repository, ref: str) -> None:
    """libgit2's local transport refuses every push to a non-bare repository, so the origin
    fetches the branch from the workspace instead; like git, never the checked-out branch."""
    if not origin.head_is_detached and origin.references["HEAD"].target == ref:
        raise WorkspaceError(f"origin has {ref} checked out; refusing to update it")
    origin.remotes.create_anonymous(str(pathlib.Path(repo.path).resolve())).fetch([f"+{ref}:{ref}"])


def _diff(repo: pygit2.Repository, old: str, new: str) -> pygit2.Diff:
    """Diff from commit `old` ("" is the empty tree) to commit `new`, binary-safe."""
    new_tree = repo[new].peel(pygit2.Tree)
    if not old:
        return new_tree.diff_to_tree(flags=DiffOption.SHOW_BINARY, swap=True)
    return repo[old].peel(pygit2.Tree).diff_to_tree(new_tree, flags=DiffOption.SHOW_BINARY)


def _changed_paths(diff: pygit2.Diff) -> list[str]:
    return sorted({path for delta in diff.deltas for path in (delta.old_file.path, delta.new_file.path)})
