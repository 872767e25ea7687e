"""Context warm-up on a real store and real git repositories: a project's tip gets its import graph when the
project is added and again when its branch moves; a quick pass looks only at new or changed projects."""

from __future__ import annotations

import asyncio
import logging
import pathlib

import pygit2
import pytest

from controlplane.context.import_graph import Graphs
from controlplane.context.retrieval import GitTree
from controlplane.context.warmer import Warmer
from controlplane.services.credentials import Sealer, new_key, set_git_credential
from controlplane.services.projects import add_project
from controlplane.store.engine import Store, sqlite_url
from tests.conftest import make_repo


async def leading() -> bool:
    return True


def commit_file(path: pathlib.Path, name: str, text: str) -> str:
    repo = pygit2.Repository(str(path))
    (path / name).write_text(text)
    repo.index.add_all()
    repo.index.write()
    sig = pygit2.Signature("Test", "test@drover.invalid")
    return str(repo.create_commit("HEAD", sig, sig, "more", repo.index.write_tree(), [repo.head.target]))


def test_a_new_project_and_a_moved_branch_get_their_graph(tmp_path: pathlib.Path) -> None:
    store = Store(sqlite_url(tmp_path))
    store.migrate()
    repo = make_repo(tmp_path / "repo", {"a.py": "import b\n", "b.py": "X = 1\n"})
    graphs = Graphs(GitTree)
    warmer = Warmer(store, tmp_path / "mirrors", graphs, None, leading)
    asyncio.run(warmer.warm_once(everything=False))
    assert warmer.tips == {}  # no project yet

    store.transaction(lambda s: add_project(s, "p", str(repo)))
    asyncio.run(warmer.warm_once(everything=False))  # the quick pass sees the new project
    first = warmer.tips["p"]
    graph = graphs.wait(first, 30)
    assert graph is not None and graph.importers(["b.py"]) == {"a.py"}

    second = commit_file(repo, "c.py", "import b\n")
    asyncio.run(warmer.warm_once(everything=False))  # nothing new or changed in the project table
    assert warmer.tips["p"] == first
    asyncio.run(warmer.warm_once(everything=True))  # the full pass reads every branch
    assert warmer.tips["p"] == second
    graph = graphs.wait(second, 30)
    assert graph is not None and graph.importers(["b.py"]) == {"a.py", "c.py"}
    store.close()


def test_a_repository_that_cannot_be_read_does_not_stop_the_others(tmp_path: pathlib.Path) -> None:
    store = Store(sqlite_url(tmp_path))
    store.migrate()
    repo = make_repo(tmp_path / "repo", {"a.py": "import b\n", "b.py": ""})
    store.transaction(lambda s: add_project(s, "gone", str(tmp_path / "missing")))
    store.transaction(lambda s: add_project(s, "ok", str(repo)))
    warmer = Warmer(store, tmp_path / "mirrors", Graphs(GitTree), None, leading)
    asyncio.run(warmer.warm_once())
    assert set(warmer.tips) == {"ok"}
    store.close()


def test_a_credential_that_does_not_open_skips_its_project_and_says_so_once(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = Store(sqlite_url(tmp_path))
    store.migrate()
    repo = make_repo(tmp_path / "repo", {"a.py": "import b\n", "b.py": ""})
    store.transaction(lambda s: add_project(s, "locked", str(repo)))
    store.transaction(lambda s: add_project(s, "ok", str(repo)))
    lost = Sealer.from_text(new_key())
    store.transaction(lambda s: set_git_credential(s, lost, "locked", "token", "ghp_never-shown-0123", "admin"))
    warmer = Warmer(store, tmp_path / "mirrors", Graphs(GitTree), None, leading, sealer=Sealer.from_text(new_key()))
    with caplog.at_level(logging.WARNING, logger="drover.warmer"):
        asyncio.run(warmer.warm_once())
        asyncio.run(warmer.warm_once())
    assert set(warmer.tips) == {"ok"}
    said = [r.getMessage() for r in caplog.records if "locked" in r.getMessage()]
    assert len(said) == 1 and "does not open" in said[0] and "ghp_never-shown" not in caplog.text
    store.close()
