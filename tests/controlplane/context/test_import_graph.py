"""The import graph per commit: the same neighbours (and packet bytes) as the scan, blobs parsed once,
built off the caller's path."""

from __future__ import annotations

import pathlib
import random

import pygit2
import pytest

from controlplane.context.import_graph import Graphs, ImportGraph, Statements
from controlplane.context.retrieval import DictTree, GitTree, dependency_neighbours, neighbour_items, python_imports
from controlplane.domain.packet import PacketInputs, compile_packet
from tests.controlplane.context.test_retrieval import TRICKY, commit

AT = "2025-01-01T00:00:00+00:00"
CORNERS = TRICKY | {
    "fw.py": "import \uff54\uff4f\uff50\n",  # fullwidth `top`: Python normalises it; the scan's text check does not
    "star.py": "from a.c.d import *\n",
    "broken.py": "import a.c.d\ndef (:\n",  # does not parse: no imports
    "in_function.py": "def f():\n    from a.c import d\n",
    "bin.py": "\0\0import a.c.d\n",  # binary: not read
    "empty.py": "",
}


def generated(n: int, seed: int) -> dict[str, str]:
    """A random repository of packages importing each other absolutely and relatively."""
    r = random.Random(seed)
    files = {f"p{i}/__init__.py": "" for i in range(n // 10)}
    for i in range(n):
        pkg = f"p{i % (n // 10)}"
        lines = []
        for _ in range(r.randint(0, 4)):
            j = r.randrange(n)
            lines.append(
                r.choice([f"import p{j % (n // 10)}.m{j}", f"from p{j % (n // 10)} import m{j}", f"from . import m{j}"])
            )
        files[f"{pkg}/m{i}.py"] = "\n".join(lines) + "\n"
    return files


def both_ways(tree: DictTree | GitTree, declared: list[str]) -> tuple[list[str], list[str]]:
    graph = ImportGraph.build(tree, "c", Statements())
    return dependency_neighbours(tree, declared), dependency_neighbours(tree, declared, graph)


@pytest.mark.parametrize("declared", [[p] for p in sorted(CORNERS) if p.endswith(".py")] + [["a/c/d.py", "top.py"]])
def test_the_graph_gives_the_scans_neighbours_in_every_corner(declared: list[str]) -> None:
    scanned, looked_up = both_ways(DictTree(CORNERS), declared)
    assert looked_up == scanned


def test_the_fullwidth_import_is_missed_by_both_the_same_way() -> None:
    # `fw.py` imports top.py as Python reads it; the scan's text check misses it, and so must the graph.
    scanned, looked_up = both_ways(DictTree(CORNERS), ["top.py"])
    assert "fw.py" not in scanned and looked_up == scanned


@pytest.mark.parametrize("seed", range(5))
def test_the_graph_gives_the_scans_neighbours_on_a_random_repository(seed: int) -> None:
    files = generated(300, seed)
    tree = DictTree(files)
    graph = ImportGraph.build(tree, "c", Statements())
    for declared in random.Random(seed).sample(sorted(p for p in files if p.endswith(".py")), 20):
        assert dependency_neighbours(tree, [declared], graph) == dependency_neighbours(tree, [declared])


def test_a_blob_is_parsed_once_and_a_new_commit_parses_only_what_changed() -> None:
    files = generated(300, 1)
    statements = Statements()
    ImportGraph.build(DictTree(files), "c1", statements)
    blobs = {DictTree(files).blob_id(p) for p in files}
    assert statements.parsed == len(blobs)  # equal files are one blob
    changed = dict(files)
    for i, path in enumerate(sorted(p for p in files if "/m" in p)[:10]):
        changed[path] = files[path] + f"import p1.m{i}\n"
    second = ImportGraph.build(DictTree(changed), "c2", statements)
    assert statements.parsed == len(blobs) + 10
    assert dependency_neighbours(DictTree(changed), ["p1/m1.py"], second) == dependency_neighbours(
        DictTree(changed), ["p1/m1.py"]
    )


def test_resolution_follows_each_commits_files_without_parsing_again() -> None:
    statements = Statements()
    before = {"a/__init__.py": "", "a/b.py": "import a.missing\n"}
    after = before | {"a/missing.py": "X = 1\n"}  # a.missing now exists: a/b.py imports it, not the package
    first = ImportGraph.build(DictTree(before), "c1", statements)
    parsed = statements.parsed
    second = ImportGraph.build(DictTree(after), "c2", statements)
    assert statements.parsed == parsed + 1  # only the new blob
    assert first.importers(["a/__init__.py"]) == {"a/b.py"} and second.importers(["a/__init__.py"]) == set()
    assert second.importers(["a/missing.py"]) == {"a/b.py"}


def packet_bytes(tree: GitTree, declared: list[str], graph: ImportGraph | None) -> bytes:
    items = neighbour_items(tree, dependency_neighbours(tree, declared, graph), AT)
    inputs = PacketInputs(
        change={"id": "chg_1", "goal": "g", "criteria": [], "invariants": []},
        task={"id": "tsk_1", "key": "t", "kind": "implement", "objective": "o", "resources": [], "risk": "low"},
        canonical_commit=tree.commit,
        file_list=tuple(tree.files()),
        items=tuple(items),
    )
    return compile_packet(inputs).data


def test_a_packet_has_the_same_bytes_with_or_without_the_graph(tmp_path: pathlib.Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "repo.git"), bare=True, initial_head="main")
    head = commit(repo, {p: t.encode() for p, t in generated(400, 3).items()}, "first")
    tree = GitTree(tmp_path / "repo.git", head)
    graphs = Graphs(GitTree)
    graph = graphs.build_now(str(tmp_path / "repo.git"), head)
    for declared in (["p1/m1.py"], ["p2/__init__.py", "p3/m13.py"], ["p0/m0.py", "p9/m99.py", "README.md"]):
        assert packet_bytes(tree, declared, graph) == packet_bytes(tree, declared, None)


def test_graphs_are_built_off_the_callers_path_and_kept(tmp_path: pathlib.Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "repo.git"), bare=True, initial_head="main")
    first = commit(repo, {p: t.encode() for p, t in generated(200, 4).items()}, "first")
    graphs = Graphs(GitTree, keep=1)
    assert graphs.ready(str(tmp_path / "repo.git"), first) is None  # not built yet: the caller scans
    built = graphs.wait(first, timeout=30)
    assert built is not None and built.commit == first and built.files == 200 + 20
    assert graphs.ready(str(tmp_path / "repo.git"), first) is built
    second = commit(repo, {"only.py": b"import p1\n"}, "second")
    graphs.build_now(str(tmp_path / "repo.git"), second)
    assert graphs.ready(str(tmp_path / "repo.git"), second) is not None
    assert graphs.wait(first, timeout=0) is None  # keep=1: the older graph went


