"""The I/O edge of the Context Packet: load what `controlplane.domain.packet.compile_packet` needs.

Everything here reads through the narrow `Tree` Protocol (the repository at the canonical
commit), so the same code runs over a real repository (`GitTree`, pygit2, no checkout) and over
a dict in tests (`DictTree`). Items get their retrieval-order priority here: each source has a
base (`PRIORITY`) and items of one source count up from it in the order they were found.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, Protocol

import pygit2

from controlplane.context import blob_cache, import_graph, import_statements
from controlplane.domain.packet import CONVENTION, Item
from drover.core.filewindow import file_window

PRIORITY = {
    "declared_file": 0,
    "dependency_neighbour": 1000,
    "resource_owner": 2000,
    "dependency_intent": 3000,
    "nearby_intent": 4000,
    "prior_failure": 5000,
    "semantic": 6000,
}
FILE_MAX_CHARS = 8_000  # a file item's text, cut like read_file cuts (its note says where to read on)
CONVENTION_MAX_CHARS = 4_000  # each convention file
CONVENTIONS_MAX = 4  # convention files at most
MAX_NEIGHBOURS = 40  # neighbour items at most; the packet trims further by priority
SOURCE_ROOTS = ("", "src/")  # where absolute imports are looked for
_CONVENTION_NAMES = (
    re.compile(r"(?i)readme(\.[\w-]+)*"),
    re.compile(r"(?i)contributing(\.[\w-]+)*"),
    re.compile(r"AGENTS\.md"),
    re.compile(r"\.editorconfig"),
)
_CONVENTION_DIRS = ("", ".github/", "docs/")


class Tree(Protocol):
    """A repository's files at one commit."""

    def files(self) -> list[str]:
        """Every file path, sorted."""
        ...

    def read(self, path: str) -> str | None:
        """The file's text; None when it is absent, binary or not UTF-8."""
        ...

    def blob_id(self, path: str) -> str:
        """The file's git blob id (hex); KeyError when it is absent."""
        ...


class GitTree:
    """A commit of a git repository, read straight from the object database (no checkout)."""

    def __init__(self, repo_path: str | os.PathLike[str], commit: str = "HEAD") -> None:
        self._repo = pygit2.Repository(str(repo_path))
        resolved = self._repo.revparse_single(commit).peel(pygit2.Commit)
        self.commit = str(resolved.id)
        index = pygit2.Index()
        index.read_tree(resolved.tree)  # flattens the tree in C: fast on large repositories
        self._ids = {e.path: e.id for e in index if e.mode != pygit2.enums.FileMode.COMMIT}
        self._paths = sorted(self._ids)

    def files(self) -> list[str]:
        return list(self._paths)

    def read(self, path: str) -> str | None:
        oid = self._ids.get(path)
        if oid is None:
            return None
        return blob_cache.TEXTS.get(str(oid), lambda: _text(self._repo.read(oid)[1]))  # raw read: no wrapper

    def blob_id(self, path: str) -> str:
        return str(self._ids[path])


class DictTree:
    """An in-memory tree: path -> text. Blob ids are git's, so they match a real commit's."""

    def __init__(self, files: Mapping[str, str | bytes]) -> None:
        self._data = {p: t.encode("utf-8") if isinstance(t, str) else t for p, t in files.items()}
        self._paths = sorted(self._data)
        self._ids: dict[str, str] = {}

    def files(self) -> list[str]:
        return list(self._paths)

    def read(self, path: str) -> str | None:
        data = self._data.get(path)
        return None if data is None else _text(data)

    def blob_id(self, path: str) -> str:
        if path not in self._ids:
            data = self._data[path]
            self._ids[path] = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        return self._ids[path]


def _text(data: bytes) -> str | None:
    if b"\0" in data[:8000]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def python_imports(path: str, text: str, files: Collection[str], roots: Sequence[str] = SOURCE_ROOTS) -> set[str]:
    """The files of `files` that the Python file `path` imports. A module maps to `a/b.py` or
    `a/b/__init__.py` (absolute imports under each of `roots`, relative ones against the file's
    package); `from a import b` is module a.b when that exists, else a; a missing module falls
    back to its deepest existing package. Modules outside `files` are ignored; a syntax error
    gives no imports."""
    fileset = files if isinstance(files, (set, frozenset)) else frozenset(files)
    return import_graph.resolve(path, import_statements.parse_statements(path, text), fileset, roots)


