"""The import graph of a commit: who may import each Python file, so a packet's dependency neighbours are
a lookup instead of a scan of the whole tree (issue 14).

Each Python blob is read once for its import statements, whatever commit it appears in (`Statements`,
keyed by blob id), and read fast: `import_statements.scan_statements` finds the statements around each
`import` word without parsing the file (a superset of what a parse finds). A commit's graph resolves
every file's statements against that commit's own paths (resolution depends on the whole file set: a
new `a/missing.py` changes what `import a.missing` means); a commit with the same paths as the latest
graph of its repository keeps that graph's edges for every unchanged blob. `Graphs` keeps the graphs of
recent commits and builds a missing one in a background thread; until it is ready,
`retrieval.dependency_neighbours` scans as before. Both paths give the same neighbours: the graph only
narrows which files the scan's own checks (and its exact parse) look at.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, Protocol, TypeVar

from controlplane import metrics
from controlplane.context.import_statements import (
    FromImport,
    Import,
    Statement,
    parse_statements,
    scan_statements,
)

log = logging.getLogger("drover.import_graph")
Parse = Callable[[str, str], tuple[Statement, ...]]
T = TypeVar("T")
_MISSING = object()
SOURCE_ROOTS = ("", "src/")


class Blobs(Protocol):
    """What a graph reads of a tree (retrieval.Tree has it)."""

    def files(self) -> list[str]: ...
    def read(self, path: str) -> str | None: ...
    def blob_id(self, path: str) -> str: ...


def resolve(
    path: str,
    statements: Iterable[Statement],
    files: Collection[str],
    roots: Sequence[str] = SOURCE_ROOTS,
    memo: dict[object, tuple[str, ...]] | None = None,
) -> set[str]:
    """The files of `files` that `path`'s import statements name: `a/b.py` or `a/b/__init__.py` under each
    root (absolute) or the file's own package (relative); a missing module falls back to its deepest
    existing package; modules outside `files` are ignored, and so is the file itself. `memo` keeps each
    statement's files for one `files` and `roots` (most statements recur across a repository)."""
    package = tuple(path.split("/")[:-1])
    found: set[str] = set()
    for statement in statements:
        key = (statement, package) if isinstance(statement, FromImport) and statement.level else statement
        hits = memo.get(key) if memo is not None else None
        if hits is None:
            hits = _statement_files(statement, package, files, roots)
            if memo is not None:
                memo[key] = hits
        found.update(hits)
    found.discard(path)
    return found


def _statement_files(
    statement: Statement, package: tuple[str, ...], files: Collection[str], roots: Sequence[str]
) -> tuple[str, ...]:
    if isinstance(statement, Import):
        return tuple(_resolve(list(statement.parts), 1, files, roots))
    bases: Sequence[str]
    if statement.level:
        if statement.level - 1 > len(package):
            return ()  # climbs above the repository
        base = list(package[: len(package) - (statement.level - 1)])
        parts, floor, bases = base + list(statement.module), max(len(base), 1), ("",)
    else:
        parts, floor, bases = list(statement.module), 1, roots
    found: list[str] = []
    for name in statement.names:
        hit = _resolve(parts + [name], len(parts) + 1, files, bases) if name != "*" else []
        found.extend(hit or _resolve(parts, floor, files, bases))
    return tuple(found)


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
    """Import statements by blob id, by one way of reading them (`parse_statements`, exact, or
    `scan_statements`, a superset): a blob is read once, in any commit. Bounded (least recently used
    out) and thread-safe."""

    def __init__(self, parse: Parse = parse_statements, max_blobs: int = 500_000) -> None:
        self.parse, self.max_blobs = parse, max_blobs
        self._by_blob: collections.OrderedDict[str, tuple[Statement, ...]] = collections.OrderedDict()
        self._lock = threading.Lock()
        self.parsed = 0
        """Blobs read so far (the rest were found here)."""

    def of(self, tree: Blobs, path: str) -> tuple[Statement, ...]:
        blob = tree.blob_id(path)
        with self._lock:
            found = self._by_blob.get(blob)
            if found is not None:
                self._by_blob.move_to_end(blob)
                return found
        text = tree.read(path)
        statements = self.parse(path, text) if text else ()
        with self._lock:
            self.parsed += 1
            self._by_blob[blob] = statements
            while len(self._by_blob) > self.max_blobs:
                self._by_blob.popitem(last=False)
        return statements


