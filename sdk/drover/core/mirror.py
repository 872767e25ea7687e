"""agentd's repository mirrors: per repository, a bare copy of its branches and tags on the agent's
disk, so that a run fetches from the forge only what changed since the last run (or since agentd's
last refresh between runs, agentd/daemon/mirrors.py) and clones from local disk.

    <mirror_dir>/<sha256 of the URL>.git    the bare mirror: refs/heads/* and refs/tags/*, pruned
    <mirror_dir>/<sha256 of the URL>.lock   flock: held while a mirror is fetched into or cloned from

The mirror directory is root's alone (0700) and never shown to a run: a run's workspace is a clone of
the mirror through git's transport (`file://`: objects copied, never hard-linked, so nothing a run's
user is handed is shared with the mirror), its origin the project's URL. Fetches are anonymous: neither
the URL nor a credential is written to the mirror. A fetch that fails fails the run's clone as a direct
clone would: a run never starts from a mirror that could not be brought up to date.

`python -m drover.core.mirror` fetches one mirror, told {"mirror", "url", "secret"} on stdin (never
argv or the environment): agentd's refresh between runs."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import pathlib
import shutil
import sys
import tempfile
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from drover.core import workspace
from drover.core.workspace import WorkspaceError, _clean, redact_url, trusting_pygit2

if TYPE_CHECKING:
    import pygit2

MAX_PACKS = 64
"""Each fetch adds a pack and libgit2 never repacks: past this many the mirror is fetched anew, whole."""
REFSPECS = ["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"]


def prepare(path: pathlib.Path, repo: str, branch: str, token: str = "", mirror_dir: pathlib.Path | None = None) -> str:
    """workspace.prepare through this agent's mirror of `repo` under `mirror_dir`, brought up to date
    first, when one is given and the branch is named; else, or when the mirror has no such branch,
    directly. A damaged mirror is removed once a direct clone shows the forge answers."""
    if mirror_dir is None or not repo or not branch:
        return workspace.prepare(path, repo, branch, token)
    path.mkdir(parents=True, exist_ok=True)
    source = path_for(mirror_dir, repo)
    try:
        with locked(source):
            update(source, repo, token)
            commit = clone(source, repo, branch, path)
    except (WorkspaceError, OSError):
        shutil.rmtree(path, ignore_errors=True)
        commit = workspace.prepare(path, repo, branch, token)  # the forge's refusal says why
        with contextlib.suppress(OSError), locked(source):
            shutil.rmtree(source, ignore_errors=True)  # the forge answered: the mirror was the trouble
        return commit
    if commit is None:
        return workspace.prepare(path, repo, branch, token)
    workspace.separate_git_dir(path)
    return commit


def path_for(mirror_dir: pathlib.Path, url: str) -> pathlib.Path:
    """Where `url`'s mirror lives under `mirror_dir` (named by a hash: no URL, no credential on disk)."""
    return mirror_dir / f"{hashlib.sha256(url.encode()).hexdigest()[:40]}.git"