def test_a_commit_built_from_the_latest_graph_keeps_only_what_still_holds() -> None:
    first = generated(300, 4)
    trees = {"c1": DictTree(first)}
    graphs = Graphs(lambda repo, commit: trees[commit])
    graphs.build_now("r", "c1")
    target = "p1/m1.py"
    files = frozenset(first)
    importers = [p for p in sorted(first) if p.endswith(".py") and target in python_imports(p, first[p], files)]
    assert importers and importers[0] != target
    for declared in ([target], ["p2/m2.py"]):  # the graph learns facts of these files' importers
        assert dependency_neighbours(trees["c1"], declared, graphs.build_now("r", "c1")) == dependency_neighbours(
            trees["c1"], declared
        )
    # c2 changes an importer so that it no longer imports the target, and one file to import it now.
    second = dict(first)
    second[importers[0]] = "X = 1\n"
    imported = python_imports(target, first[target], files)
    newcomer = next(p for p in sorted(first) if p.endswith("0.py") and p not in {*importers, *imported, target})
    second[newcomer] = first[newcomer] + "import p1.m1\n"
    trees["c2"] = DictTree(second)
    scanned = graphs.scanned.parsed
    graph = graphs.build_now("r", "c2")
    assert graphs.scanned.parsed == scanned + 2  # only the changed blobs were read
    assert dependency_neighbours(trees["c2"], [target], graph) == dependency_neighbours(trees["c2"], [target])
    assert importers[0] not in dependency_neighbours(trees["c2"], [target], graph)
    assert newcomer in dependency_neighbours(trees["c2"], [target], graph)
    # c3 adds a file: other paths, so every file is resolved again (from the blobs already read).
    trees["c3"] = DictTree(second | {"p1/m1/__init__.py": ""})
    graph = graphs.build_now("r", "c3")
    assert graphs.scanned.parsed == scanned + 2  # the new file is empty, like every __init__.py: one blob
    for declared in ([target], ["p1/m1/__init__.py"], ["p2/m2.py"]):
        assert dependency_neighbours(trees["c3"], declared, graph) == dependency_neighbours(trees["c3"], declared)
