#!/usr/bin/env python3
"""Context Packets: retrieval and compilation on a large repository.

    python benchmarks/packets.py [--files N] [--runs R] [--git] [--section compile|memory|all]
                                 [--memory-files M] [--queries Q] [--memory-url URL] [--model-dir DIR]
    python benchmarks/packets.py --repo PATH [--declared a.py,b.py] [--runs R]

compile: a generated Python repository of N files (default 10,000: packages pkg000, pkg001, ... of
100 files each, an __init__.py and modules whose sizes and import counts follow real Python files, see
`generate_repo`, plus a README and a CONTRIBUTING), held as a DictTree in memory and, with --git, also
written into a bare git repository (packed, as a clone is) and read as a GitTree. For a Task with 5
declared files: the first packet on the commit (its import graph built first, no blob text cached), R
later packets with the graph (p50 and p99 of finding the neighbours, the items, `compile_packet` and
the whole, in ms), one packet by scan (no graph; the same bytes, asserted), and the graph and first
packet of a next commit that changes 10 Python files. The generated repository is the same on every
run (a seeded random.Random).

--repo PATH: the same on a real git repository (bare or not; the 5 largest Python files declared
unless --declared names them), and one line `packet first_ms=... warm_p50_ms=... files=... mb=...`.

memory: semantic memory with the real offline model (`[memory] model_dir`, else the packaged int8
all-MiniLM-L6-v2) on the first M files (default 1,000) of the same generated repository, in a
temporary data dir (PersistentClient) or on the chroma server at --memory-url: the seconds to
import controlplane.context.memory and to the first embedding (model load), a first build (seconds per
1,000 files, chunks/s), a rebuild of the next tree with 1% of the files changed (only those are
embedded), and Q queries (one query embedding and one chroma query each): p50 and p99 in ms.
Embedding dominates the build; on a busy machine it is proportionally slower.
"""

from __future__ import annotations

import argparse
import pathlib
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import pygit2

from controlplane.context import blob_cache
from controlplane.context.import_graph import Graphs, ImportGraph
from controlplane.context.retrieval import (
    DictTree,
    GitTree,
    Tree,
    conventions,
    declared_items,
    dependency_neighbours,
    neighbour_items,
)
from controlplane.domain.packet import CompiledPacket, PacketInputs, compile_packet

AT = "2025-01-01T00:00:00+00:00"
PER_PACKAGE = 100
SIZE_MU, SIZE_SIGMA = 8.28, 1.71  # ln(characters) of real Python files: see generate_repo


