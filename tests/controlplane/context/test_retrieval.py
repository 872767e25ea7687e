"""Context Packet retrieval (seed 000): Python imports, dependency neighbours, conventions and items,
over a DictTree and over a real git repository read at a commit (pygit2, no checkout)."""

from __future__ import annotations

import hashlib
import pathlib

import pygit2
import pytest

from controlplane.context.retrieval import (
    CONVENTION_MAX_CHARS,
    CONVENTIONS_MAX,
    DictTree,
    GitTree,
    conventions,
    declared_items,
    dependency_neighbours,
    failure_items,
    intent_items,
    neighbour_items,
    python_imports,
    resource_owner_items,
)
from controlplane.domain.packet import CONVENTION, PacketInputs, compile_packet

pytestmark = pytest.mark.timeout(60)

AT = "2025-01-02T03:04:05+00:00"
FILES = {
    "a/__init__.py",
    "a/b.py",
    "a/c/__init__.py",
    "a/c/d.py",
    "top.py",
    "src/lib/__init__.py",
    "src/lib/x.py",
    "notes.txt",
}


@pytest.mark.parametrize(
    "path, text, imports",
    [
        ("m.py", "import a.b", {"a/b.py"}),
        ("m.py", "import a.b as z, top", {"a/b.py", "top.py"}),
        ("m.py", "from a import b", {"a/b.py"}),
        ("m.py", "from a.b import thing", {"a/b.py"}),
        ("m.py", "from a import thing", {"a/__init__.py"}),  # a name in the package
        ("m.py", "import a.c", {"a/c/__init__.py"}),  # a package
        ("m.py", "from a.c import d, e", {"a/c/d.py", "a/c/__init__.py"}),
        ("m.py", "from a.b import *", {"a/b.py"}),
        ("m.py", "import a.missing", {"a/__init__.py"}),  # the deepest existing package
        ("m.py", "import os, json\nimport numpy.linalg\nfrom typing import Any", set()),  # not in the repository
        ("m.py", "from lib import x", {"src/lib/x.py"}),  # the src/ layout
        ("m.py", "def f():\n    import top\n", {"top.py"}),  # imports inside functions count
        ("m.py", "if TYPE_CHECKING:\n    from a.c import d\n", {"a/c/d.py"}),
        ("m.py", "def f(:\n    import a.b\n", set()),  # syntax error: no imports
        ("m.py", "import notes", set()),  # not a Python file
        ("a/c/d.py", "from . import x", {"a/c/__init__.py"}),
        ("a/c/d.py", "from .. import b", {"a/b.py"}),
        ("a/c/d.py", "from ..b import f", {"a/b.py"}),
        ("a/c/d.py", "from ... import top", {"top.py"}),
        ("a/c/d.py", "from .... import top", set()),  # climbs above the repository
        ("a/b.py", "from .c.d import q", {"a/c/d.py"}),
        ("a/c/__init__.py", "from . import d", {"a/c/d.py"}),  # an __init__'s package is its directory
        ("a/b.py", "import a.b\nfrom . import b", set()),  # itself
    ],
)
def test_python_imports(path: str, text: str, imports: set[str]) -> None:
    assert python_imports(path, text, FILES) == imports
    assert python_imports(path, text, sorted(FILES)) == imports  # any collection of paths


NEIGHBOURHOOD = {
    "a/__init__.py": "",
    "a/b.py": "VALUE = 1\n",
    "a/c/__init__.py": "from .d import run\n",
    "a/c/d.py": "from a.b import VALUE\nimport top\n\ndef run():\n    return VALUE\n",
    "a/c/e.py": "from . import run\n",  # imports the package __init__ without naming it
    "top.py": "import json\n",
    "m.py": "from a.c.d import run\n",
    "n.py": "# mentions d and c but imports nothing of theirs\nimport json\nd = 1\n",
    "z.py": "import a.c\n",
    "README.md": "# a\n",
    "broken.py": "from a.c import d\ndef (:\n",  # a syntax error: not an importer
}


def test_dependency_neighbours_in_both_directions() -> None:
    tree = DictTree(NEIGHBOURHOOD)
    # what d.py imports (in path order), then what imports it (in path order)
    assert dependency_neighbours(tree, ["a/c/d.py"]) == ["a/b.py", "top.py", "a/c/__init__.py", "m.py"]
    assert dependency_neighbours(tree, ["a/c/__init__.py"]) == ["a/c/d.py", "a/c/e.py", "z.py"]
    # two declared files: neither is its own neighbour; the order is fixed by the declared order
    assert dependency_neighbours(tree, ["a/c/d.py", "a/b.py"]) == ["top.py", "a/c/__init__.py", "m.py"]
    assert dependency_neighbours(tree, ["a/b.py", "a/c/d.py"]) == ["top.py", "a/c/__init__.py", "m.py"]
    assert dependency_neighbours(tree, ["README.md", "new/file.py"]) == []
    assert dependency_neighbours(tree, []) == []


