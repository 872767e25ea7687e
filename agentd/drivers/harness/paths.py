"""Where the file tools may reach: paths inside the workspace, never its git directory.

A model names files relative to the workspace root. resolve_inside turns such a name into
a real path, following symlinks the way the operating system would, and refuses any name
that would land outside the root or inside a `.git` directory.
"""

from __future__ import annotations

import errno
import os
import pathlib

from agentd.errors import AgentdError

GIT_DIR = ".git"

LIST_LIMIT = 2000
"""Entries list_files returns at most, before its truncation marker."""


class PathEscape(AgentdError):
    """The file tools may not use `path`: `reason` says why (safe to show the model)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"refused path {path!r}: {reason}")
        self.path = path
        self.reason = reason


def _is_git_dir(part: str) -> bool:
    # casefold: on a case-insensitive file system ".GIT" is the same directory.
    return part.casefold() == GIT_DIR


def _lexical_parts(relative: str) -> list[str]:
    """The components of `relative` with "." and "dir/.." folded; PathEscape if ".." climbs
    above the root. Symlinks are not considered here; resolve_inside checks them after."""
    parts: list[str] = []
    for part in relative.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                raise PathEscape(relative, "'..' leaves the workspace")
            parts.pop()
            continue
        parts.append(part)
    return parts


def _real(path: pathlib.Path, shown: str) -> pathlib.Path:
    """`path` with every symlink followed; a missing tail is kept as written."""
    try:
        return pathlib.Path(os.path.realpath(path, strict=True))
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise PathEscape(shown, "the path goes through a symlink loop") from err
    # Missing (or under a non-directory): resolve the nearest existing ancestor, keep the rest.
    return pathlib.Path(os.path.realpath(path))


def resolve_inside(root: pathlib.Path, relative: str) -> pathlib.Path:
    """The real path `relative` names inside `root`, or PathEscape.

    Refused: empty names, NUL bytes, absolute paths, '..' that climbs above the root, any
    `.git` component, and names whose symlinks (a parent directory or the file itself, even a
    dangling one) resolve outside the root or into `.git`. The file and its parents need not
    exist. "." names the root itself.
    """
    if not relative:
        raise PathEscape(relative, "the path is empty")
    if "\x00" in relative:
        raise PathEscape(relative, "the path contains a NUL byte")
    if relative.startswith("/") or os.path.isabs(relative):
        raise PathEscape(relative, "absolute paths are not allowed; name the file relative to the workspace root")
    parts = _lexical_parts(relative)
    if any(_is_git_dir(part) for part in parts):
        raise PathEscape(relative, "the git directory (.git) is not open to file tools")

    real_root = _real(root, str(root))
    resolved = _real(real_root.joinpath(*parts), relative)
    if resolved != real_root and not resolved.is_relative_to(real_root):
        raise PathEscape(relative, "it resolves outside the workspace (through a symlink)")
    if any(_is_git_dir(part) for part in resolved.relative_to(real_root).parts):
        raise PathEscape(relative, "it resolves into the git directory (.git) through a symlink")
    return resolved


def list_tree(root: pathlib.Path, max_entries: int = LIST_LIMIT) -> list[str]:
    """Sorted posix paths, relative to `root`, of everything that is not a directory.

    `.git` is skipped at any depth. Symlinks are listed as entries and never followed, so a
    symlinked directory appears as one entry. Past `max_entries`, the list ends with a marker
    entry `[truncated: N of M entries shown]`.
    """
    if max_entries < 1:
        raise ValueError(f"max_entries must be at least 1, not {max_entries}")
    entries: list[str] = []
    for directory, dirnames, filenames in os.walk(root, followlinks=False):
        base = pathlib.Path(directory).relative_to(root)
        kept: list[str] = []
        for name in dirnames:
            if _is_git_dir(name):
                continue
            if os.path.islink(os.path.join(directory, name)):
                entries.append((base / name).as_posix())
            else:
                kept.append(name)
        dirnames[:] = kept
        entries.extend((base / name).as_posix() for name in filenames if not _is_git_dir(name))
    entries.sort()
    if len(entries) > max_entries:
        return entries[:max_entries] + [f"[truncated: {max_entries} of {len(entries)} entries shown]"]
    return entries
