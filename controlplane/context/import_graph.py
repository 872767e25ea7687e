"""The import graph of a commit: who imports each Python file, so a packet's dependency neighbours are a
lookup instead of a scan of the whole tree (issue 14).

Each Python blob is parsed once for its import statements, whatever commit it appears in
(`Statements`, keyed by blob id); a commit's graph resolves every file's statements against that
commit's own paths (resolution depends on the whole file set: a new `a/missing.py` changes what `import
a.missing` means), which is set lookups, not parsing. So the graph of a commit that changes 10 files
parses 10 blobs. `Graphs` keeps the graphs of recent commits and builds a missing one in a background
thread; until it is ready, `retrieval.dependency_neighbours` scans as before. Both paths give the same
neighbours: the graph only narrows which files the scan's own checks look at.
"""

from __future__ import annotations

import ast
import collections
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import NamedTuple, Protocol

log = logging.getLogger("drover.import_graph")
SOURCE_ROOTS = ("", "src/")


class Import(NamedTuple):
    """One name of `import a.b.c`."""

    parts: tuple[str, ...]


class FromImport(NamedTuple):
    """`from ..a.b import c, d` (level 2)."""

    level: int
    module: tuple[str, ...]
    names: tuple[str, ...]


Statement = Import | FromImport


class Blobs(Protocol):
    """What a graph reads of a tree (retrieval.Tree has it)."""

    def files(self) -> list[str]: ...
    def read(self, path: str) -> str | None: ...
    def blob_id(self, path: str) -> str: ...