TRICKY = NEIGHBOURHOOD | {
    "a/c/f.py": "from.d import run\n",  # no space after from
    "a/c/g.py": "from  .  import  d\n",
    "a/c/h/i.py": "from ...b import VALUE\nfrom ... import c\n",
    "a/c/h/__init__.py": "from .. import d as dd\n",
    "a/k.py": "from .. import top\n",  # climbs to the root
    "src/lib/__init__.py": "from . import x\n",
    "src/lib/x.py": "import a.c.d\n",
    "src/app.py": "from lib import x\nimport top\n",
    "w.py": "import a.c.d.missing\nfrom a import c\n",
}


@pytest.mark.parametrize("declared", [[p] for p in sorted(TRICKY) if p.endswith(".py")] + [["a/c/d.py", "top.py"]])
def test_dependency_neighbours_match_parsing_every_file(declared: list[str]) -> None:
    """Only files whose text could import a declared file are parsed: that finds every importer."""
    tree = DictTree(TRICKY)
    files = frozenset(tree.files())
    imported = [p for d in declared for p in sorted(python_imports(d, TRICKY[d], files)) if p not in declared]
    importers = [
        p
        for p in tree.files()
        if p.endswith(".py") and p not in declared and python_imports(p, TRICKY[p], files) & set(declared)
    ]
    assert dependency_neighbours(tree, declared) == list(dict.fromkeys(imported + importers))


def commit(repo: pygit2.Repository, files: dict[str, bytes], message: str) -> str:
    """A commit on main holding exactly `files`, written straight into the object database."""
    index = pygit2.Index()
    for path, data in files.items():
        index.add(pygit2.IndexEntry(path, repo.create_blob(data), pygit2.enums.FileMode.BLOB))
    parents = [] if repo.head_is_unborn else [repo.head.target]
    sig = pygit2.Signature("Test", "test@drover.invalid", 1_700_000_000, 0)
    return str(repo.create_commit("refs/heads/main", sig, sig, message, index.write_tree(repo), parents))


@pytest.fixture
def git_tree_repo(tmp_path: pathlib.Path) -> tuple[pathlib.Path, str, str]:
    """A bare repository: a first commit with NEIGHBOURHOOD and a binary file, a second that edits a file."""
    repo = pygit2.init_repository(str(tmp_path / "repo.git"), bare=True, initial_head="main")
    first_files = {p: t.encode() for p, t in NEIGHBOURHOOD.items()} | {"logo.png": b"\x89PNG\0\0"}
    first = commit(repo, first_files, "first")
    second = commit(repo, first_files | {"a/b.py": b"VALUE = 2\n", "q.py": b"import a.c.d\n"}, "second")
    return tmp_path / "repo.git", first, second


def test_git_tree_reads_a_commit_without_a_checkout(git_tree_repo: tuple[pathlib.Path, str, str]) -> None:
    path, first, second = git_tree_repo
    old, new = GitTree(path, first), GitTree(path)
    assert old.commit == first and new.commit == second == str(GitTree(path, "main").commit)
    assert old.files() == sorted([*NEIGHBOURHOOD, "logo.png"]) and "q.py" in new.files()
    assert old.read("a/b.py") == "VALUE = 1\n" and new.read("a/b.py") == "VALUE = 2\n"
    assert old.read("logo.png") is None and old.read("missing.py") is None
    blob = hashlib.sha1(b"blob 10\0VALUE = 1\n").hexdigest()
    assert old.blob_id("a/b.py") == blob == DictTree(NEIGHBOURHOOD).blob_id("a/b.py")
    assert new.blob_id("a/b.py") != blob
    with pytest.raises(KeyError):
        old.blob_id("missing.py")
    assert dependency_neighbours(old, ["a/c/d.py"]) == dependency_neighbours(DictTree(NEIGHBOURHOOD), ["a/c/d.py"])
    assert dependency_neighbours(new, ["a/c/d.py"]) == ["a/b.py", "top.py", "a/c/__init__.py", "m.py", "q.py"]


def test_file_items_carry_blob_ids_and_cut_long_files(git_tree_repo: tuple[pathlib.Path, str, str]) -> None:
    path, first, _ = git_tree_repo
    tree = GitTree(path, first)
    items = declared_items(tree, ["a/c/d.py", "a/new.py", "logo.png", "a/c/d.py"], AT)
    assert [(i.item_id, i.source, i.priority, i.source_version, i.captured_at) for i in items] == [
        (f"file:a/c/d.py@{tree.blob_id('a/c/d.py')}", "declared_file", 0, tree.blob_id("a/c/d.py"), AT),
        ("file:a/new.py@absent", "declared_file", 1, "absent", AT),
        (f"file:logo.png@{tree.blob_id('logo.png')}", "declared_file", 2, tree.blob_id("logo.png"), AT),
    ]
    assert items[0].text == NEIGHBOURHOOD["a/c/d.py"] and items[0].title == "a/c/d.py"
    assert "new file" in items[1].text and "binary" in items[2].text
    neighbours = neighbour_items(tree, dependency_neighbours(tree, ["a/c/d.py"]), AT, max_items=3)
    assert [(i.title, i.priority) for i in neighbours] == [
        ("a/b.py", 1000),
        ("top.py", 1001),
        ("a/c/__init__.py", 1002),
    ]
    long = DictTree({"big.py": "".join(f"line {n}\n" for n in range(5000))})
    text = declared_items(long, ["big.py"], AT)[0].text
    assert text.startswith("line 0\nline 1\n") and len(text) <= 8_000 + 100
    assert text.endswith("line 900\n[truncated: the file continues at line 902; call read_file with from_line=902]")