@contextlib.contextmanager
def locked(mirror: pathlib.Path) -> Iterator[None]:
    """The mirror's lock, exclusive: one fetch or clone of it at a time on this agent."""
    mirror.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(mirror.parent, 0o700)
    fd = os.open(mirror.with_suffix(".lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def update(mirror: pathlib.Path, url: str, secret: str = "") -> None:
    """Fetch `url`'s branches and tags into `mirror` (created when absent or damaged), pruning what the
    repository no longer has. Call with the lock held. WorkspaceError (credential-free) on failure."""
    pygit2 = trusting_pygit2()
    from drover.core.git_auth import git_callbacks

    if not (mirror / "HEAD").is_file() or mirror.is_symlink() or len(_packs(mirror)) > MAX_PACKS:
        _create(mirror)
    repo = _open(mirror)
    try:
        repo.remotes.create_anonymous(url).fetch(
            REFSPECS, callbacks=git_callbacks(secret), prune=pygit2.enums.FetchPrune.PRUNE
        )
    except (pygit2.GitError, KeyError, ValueError) as err:
        raise WorkspaceError(f"cannot clone {redact_url(url)}: {_clean(str(err), secret)}") from None
    finally:
        repo.free()
        (mirror / "FETCH_HEAD").unlink(missing_ok=True)  # it names the URL: nothing on disk does


def _packs(mirror: pathlib.Path) -> list[pathlib.Path]:
    return list((mirror / "objects" / "pack").glob("*.pack"))


def _open(mirror: pathlib.Path) -> pygit2.Repository:
    """The mirror's repository; WorkspaceError when it is damaged (the caller's clone replaces it)."""
    pygit2 = trusting_pygit2()
    try:
        return pygit2.Repository(
            str(mirror), pygit2.enums.RepositoryOpenFlag.NO_SEARCH | pygit2.enums.RepositoryOpenFlag.BARE
        )
    except (pygit2.GitError, KeyError, ValueError) as err:
        raise WorkspaceError(f"the repository mirror is damaged: {err}") from None


def _create(mirror: pathlib.Path) -> None:
    """A new bare repository at `mirror`, made under a temporary name and renamed into place."""
    pygit2 = trusting_pygit2()
    shutil.rmtree(mirror, ignore_errors=True)
    scratch = pathlib.Path(tempfile.mkdtemp(prefix=".new-", dir=mirror.parent))
    try:
        pygit2.init_repository(str(scratch / "repo.git"), bare=True).free()
        os.rename(scratch / "repo.git", mirror)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def clone(mirror: pathlib.Path, url: str, branch: str, path: pathlib.Path) -> str | None:
    """Make `path` (empty) what a clone of `url` at `branch` would be, from `mirror`: its objects
    copied (never linked), its branches and tags as origin's, `branch` checked out and tracking
    origin's. (libgit2's clone through `file://` repacks every object: ten times slower.) Answers the
    commit checked out, or None (and `path` left empty) when the mirror has no such branch: the caller
    clones from `url` itself, which says why. Call with the lock held."""
    pygit2 = trusting_pygit2()
    source = _open(mirror)
    try:
        head = f"refs/heads/{branch}"
        if head not in source.references:
            return None
        refs = {name: source.references[name].target for name in source.references if not name.endswith("/HEAD")}
    finally:
        source.free()
    try:
        return _copy(mirror, refs, url, branch, path)
    except (pygit2.GitError, KeyError, ValueError, OSError):
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True, exist_ok=True)
        return None


def _copy(mirror: pathlib.Path, refs: dict[str, Any], url: str, branch: str, path: pathlib.Path) -> str:
    pygit2 = trusting_pygit2()
    repo = pygit2.init_repository(str(path), initial_head=branch)
    try:
        shutil.copytree(mirror / "objects", path / ".git" / "objects", dirs_exist_ok=True)
        for name, target in refs.items():
            repo.references.create(name.replace("refs/heads/", "refs/remotes/origin/", 1), target, force=True)
        remote = repo.remotes.create("origin", url)
        commit = refs[f"refs/heads/{branch}"]
        local = repo.branches.local.create(branch, repo[commit].peel(pygit2.Commit))
        local.upstream = repo.branches.remote[f"{remote.name}/{branch}"]
        repo.checkout_head(strategy=pygit2.enums.CheckoutStrategy.FORCE)
        return str(commit)
    finally:
        repo.free()


def refresh(mirror: pathlib.Path, url: str, secret: str = "") -> None:
    """Bring `mirror` up to date now (agentd between runs)."""
    with locked(mirror):
        update(mirror, url, secret)


def main() -> int:
    told = json.loads(sys.stdin.read())
    try:
        refresh(pathlib.Path(told["mirror"]), told["url"], told.get("secret", ""))
    except WorkspaceError as err:
        print(err, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