def parse_statements(path: str, text: str) -> tuple[Statement, ...]:
    """The import statements of a Python file in walk order; none for a file that does not parse."""
    try:
        tree = ast.parse(text, filename=path)
    except (SyntaxError, ValueError):
        return ()
    out: list[Statement] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend(Import(tuple(alias.name.split("."))) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = tuple(node.module.split(".")) if node.module else ()
            out.append(FromImport(node.level, module, tuple(alias.name for alias in node.names)))
    return tuple(out)


def resolve(
    path: str, statements: Iterable[Statement], files: Collection[str], roots: Sequence[str] = SOURCE_ROOTS
) -> set[str]:
    """The files of `files` that `path`'s import statements name: `a/b.py` or `a/b/__init__.py` under each
    root (absolute) or the file's own package (relative); a missing module falls back to its deepest
    existing package; modules outside `files` are ignored, and so is the file itself."""
    package = path.split("/")[:-1]
    found: set[str] = set()
    for statement in statements:
        if isinstance(statement, Import):
            found.update(_resolve(list(statement.parts), 1, files, roots))
            continue
        bases: Sequence[str]
        if statement.level:
            if statement.level - 1 > len(package):
                continue  # climbs above the repository
            base = package[: len(package) - (statement.level - 1)]
            parts, floor, bases = base + list(statement.module), max(len(base), 1), ("",)
        else:
            parts, floor, bases = list(statement.module), 1, roots
        for name in statement.names:
            hit = _resolve(parts + [name], len(parts) + 1, files, bases) if name != "*" else []
            found.update(hit or _resolve(parts, floor, files, bases))
    found.discard(path)
    return found


def _resolve(parts: list[str], floor: int, files: Collection[str], roots: Sequence[str]) -> list[str]:
    """The deepest existing module among parts[:k] for k >= floor, under every root."""
    out = []
    for root in roots:
        for k in range(len(parts), floor - 1, -1):
            stem = root + "/".join(parts[:k])
            hit = next((p for p in (stem + ".py", stem + "/__init__.py") if p in files), None)
            if hit:
                out.append(hit)
                break
    return out


class Statements:
    """Parsed import statements by blob id: a blob is parsed once, in any commit. Bounded (least recently
    used out) and thread-safe."""

    def __init__(self, max_blobs: int = 500_000) -> None:
        self.max_blobs = max_blobs
        self._by_blob: collections.OrderedDict[str, tuple[Statement, ...]] = collections.OrderedDict()
        self._lock = threading.Lock()
        self.parsed = 0
        """Blobs parsed so far (the rest were found here)."""

    def of(self, tree: Blobs, path: str) -> tuple[Statement, ...]:
        blob = tree.blob_id(path)
        with self._lock:
            found = self._by_blob.get(blob)
            if found is not None:
                self._by_blob.move_to_end(blob)
                return found
        text = tree.read(path)
        statements = parse_statements(path, text) if text else ()
        with self._lock:
            self.parsed += 1
            self._by_blob[blob] = statements
            while len(self._by_blob) > self.max_blobs:
                self._by_blob.popitem(last=False)
        return statements


class ImportGraph:
    """Who imports whom in one commit (Python files only)."""

    def __init__(self, commit: str, imports: dict[str, frozenset[str]], files: int, seconds: float) -> None:
        self.commit, self._imports, self.files, self.seconds = commit, imports, files, seconds
        reverse: dict[str, set[str]] = {}
        for source, targets in imports.items():
            for target in targets:
                reverse.setdefault(target, set()).add(source)
        self._importers = {target: frozenset(sources) for target, sources in reverse.items()}

    @classmethod
    def build(cls, tree: Blobs, commit: str, statements: Statements) -> ImportGraph:
        started = time.perf_counter()
        paths = tree.files()
        fileset = frozenset(paths)
        imports = {p: frozenset(resolve(p, statements.of(tree, p), fileset)) for p in paths if p.endswith(".py")}
        return cls(commit, imports, len(paths), time.perf_counter() - started)

    def imports(self, path: str) -> frozenset[str]:
        """The files `path` imports (what `retrieval.python_imports` answers for it in this commit)."""
        return self._imports.get(path, frozenset())

    def importers(self, targets: Iterable[str]) -> frozenset[str]:
        """The files that import any of `targets`."""
        return frozenset().union(*(self._importers.get(t, frozenset()) for t in targets))


class Graphs:
    """The graphs of recent commits of each repository, built off the request path: `ready` answers a
    graph or None, and in the None case starts its build in a thread (one per commit at a time)."""

    def __init__(
        self, open_tree: Callable[[str, str], Blobs], keep: int = 16, statements: Statements | None = None
    ) -> None:
        self.open_tree, self.keep = open_tree, keep
        self.statements = statements or Statements()
        self._graphs: collections.OrderedDict[str, ImportGraph] = collections.OrderedDict()
        self._building: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()

    def ready(self, repo_path: str, commit: str) -> ImportGraph | None:
        with self._lock:
            graph = self._graphs.get(commit)
            if graph is not None:
                self._graphs.move_to_end(commit)
                return graph
            if commit not in self._building:
                thread = threading.Thread(
                    target=self._build, args=(repo_path, commit), name=f"import-graph-{commit[:12]}", daemon=True
                )
                self._building[commit] = thread
                thread.start()
        return None

    def build_now(self, repo_path: str, commit: str) -> ImportGraph:
        """The commit's graph, built here if it is not ready (benchmarks, tests, `wait`)."""
        with self._lock:
            graph = self._graphs.get(commit)
        return graph if graph is not None else self._build(repo_path, commit)

    def wait(self, commit: str, timeout: float) -> ImportGraph | None:
        with self._lock:
            thread = self._building.get(commit)
        if thread is not None:
            thread.join(timeout)
        with self._lock:
            return self._graphs.get(commit)

    def _build(self, repo_path: str, commit: str) -> ImportGraph:
        try:
            graph = ImportGraph.build(self.open_tree(repo_path, commit), commit, self.statements)
        except Exception:
            log.exception("import graph of %s in %s: the build failed; packets scan instead", commit, repo_path)
            raise
        finally:
            with self._lock:
                self._building.pop(commit, None)
        with self._lock:
            self._graphs[commit] = graph
            while len(self._graphs) > self.keep:
                self._graphs.popitem(last=False)
        log.info("import graph of %s: %d files in %.0f ms", commit[:12], graph.files, graph.seconds * 1000)
        return graph