class ImportGraph:
    """Who may import whom in one commit (Python files only). Its edges come from `scan_statements`, so
    they hold every import and perhaps more (a docstring's example); `exact_imports` answers what a
    parse finds, from a cache by blob id, for the few files a packet asks about."""

    def __init__(
        self, commit: str, imports: dict[str, frozenset[str]], blobs: dict[str, str], exact: Statements, seconds: float
    ) -> None:
        self.commit, self._imports, self.blobs, self.exact, self.seconds = commit, imports, blobs, exact, seconds
        self.files = len(blobs)
        self._memo: dict[tuple[str, str], object] = {}
        reverse: dict[str, set[str]] = {}
        for source, targets in imports.items():
            for target in targets:
                reverse.setdefault(target, set()).add(source)
        self._importers = {target: frozenset(sources) for target, sources in reverse.items()}

    @classmethod
    def build(
        cls,
        tree: Blobs,
        commit: str,
        scanned: Statements | None = None,
        exact: Statements | None = None,
        base: ImportGraph | None = None,
    ) -> ImportGraph:
        """The commit's graph. With a `base` graph (any commit) of the same paths, a file whose blob is the
        same keeps its edges: only the changed files are read and resolved."""
        started = time.perf_counter()
        scanned = scanned or Statements(scan_statements)
        paths = tree.files()
        blobs = {p: tree.blob_id(p) for p in paths}
        fileset = frozenset(paths)
        same_paths = base is not None and base.blobs.keys() == blobs.keys()
        imports: dict[str, frozenset[str]] = {}
        memo: dict[object, tuple[str, ...]] = {}
        for path in paths:
            if not path.endswith(".py"):
                continue
            if same_paths and base is not None and base.blobs[path] == blobs[path]:
                imports[path] = base._imports[path]
            else:
                imports[path] = frozenset(resolve(path, scanned.of(tree, path), fileset, memo=memo))
        graph = cls(commit, imports, blobs, exact or Statements(), time.perf_counter() - started)
        if same_paths and base is not None:  # what base learnt of a file still holds while its blob does
            known = dict(base._memo)  # one copy under the GIL: packets may be adding to it
            graph._memo = {k: v for k, v in known.items() if base.blobs[k[0]] == blobs[k[0]]}
        return graph

    def imports(self, path: str) -> frozenset[str]:
        """The files `path` may import (a superset of what a parse finds)."""
        return self._imports.get(path, frozenset())

    def importers(self, targets: Iterable[str]) -> frozenset[str]:
        """The files that may import any of `targets` (a superset of the importers a parse finds)."""
        return frozenset().union(*(self._importers.get(t, frozenset()) for t in targets))

    def exact_imports(self, tree: Blobs, path: str, files: Collection[str]) -> frozenset[str]:
        """What `retrieval.python_imports` answers for `path` in this commit, its parse kept by blob id and
        its answer by path."""
        return self.remember((path, "imports"), lambda: frozenset(resolve(path, self.exact.of(tree, path), files)))

    def remember(self, key: tuple[str, str], make: Callable[[], T]) -> T:
        """A value computed once per graph: a fact of the file `key[0]` of this commit that depends on
        nothing but its path, its blob and the commit's paths (a graph built from a base with the
        same paths keeps the base's facts of unchanged blobs)."""
        found = self._memo.get(key, _MISSING)
        if found is _MISSING:
            found = self._memo[key] = make()  # a race computes it twice: the same value
        return found  # type: ignore[return-value]

    def known(self, key: tuple[str, str]) -> Any:
        """A fact `remember`ed or `learn`t, or None."""
        return self._memo.get(key)

    def learn(self, key: tuple[str, str], value: T) -> T:
        self._memo[key] = value
        return value


class Graphs:
    """The graphs of recent commits of each repository, built off the request path: `ready` answers a
    graph or None, and in the None case starts its build in a thread (one per commit at a time). A new
    commit is built from the repository's latest graph: only the blobs that changed are read."""

    def __init__(self, open_tree: Callable[[str, str], Blobs], keep: int = 16) -> None:
        self.open_tree, self.keep = open_tree, keep
        self.scanned, self.exact = Statements(scan_statements), Statements(parse_statements)
        self._graphs: collections.OrderedDict[str, ImportGraph] = collections.OrderedDict()
        self._latest: dict[str, ImportGraph] = {}  # repository -> its graph built last
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
            with self._lock:
                base = self._latest.get(repo_path)
            tree = self.open_tree(repo_path, commit)
            graph = ImportGraph.build(tree, commit, self.scanned, self.exact, base)
        except Exception:
            log.exception("import graph of %s in %s: the build failed; packets scan instead", commit, repo_path)
            raise
        finally:
            with self._lock:
                self._building.pop(commit, None)
        with self._lock:
            self._graphs[commit] = graph
            self._latest[repo_path] = graph
            while len(self._graphs) > self.keep:
                self._graphs.popitem(last=False)
        metrics.IMPORT_GRAPH_BUILD.observe(graph.seconds)
        log.info("import graph of %s: %d files in %.0f ms", commit[:12], graph.files, graph.seconds * 1000)
        return graph