def dependency_neighbours(
    tree: Tree, declared: Iterable[str], graph: import_graph.ImportGraph | None = None
) -> list[str]:
    """The files the declared Python files import (per declared file, in path order), then the
    files that import a declared file (in path order). Declared files themselves are left out.
    With the commit's import `graph`, only the files it says may import a declared file are read, and
    every parse is kept by blob id; the answer is the same."""
    files = tree.files()
    fileset = frozenset(files)
    declared = list(dict.fromkeys(declared))
    skip = set(declared)
    out: dict[str, None] = {}
    for path in declared:
        text = tree.read(path) if path.endswith(".py") else None
        if text:
            imported = graph.exact_imports(tree, path, fileset) if graph else python_imports(path, text, fileset)
            out.update((p, None) for p in sorted(imported) if p not in skip)
    targets = [_Target.of(p) for p in declared if p in fileset and p.endswith(".py")]
    if not targets:
        return list(out)
    keep = {t.path for t in targets}
    if graph is not None:
        out.update((p, None) for p in _graph_importers(tree, graph, targets, skip | set(out), fileset))
        return list(out)
    named = re.compile("|".join(sorted({re.escape(t.name) for t in targets})))  # one pass in C per file
    packages = tuple(t.package for t in targets if t.package)
    for path in files:
        if path in skip or path in out or not path.endswith(".py"):
            continue
        text = tree.read(path)
        if not text or not (named.search(text) or path.startswith(packages)):
            continue
        relative = _RELATIVE.search(text) is not None
        if not any(t.may_be_imported(path, text, relative) for t in targets):
            continue
        if python_imports(path, text, fileset) & keep:
            out[path] = None
    return list(out)


def _graph_importers(
    tree: Tree, graph: import_graph.ImportGraph, targets: list[_Target], skip: set[str], files: frozenset[str]
) -> list[str]:
    """The scan's importers, found from the graph: the same two conditions (a parse finds the import, and
    the text checks pass), tested in the other order (the parse is kept by blob id, and each text check by
    file and target), so a packet on a commit whose graph is ready reads next to nothing."""
    keep = {t.path for t in targets}
    packages = tuple(t.package for t in targets if t.package)
    out = []
    for path in sorted(graph.importers(keep)):
        if path in skip or not path.endswith(".py") or not graph.exact_imports(tree, path, files) & keep:
            continue
        checks = [graph.known((path, t.path)) for t in targets]
        if None in checks:  # the text is read only for what the graph has not learnt yet
            text = tree.read(path) or ""
            relative = _RELATIVE.search(text) is not None
            checks = [
                c or graph.learn((path, t.path), t.checks(path, text, relative))
                for c, t in zip(checks, targets, strict=True)
            ]
        if (any(named for named, _ in checks) or path.startswith(packages)) and any(may for _, may in checks):
            out.append(path)
    return out


_RELATIVE = re.compile(r"\bfrom[\s\\]*\.")  # a backslash continuation may split `from .`


@dataclasses.dataclass(frozen=True)
class _Target:
    """What a file's text must contain to import `path`, so only those files get parsed.

    An absolute import names every part of the module (under some root). A relative import that
    climbs to the root does too; one that stays inside a top-level package comes from a file of
    that package and names the module, unless the module is the package's own __init__."""

    path: str
    absolute: tuple[tuple[str, ...], ...]
    name: str
    top: str
    package: str | None

    @classmethod
    def of(cls, path: str) -> _Target:
        stem = path[: -len(".py")]
        is_init = stem == "__init__" or stem.endswith("/__init__")
        stem = stem[: -len("__init__")].rstrip("/") if is_init else stem
        parts = stem.split("/")
        absolute = tuple(
            tuple(stem[len(r) :].split("/")) for r in SOURCE_ROOTS if stem.startswith(r) and stem[len(r) :]
        )
        top = parts[0] + "/" if len(parts) > 1 or is_init else ""
        return cls(path, absolute, parts[-1], top, stem + "/" if is_init else None)

    def checks(self, path: str, text: str, relative: bool) -> tuple[bool, bool]:
        """(the text names this target's module, `may_be_imported`): the scan's text checks, per target."""
        return self.name in text, self.may_be_imported(path, text, relative)

    def may_be_imported(self, path: str, text: str, relative: bool) -> bool:
        if any(all(part in text for part in parts) for parts in self.absolute):
            return True
        return (
            relative
            and path.startswith(self.top)
            and (self.name in text or (self.package is not None and path.startswith(self.package)))
        )


def file_items(
    tree: Tree, paths: Iterable[str], captured_at: str, source: str, max_chars: int = FILE_MAX_CHARS
) -> list[Item]:
    """One Item per path (id `file:<path>@<blob>`); a path not in the tree is a new file (version
    "absent"), a binary file is named but not shown."""
    items = []
    for rank, path in enumerate(dict.fromkeys(paths)):
        try:
            version = tree.blob_id(path)
        except KeyError:
            version, body = "absent", "(not in the repository at the canonical commit: a new file)"
        else:
            body = blob_cache.WINDOWS.get((version, max_chars), _windower(tree, path, max_chars))
        items.append(
            Item(
                item_id=f"file:{path}@{version}",
                source=source,
                priority=_priority(source, rank),
                source_version=version,
                captured_at=captured_at,
                title=path,
                text=body,
            )
        )
    return items


