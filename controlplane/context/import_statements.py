"""The import statements of a Python file: exactly, by parsing it (`parse_statements`), or a superset found
without parsing it (`candidates`), about ten times faster.

`ast.parse` of a whole file costs about 0.15 s per MB of source, most of it building Python objects
for every expression; a 26 MB repository takes seconds. But every import statement holds the keyword
`import`, and that keyword can only start or continue an import statement. So `candidates` finds each
`import` word (in C, by regular expression), takes the statement around it (back to its `from` if it
has one, on to the end of its logical line or its closing parenthesis) and parses just that. Words
inside strings and comments yield statements that are not there (harmless: the graph's answers are
checked against `import_graph.parse_statements` before a packet uses them) and a file that does not
parse still yields its statements; what it must never do is miss a statement a parse would find
(`tests/controlplane/context/test_import_scan.py` holds it to that over every file of real packages).
"""

from __future__ import annotations

import ast
import collections
import contextlib
import gc
import re
from collections.abc import Iterable, Iterator
from typing import NamedTuple


class Import(NamedTuple):
    """One name of `import a.b.c`."""

    parts: tuple[str, ...]


class FromImport(NamedTuple):
    """`from ..a.b import c, d` (level 2)."""

    level: int
    module: tuple[str, ...]
    names: tuple[str, ...]


Statement = Import | FromImport


def parse_statements(path: str, text: str) -> tuple[Statement, ...]:
    """The import statements of a Python file in walk order; none for a file that does not parse."""
    with _collector_paused():
        try:
            tree = ast.parse(text, filename=path)
        except (SyntaxError, ValueError):
            return ()
        return _statements(_walk_statements(tree))


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """A parse makes a million objects for a large file, and the cyclic garbage collector, run every
    few hundred allocations, spends as long again looking at them. A syntax tree holds no cycles:
    reference counting frees it. Paused for every thread a moment, and resumed by whoever paused it."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


_BLOCKS = ("body", "orelse", "finalbody", "handlers", "cases")  # the fields that hold statements
_BLOCK_FIELDS: dict[type, tuple[str, ...]] = {}


def _walk_statements(tree: ast.AST) -> Iterator[ast.AST]:
    """`ast.walk` without the expressions: the same nodes that hold or are statements, in the same
    (breadth-first) order, since no expression holds a statement. Walking every expression node costs
    twice the parse."""
    todo = collections.deque([tree])
    while todo:
        node = todo.popleft()
        yield node
        kind = type(node)
        fields = _BLOCK_FIELDS.get(kind)
        if fields is None:
            fields = _BLOCK_FIELDS[kind] = tuple(f for f in kind._fields if f in _BLOCKS)
        for field in fields:
            todo.extend(getattr(node, field))


def _statements(nodes: Iterable[ast.AST]) -> tuple[Statement, ...]:
    out: list[Statement] = []
    for node in nodes:
        if isinstance(node, ast.Import):
            out.extend(Import(tuple(alias.name.split("."))) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = tuple(node.module.split(".")) if node.module else ()
            out.append(FromImport(node.level, module, tuple(alias.name for alias in node.names)))
    return tuple(out)


# What may stand between `from` and `import` on one logical line: the module, dots, blanks, and
# backslash continuations.
_MODULE = re.compile(r"(?:[ \t\f.\w]|\\\r?\n)*")
_LOOKBACK = 4000
# The rest of a statement after `import`: a parenthesised list (comments may hold any character) or
# names up to the end of the logical line.
_PARENS = re.compile(r"[ \t\f]*(?:\\\r?\n[ \t\f]*)*\((?:[^)#]|#[^\n]*)*\)")
_LINE = re.compile(r"(?:[^\n;#\\]|\\\r?\n|\\)*")


_MEMO: dict[str, tuple[Statement, ...]] = {}  # snippet -> its statements: most imports repeat across files
_MEMO_MAX = 200_000


def scan_statements(path: str, text: str) -> tuple[Statement, ...]:
    """`candidates` with the shape of `parse_statements` (and a memo of snippets shared by all files)."""
    if len(_MEMO) > _MEMO_MAX:
        _MEMO.clear()
    with _collector_paused():
        return candidates(text, _MEMO)


def candidates(text: str, memo: dict[str, tuple[Statement, ...]] | None = None) -> tuple[Statement, ...]:
    """Every import statement of `text` a parse would find, in source order, and perhaps more."""
    memo = {} if memo is None else memo
    out: list[Statement] = []
    start = text.find("import")
    while start >= 0:
        end = start + len("import")
        if (start and _is_word(text[start - 1])) or (end < len(text) and _is_word(text[end])):
            start = text.find("import", end)
            continue  # part of a longer name: `importlib`, `__import__`
        head = _from_before(text, start)
        rest = _PARENS.match(text, end) or _LINE.match(text, end)
        snippet = text[head : rest.end() if rest else end]
        statements = memo.get(snippet)
        if statements is None:
            statements = memo[snippet] = _parse(snippet)
        out.extend(statements)
        start = text.find("import", end)
    return tuple(out)


def _from_before(text: str, start: int) -> int:
    """Where the `from` of the import keyword at `start` begins, or `start` when it has none."""
    end = start
    while (at := text.rfind("from", max(0, start - _LOOKBACK), end)) >= 0:
        whole = (at == 0 or not _is_word(text[at - 1])) and not _is_word(text[at + 4])
        if whole:
            tail = _MODULE.match(text, at + 4, start)
            return at if tail and tail.end() == start else start
        end = at + 3  # part of a longer name (`fromage`): look further back
    return start


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"


def _parse(snippet: str) -> tuple[Statement, ...]:
    try:
        return _statements(ast.parse(snippet).body)
    except (SyntaxError, ValueError):
        return ()
