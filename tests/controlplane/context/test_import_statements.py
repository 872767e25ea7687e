"""Import statements found without parsing the file: never fewer than a parse finds, on tricky text and on
every file of real packages; and the graph built from them gives the scan's neighbours on a real package."""

from __future__ import annotations

import ast
import pathlib
import sysconfig

import pytest
import sqlalchemy

from controlplane.context.import_graph import Graphs
from controlplane.context.import_statements import FromImport, Import, Statement, candidates, parse_statements
from controlplane.context.retrieval import DictTree, dependency_neighbours

TRICKY = {
    "plain": "import a.b, c as d\n",
    "from": "from a.b import c as d, e\n",
    "relative": "from .. import x\nfrom .m import y\nfrom.n import z\n",
    "parens with a comment holding a paren": "from a import (  # not ) here\n    b,\n    c,  # nor ( here\n)\n",
    "backslash continuations": "from a.b \\\n    import c, \\\n    d\nimport e, \\\n  f\n",
    "after a semicolon": "x = 1; import a\n",
    "compound statements on one line": "try: import a\nexcept ImportError: from b import c\nif x: import d\n",
    "in a function and a class": "def f():\n    import a\nclass C:\n    from b import c\n",
    "a module named like a keyword's neighbour": "from fromage.importer import item\n",
    "unicode names": "import \u00e9t\u00e9.caf\u00e9\nfrom \u00fcber import \u00e4\n",
    "crlf and tabs": "import a\r\nif x:\r\n\tfrom b import c\r\n",
    "a comment ending the line": "import a  # import b; from c import d\n",
    "a star": "from a import *\n",
    "future": "from __future__ import annotations\nimport a\n",
    "yield from, raise from": "def g():\n    yield from x\n    raise E from e\nimport a\n",
    "strings that hold import words": 's = "import a"\nt = """\nfrom b import c\n"""\nimport d\n',
    "f-strings": "x = f'{y!r} import'\nimport a\n",
    "not a keyword": "__import__('a')\nimportlib.import_module('b')\nimport_thing = 1\n",
}


@pytest.mark.parametrize("name", sorted(TRICKY))
def test_nothing_a_parse_finds_is_missed(name: str) -> None:
    text = TRICKY[name]
    assert set(parse_statements("m.py", text)) <= set(candidates(text))


def test_what_it_finds_on_the_tricky_lines() -> None:
    assert candidates(TRICKY["parens with a comment holding a paren"]) == (FromImport(0, ("a",), ("b", "c")),)
    assert candidates(TRICKY["backslash continuations"]) == (
        FromImport(0, ("a", "b"), ("c", "d")),
        Import(("e",)),
        Import(("f",)),
    )
    assert candidates(TRICKY["relative"]) == (
        FromImport(2, (), ("x",)),
        FromImport(1, ("m",), ("y",)),
        FromImport(1, ("n",), ("z",)),
    )
    assert candidates(TRICKY["a module named like a keyword's neighbour"]) == (
        FromImport(0, ("fromage", "importer"), ("item",)),
    )
    assert candidates(TRICKY["not a keyword"]) == ()
    # Words in strings and comments may add statements (a packet checks them by a parse); never fewer.
    assert Import(("d",)) in candidates(TRICKY["strings that hold import words"])


def test_a_file_that_does_not_parse_still_gives_its_statements() -> None:
    text = "import a\ndef (:\n"
    assert parse_statements("m.py", text) == () and candidates(text) == (Import(("a",)),)


def python_files(root: pathlib.Path) -> list[tuple[str, str]]:
    out = []
    for path in sorted(root.rglob("*.py")):
        try:
            out.append((str(path), path.read_bytes().decode("utf-8")))
        except UnicodeDecodeError:
            continue
    return out


REAL = [
    pathlib.Path(sqlalchemy.__file__).parent,
    *(
        pathlib.Path(sysconfig.get_paths()["stdlib"]) / d
        for d in ("asyncio", "email", "importlib", "unittest", "xml", "multiprocessing", "idlelib")
    ),
]


def walked(text: str) -> tuple[Statement, ...]:
    """The statements in `ast.walk` order, walking every node (what parse_statements did before)."""
    out: list[Statement] = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            out.extend(Import(tuple(alias.name.split("."))) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = tuple(node.module.split(".")) if node.module else ()
            out.append(FromImport(node.level, module, tuple(alias.name for alias in node.names)))
    return tuple(out)


@pytest.mark.parametrize("root", REAL, ids=lambda p: p.name)
def test_nothing_is_missed_in_any_file_of_a_real_package(root: pathlib.Path) -> None:
    files = python_files(root)
    assert len(files) >= 10
    missed = {path: set(parse_statements(path, text)) - set(candidates(text)) for path, text in files}
    assert {path: m for path, m in missed.items() if m} == {}
    # The parse walks statements only, and finds what a walk of every node finds, in the same order.
    assert [parse_statements(path, text) for path, text in files] == [walked(text) for _, text in files]


def test_the_graph_gives_the_scans_neighbours_on_a_real_package() -> None:
    root = pathlib.Path(sqlalchemy.__file__).parent
    files = {str(p.relative_to(root.parent)): p.read_bytes() for p in root.rglob("*.py")}
    tree = DictTree(files)
    graphs = Graphs(lambda repo, commit: tree)
    graph = graphs.build_now("sqlalchemy", "c")
    for declared in (["sqlalchemy/sql/base.py"], ["sqlalchemy/orm/session.py", "sqlalchemy/engine/base.py"]):
        assert dependency_neighbours(tree, declared, graph) == dependency_neighbours(tree, declared)
        assert len(dependency_neighbours(tree, declared)) > 10