def _windower(tree: Tree, path: str, max_chars: int) -> Callable[[], str]:
    def window() -> str:
        text = tree.read(path)
        return file_window(text, 1, max_chars) if text is not None else "(binary or not UTF-8: not shown)"

    return window


def declared_items(tree: Tree, paths: Iterable[str], captured_at: str) -> list[Item]:
    """The Task's declared files, in declared order."""
    return file_items(tree, paths, captured_at, "declared_file")


def neighbour_items(tree: Tree, paths: Iterable[str], captured_at: str, max_items: int = MAX_NEIGHBOURS) -> list[Item]:
    """The first `max_items` dependency neighbours (as ordered by `dependency_neighbours`)."""
    return file_items(tree, list(paths)[:max_items], captured_at, "dependency_neighbour")


def conventions(tree: Tree, captured_at: str) -> list[Item]:
    """README*, CONTRIBUTING*, AGENTS.md and .editorconfig at the root, in .github/ or docs/,
    in that order; at most CONVENTIONS_MAX files of CONVENTION_MAX_CHARS each."""
    ranked = []
    for path in tree.files():
        folder, _, name = path.rpartition("/")
        folder = folder + "/" if folder else ""
        if folder in _CONVENTION_DIRS:
            rank = next((n for n, pattern in enumerate(_CONVENTION_NAMES) if pattern.fullmatch(name)), None)
            if rank is not None:
                ranked.append((rank, _CONVENTION_DIRS.index(folder), path))
    found = [path for *_, path in sorted(ranked)]
    return file_items(tree, found[:CONVENTIONS_MAX], captured_at, CONVENTION, CONVENTION_MAX_CHARS)


def resource_owner_items(owners: Iterable[Mapping[str, Any]], captured_at: str) -> list[Item]:
    """The Tasks and ChangeSets that last touched the Task's resources. Each owner:
    {resource, task_id, task_key, changeset_id (or None), summary, files}."""
    items = []
    for rank, o in enumerate(owners):
        cs = o.get("changeset_id")
        version = cs or f"task:{o['task_id']}"
        files = ", ".join(o.get("files") or ()) or "none"
        items.append(
            Item(
                item_id=f"changeset:{cs}" if cs else f"task:{o['task_id']}",
                source="resource_owner",
                priority=_priority("resource_owner", rank),
                source_version=version,
                captured_at=captured_at,
                title=f"{o['resource']}: last touched by Task {o['task_key']}",
                text=f"{o.get('summary', '')}\nfiles: {files}",
            )
        )
    return items


def intent_items(intents: Iterable[Mapping[str, Any]], captured_at: str) -> list[Item]:
    """Intents of dependency Tasks and of nearby Tasks (same files or resources). Each intent:
    {relation: "dependency"|"nearby", task_id, task_key, changeset_id (or None), intent, files}."""
    items = []
    for rank, i in enumerate(intents):
        source = f"{i['relation']}_intent"
        if source not in PRIORITY:
            raise ValueError(f"intent relation must be dependency or nearby, not {i['relation']!r}")
        cs = i.get("changeset_id")
        files = ", ".join(i.get("files") or ()) or "none"
        items.append(
            Item(
                item_id=f"intent:{i['task_id']}",
                source=source,
                priority=_priority(source, rank),
                source_version=cs or f"task:{i['task_id']}",
                captured_at=captured_at,
                title=f"{i['relation']} Task {i['task_key']}",
                text=f"{i.get('intent', '')}\nfiles: {files}",
            )
        )
    return items


def failure_items(failures: Iterable[Mapping[str, Any]], captured_at: str) -> list[Item]:
    """Failed runs (their logs compacted by the caller). Each failure:
    {run_id, task_key, attempt, tier, outcome, reason, log}."""
    return [
        Item(
            item_id=f"failure:{f['run_id']}",
            source="prior_failure",
            priority=_priority("prior_failure", rank),
            source_version=f["run_id"],
            captured_at=captured_at,
            title=f"Task {f['task_key']} attempt {f.get('attempt', '?')} at {f.get('tier', '?')}: "
            f"{f.get('outcome', 'failed')}",
            text=f"reason: {f.get('reason', '')}\n{f.get('log', '')}".rstrip(),
        )
        for rank, f in enumerate(failures)
    ]


def _priority(source: str, rank: int) -> int:
    return PRIORITY.get(source, 0) + min(rank, 999)