def test_conventions_are_found_bounded_and_in_a_fixed_order() -> None:
    tree = DictTree(
        {
            "README.md": "# Project\n" + "x\n" * 5000,
            "CONTRIBUTING.rst": "Run pytest.\n",
            "AGENTS.md": "Agents: use edit_file.\n",
            ".editorconfig": "indent_style = space\n",
            "sub/README.md": "not the root\n",
            "docs/readme.txt": "docs\n",
            "readme_old.py": "x = 1\n",
            "app.py": "print()\n",
        }
    )
    items = conventions(tree, AT)
    assert [i.title for i in items] == ["README.md", "docs/readme.txt", "CONTRIBUTING.rst", "AGENTS.md"]
    assert len(items) == CONVENTIONS_MAX and all(i.source == CONVENTION and i.captured_at == AT for i in items)
    assert items[0].item_id == f"file:README.md@{tree.blob_id('README.md')}"
    assert len(items[0].text) <= CONVENTION_MAX_CHARS + 80 and "call read_file with from_line=" in items[0].text
    assert [i.title for i in conventions(DictTree({".github/CONTRIBUTING.md": "c\n", ".editorconfig": "e\n"}), AT)] == [
        ".github/CONTRIBUTING.md",
        ".editorconfig",
    ]
    assert conventions(DictTree({"app.py": ""}), AT) == []


def test_owner_intent_and_failure_items() -> None:
    owners = resource_owner_items(
        [
            {
                "resource": "db:users",
                "task_id": "t1",
                "task_key": "schema",
                "changeset_id": "cs-1",
                "summary": "users table",
                "files": ["db.py"],
            },
            {"resource": "api:/users", "task_id": "t2", "task_key": "api", "changeset_id": None, "summary": "running"},
        ],
        AT,
    )
    assert [(i.item_id, i.source_version, i.priority) for i in owners] == [
        ("changeset:cs-1", "cs-1", 2000),
        ("task:t2", "task:t2", 2001),
    ]
    assert owners[0].title == "db:users: last touched by Task schema" and owners[0].text == "users table\nfiles: db.py"
    intents = intent_items(
        [
            {
                "relation": "dependency",
                "task_id": "t1",
                "task_key": "schema",
                "changeset_id": "cs-1",
                "intent": "add users",
            },
            {"relation": "nearby", "task_id": "t3", "task_key": "ui", "intent": "list users"},
        ],
        AT,
    )
    assert [(i.item_id, i.source, i.source_version, i.priority) for i in intents] == [
        ("intent:t1", "dependency_intent", "cs-1", 3000),
        ("intent:t3", "nearby_intent", "task:t3", 4001),
    ]
    with pytest.raises(ValueError):
        intent_items([{"relation": "cousin", "task_id": "t", "task_key": "k"}], AT)
    failures = failure_items(
        [
            {
                "run_id": "r9",
                "task_key": "api",
                "attempt": 2,
                "tier": "sonnet",
                "outcome": "failed",
                "reason": "tests failed",
                "log": "E assert 1 == 2\n",
            }
        ],
        AT,
    )
    assert [(f.item_id, f.source, f.source_version, f.priority) for f in failures] == [
        ("failure:r9", "prior_failure", "r9", 5000)
    ]
    assert failures[0].title == "Task api attempt 2 at sonnet: failed"
    assert failures[0].text == "reason: tests failed\nE assert 1 == 2"


def test_a_packet_from_a_real_repository(git_tree_repo: tuple[pathlib.Path, str, str]) -> None:
    path, _, second = git_tree_repo
    tree = GitTree(path, second)
    declared = ["a/c/d.py"]
    inputs = PacketInputs(
        change={"goal": "g", "criteria": [], "invariants": []},
        task={"key": "k", "kind": "implement", "objective": "o", "resources": [], "risk": "low", "files": declared},
        canonical_commit=tree.commit,
        file_list=tuple(tree.files()),
        conventions=tuple(conventions(tree, AT)),
        items=(*declared_items(tree, declared, AT), *neighbour_items(tree, dependency_neighbours(tree, declared), AT)),
    )
    packet = compile_packet(inputs).packet
    assert packet["canonical_commit"] == second and packet["file_list"]["total"] == len(NEIGHBOURHOOD) + 2
    assert [i["title"] for i in packet["items"]] == ["a/c/d.py", "a/b.py", "top.py", "a/c/__init__.py", "m.py", "q.py"]
    assert packet["items"][1]["text"] == "VALUE = 2\n"
    assert [c["title"] for c in packet["conventions"]] == ["README.md"]