def generate_repo(n_files: int, seed: int = 7) -> dict[str, str]:
    """Path -> text of a Python repository of `n_files` files (two of them docs). Module sizes follow the
    log-normal fitted to 24,243 real files (the stdlib, this project's site-packages and sympy: median
    3.9 KB, mean 15 KB, capped at 1 MB here), with about 1.2 * size ** 0.25 imports each (2 at 100 B,
    6 at 1 KB, 12 at 10 KB, 21 at 100 KB, as in those files); half are absolute imports that favour
    a few hub modules (a cubed uniform index), half relative ones within the package."""
    rnd = random.Random(seed)
    n_packages = max(1, (n_files - 2 + PER_PACKAGE - 1) // PER_PACKAGE)
    modules = [(p, m) for p in range(n_packages) for m in range(1, PER_PACKAGE)][: max(0, n_files - 2 - n_packages)]
    files = {
        "README.md": "# Generated\n\nA generated repository.\n" * 20,
        "CONTRIBUTING.md": "Run `python -m pytest -q` before sending a change.\n" * 10,
    }
    files |= {f"pkg{p:03d}/__init__.py": f'"""Package {p}."""\n' for p in range(n_packages)}
    for p, m in modules:
        size = min(1_000_000, int(rnd.lognormvariate(SIZE_MU, SIZE_SIGMA)))
        lines = [f'"""Module {m} of package {p}."""', "", "from __future__ import annotations", ""]
        for _ in range(max(1, round(1.2 * size**0.25))):
            if rnd.random() < 0.5:
                op, om = modules[int(len(modules) * rnd.random() ** 3)]
                lines.append(f"from pkg{op:03d} import mod{om:03d}")
            else:
                lines.append(f"from . import mod{rnd.randrange(1, PER_PACKAGE):03d}")
        lines.append("")
        text = "\n".join(lines)
        blocks = [text]
        for f in range(max(1, (size - len(text)) // 120)):  # a function is about 120 characters
            blocks.append(
                f'\ndef function_{f}(value: int) -> int:\n    """Function {f}."""\n'
                f"    return value * {rnd.randrange(100)} + {f}\n\n"
            )
        files[f"pkg{p:03d}/mod{m:03d}.py"] = "".join(blocks)
    return files


def write_git_repo(files: dict[str, str], path: pathlib.Path) -> str:
    """A bare repository at `path` with `files` in one commit on main, packed like a clone (the
    loose objects removed); answers the commit id."""
    repo = pygit2.init_repository(str(path), bare=True, initial_head="main")
    index = pygit2.Index()
    for name, text in files.items():
        index.add(pygit2.IndexEntry(name, repo.create_blob(text.encode()), pygit2.enums.FileMode.BLOB))
    sig = pygit2.Signature("Bench", "bench@drover.invalid", 1_700_000_000, 0)
    commit = str(repo.create_commit("refs/heads/main", sig, sig, "generated", index.write_tree(repo), []))
    repo.pack()
    for loose in (path / "objects").iterdir():
        if len(loose.name) == 2:
            shutil.rmtree(loose)
    return commit


def percentiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return f"p50 {statistics.median(ordered):8.2f}  p99 {p99:8.2f}"


def timed(fn: Callable[[], object]) -> tuple[object, float]:
    start = time.perf_counter()
    value = fn()
    return value, (time.perf_counter() - start) * 1000


def packet_for(
    tree: Tree, commit: str, declared: list[str], graph: ImportGraph | None = None
) -> tuple[CompiledPacket, dict[str, float]]:
    """Retrieval and compilation for one Task, with the time of each part in ms."""
    neighbours, t_neigh = timed(lambda: dependency_neighbours(tree, declared, graph))
    assert isinstance(neighbours, list)
    items, t_items = timed(
        lambda: (declared_items(tree, declared, AT) + neighbour_items(tree, neighbours, AT), conventions(tree, AT))
    )
    assert isinstance(items, tuple)
    inputs = PacketInputs(
        change={"goal": "Speed up function_3 everywhere", "criteria": ["tests pass"], "invariants": []},
        task={
            "key": "speed",
            "kind": "implement",
            "objective": "Make function_3 faster",
            "resources": [],
            "risk": "low",
            "files": declared,
        },
        canonical_commit=commit,
        file_list=tuple(tree.files()),
        conventions=tuple(items[1]),
        tools=("list_files", "read_file", "edit_file", "run_command", "complete_task", "fail_task"),
        budget={"usd": 2.0, "calls": 32},
        items=tuple(items[0]),
        semantic_note="not measured here",
    )
    compiled, t_compile = timed(lambda: compile_packet(inputs))
    assert isinstance(compiled, CompiledPacket)
    return compiled, {
        "neighbours": t_neigh,
        "items": t_items,
        "compile": t_compile,
        "total": t_neigh + t_items + t_compile,
    }


def bench_compile(args: argparse.Namespace) -> None:
    """Section: packets on an N-file generated repository, as a DictTree and (--git) as a GitTree."""
    files, t_gen = timed(lambda: generate_repo(args.files))
    assert isinstance(files, dict)
    declared = [p for p in sorted(files) if p.endswith(".py") and "__init__" not in p][:: len(files) // 5][:5]
    print(
        f"== compile: {len(files)} files ({sum(map(len, files.values())) / 1e6:.1f} MB), "
        f"{args.runs} runs, declared: {', '.join(declared)} (generated in {t_gen:.0f} ms)"
    )
    tmp = tempfile.TemporaryDirectory(prefix="drover-packets-")
    try:
        measure("DictTree", DictTree(files), "0" * 40, declared, args.runs)
        if args.git:
            _, t_write = timed(lambda: write_git_repo(files, pathlib.Path(tmp.name) / "repo.git"))
            print(f"   git repository written in {t_write:.0f} ms")
            tree = GitTree(pathlib.Path(tmp.name) / "repo.git")
            measure("GitTree", tree, tree.commit, declared, args.runs)
    finally:
        tmp.cleanup()


def measure(label: str, tree: Tree, commit: str, declared: list[str], runs: int) -> dict[str, float]:
    """The first packet on a commit (its import graph built first), `runs` later ones (the graph ready),
    one by scan (no graph: the same bytes), and the first on a next commit that changes 10 Python files.
    Figures in ms."""
    graphs = Graphs(lambda repo, at: tree)
    blob_cache.TEXTS.clear()  # as a control plane that has not read this repository yet
    blob_cache.WINDOWS.clear()
    first, t_first = timed(lambda: packet_for(tree, commit, declared, graphs.build_now("repo", commit)))
    graph = graphs.build_now("repo", commit)
    samples: dict[str, list[float]] = {}
    for _ in range(runs):
        compiled, parts = packet_for(tree, commit, declared, graph)
        for part, ms in parts.items():
            samples.setdefault(part, []).append(ms)
    scan, t_scan = timed(lambda: packet_for(tree, commit, declared))
    assert isinstance(scan, tuple) and isinstance(first, tuple) and scan[0].data == first[0].data  # same bytes
    python = sorted(p for p in tree.files() if p.endswith(".py") and p not in declared)
    changed = {p: (tree.read(p) or "") + "\n# changed\n" for p in python[:: max(1, len(python) // 10)][:10]}
    next_tree = Overlay(tree, changed)
    before = graphs.scanned.parsed
    built, t_graph = timed(
        lambda: ImportGraph.build(next_tree, next_tree.commit, graphs.scanned, graphs.exact, base=graph)
    )
    assert isinstance(built, ImportGraph)
    _, t_next = timed(lambda: packet_for(next_tree, next_tree.commit, declared, built))  # type: ignore[arg-type]
    packet = compiled.packet
    kinds = [i["source"] for i in packet["items"]]
    print(f"-- {label}: graph built in {graph.seconds * 1000:.0f} ms")
    for part in ("neighbours", "items", "compile", "total"):
        print(f"   {part:<11} ms  {percentiles(samples[part])}   (graph ready, {runs} runs)")
    print(f"   first       ms  {t_first:8.1f}   (graph built first)    scan (no graph) {t_scan:8.1f}")
    print(
        f"   next commit ms  {t_graph + t_next:8.1f}   ({len(changed)} files changed: graph {t_graph:.1f} ms, "
        f"{graphs.scanned.parsed - before} blobs read)"
    )
    print(
        f"   packet: {len(compiled.data)} bytes, {compiled.tokens} tokens, "
        f"{kinds.count('declared_file')} declared + {kinds.count('dependency_neighbour')} neighbour items, "
        f"{len(compiled.dropped)} dropped, file list {len(packet['file_list']['paths'])} of "
        f"{packet['file_list']['total']}, sha256 {compiled.sha256[:16]}"
    )
    return {"first": t_first, "warm": statistics.median(samples["total"]), "next": t_graph + t_next}


class Overlay:
    """A tree with some files' texts replaced: a next commit of a repository without writing to it."""

    def __init__(self, base: Tree, changed: dict[str, str]) -> None:
        self.base, self.changed, self.commit = base, changed, "1" * 40
        self._ids = {p: DictTree({p: t}).blob_id(p) for p, t in changed.items()}

    def files(self) -> list[str]:
        return self.base.files()

    def read(self, path: str) -> str | None:
        return self.changed[path] if path in self.changed else self.base.read(path)

    def blob_id(self, path: str) -> str:
        return self._ids[path] if path in self._ids else self.base.blob_id(path)


def bench_repo(args: argparse.Namespace) -> None:
    """Section compile on a real repository (--repo)."""
    tree = GitTree(args.repo)
    python = sorted((p for p in tree.files() if p.endswith(".py")), key=lambda p: (-len(tree.read(p) or ""), p))
    declared = args.declared.split(",") if args.declared else python[:5]
    mb = sum(len(tree.read(p) or "") for p in python) / 1e6
    print(f"== compile on {args.repo}: {len(tree.files())} files, {len(python)} Python ({mb:.1f} MB of source)")
    print(f"   declared: {', '.join(declared)}; commit {tree.commit[:12]}")
    figures = measure("GitTree", tree, tree.commit, declared, args.runs)
    print(
        f"packet first_ms={figures['first']:.1f} warm_p50_ms={figures['warm']:.1f} "
        f"files={len(tree.files())} mb={mb:.1f}"
    )


def bench_memory(args: argparse.Namespace) -> None:
    """Section: semantic memory index build per 1,000 files, incremental rebuild, query latency."""
    started = time.perf_counter()
    from controlplane.context.memory import Memory

    t_import = time.perf_counter() - started
    files = {path: text for path, text in generate_repo(args.memory_files + 2).items() if path.endswith(".py")}
    tree1 = {path: (f"{path}@1", text) for path, text in files.items()}
    rnd = random.Random(11)
    tree2 = dict(tree1)
    for path in rnd.sample(sorted(files), max(1, len(files) // 100)):
        tree2[path] = (f"{path}@2", files[path] + "\n\ndef added() -> None:\n    return None\n")
    project = f"bench-{rnd.randrange(16**8):08x}"
    with tempfile.TemporaryDirectory(prefix="drover-memory-") as tmp:
        memory = Memory.open(tmp, url=args.memory_url, model_dir=args.model_dir)
        _, t_load = timed(lambda: memory.embedder(["warm up"]))
        first = memory.build(project, "tree-1", tree1)
        again = memory.build(project, "tree-2", tree2)
        latencies, found = [], 0
        for q in range(args.queries):
            text = (
                f"function {q % 8} of module {q % 99 + 1} in package {q % 10}"
                if q % 2
                else f"multiply the value by a constant and add {q % 8}"
            )
            matches, ms = timed(lambda text=text: memory.query(project, "tree-2", text, set(tree2), spend=lambda: True))
            assert isinstance(matches, list)
            latencies.append(ms)
            found += len(matches)
        if args.memory_url:
            memory.client.delete_collection(f"drover-{project}")
    print(
        f"== memory: {len(files)} Python files, {args.queries} queries, "
        f"{'chroma at ' + args.memory_url if args.memory_url else 'PersistentClient in a temporary dir'}"
    )
    print(f"   import {t_import:.2f} s, model load {t_load / 1000:.2f} s (first embedding)")
    print(
        f"   build     {first.embedded} chunks in {first.seconds:.1f} s: "
        f"{first.embedded / first.seconds:.1f} chunks/s, {first.seconds * 1000 / len(files):.1f} s per 1,000 files"
    )
    print(
        f"   rebuild   {len(files) // 100 or 1} files changed: {again.embedded} chunks embedded, "
        f"{again.deleted} deleted in {again.seconds:.2f} s"
    )
    print(f"   query ms  {percentiles(latencies)}  (mean {found / args.queries:.2f} matches)")


SECTIONS: dict[str, Callable[[argparse.Namespace], None]] = {"compile": bench_compile, "memory": bench_memory}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--files", type=int, default=10_000, help="files in the generated repository (default 10000)")
    p.add_argument("--runs", type=int, default=30, help="timed runs per tree (default 30)")
    p.add_argument("--git", action="store_true", help="also write a real git repository and read it as a GitTree")
    p.add_argument("--section", choices=(*SECTIONS, "all"), default="all")
    p.add_argument("--memory-files", type=int, default=1000, help="files indexed by the memory section (default 1000)")
    p.add_argument("--queries", type=int, default=200, help="queries timed by the memory section (default 200)")
    p.add_argument("--memory-url", default="", help="a chroma server; default a PersistentClient in a temporary dir")
    p.add_argument("--model-dir", default="", help="model.onnx + tokenizer.json; default the packaged model")
    p.add_argument("--repo", default="", help="a real git repository (bare or not): the compile section on it")
    p.add_argument("--declared", default="", help="with --repo: comma-separated declared files (default: 5 largest)")
    return p


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.repo:
        bench_repo(args)
        return
    for name, section in SECTIONS.items():
        if args.section in (name, "all"):
            section(args)


if __name__ == "__main__":
    main()
