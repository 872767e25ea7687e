"""The bare repositories behind the fake's repositories, read and seeded with git's plumbing."""

from __future__ import annotations

import os
import pathlib
import subprocess
from typing import Any

IDENTITY = {
    "GIT_AUTHOR_NAME": "Fake GitHub",
    "GIT_AUTHOR_EMAIL": "noreply@127.0.0.1",
    "GIT_COMMITTER_NAME": "Fake GitHub",
    "GIT_COMMITTER_EMAIL": "noreply@127.0.0.1",
}


def git(path: pathlib.Path, *args: str, stdin: str | None = None) -> str:
    env = {**os.environ, **IDENTITY, "GIT_DIR": str(path)}
    done = subprocess.run(["git", *args], input=stdin, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise LookupError(done.stderr.strip())
    return done.stdout.strip()


def init(path: pathlib.Path, branch: str, files: dict[str, str]) -> None:
    """A bare repository whose `branch` holds one commit of `files` (none: an empty repository)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", "--bare", "-b", branch, str(path)], check=True)
    git(path, "config", "http.receivepack", "true")
    if not files:
        return
    entries = [
        f"100644 blob {git(path, 'hash-object', '-w', '--stdin', stdin=text)}\t{name}" for name, text in files.items()
    ]
    tree = git(path, "mktree", stdin="\n".join(entries) + "\n")
    git(path, "update-ref", f"refs/heads/{branch}", git(path, "commit-tree", tree, "-m", "Initial commit"))


def sha(path: pathlib.Path, ref: str) -> str | None:
    """The commit `ref` (a branch, a tag or a sha) names, None if none."""
    try:
        return git(path, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except LookupError:
        return None


def branch(path: pathlib.Path, name: str) -> str | None:
    """The head commit of branch `name`, None if there is no such branch."""
    return sha(path, f"refs/heads/{name}")


def commit(path: pathlib.Path, ref: str) -> dict[str, Any]:
    """A check suite's head_commit: id, tree_id, message, timestamp, author and committer."""
    fields = git(path, "show", "-s", "--format=%H%x00%T%x00%an%x00%ae%x00%cn%x00%ce%x00%cI%x00%B", ref).split("\0")
    out: dict[str, Any] = {"id": fields[0], "tree_id": fields[1], "message": fields[7].strip(), "timestamp": fields[6]}
    return out | {
        "author": {"name": fields[2], "email": fields[3]},
        "committer": {"name": fields[4], "email": fields[5]},
    }
