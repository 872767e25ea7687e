"""`drover amend`'s file (drover.changefile.load_amendment): tasks as a Change file has them and edges;
a wrong shape is refused before anything is sent, with its line."""

from __future__ import annotations

import pathlib

import pytest

from drover import changefile
from drover.errors import InvalidArgument

GOOD = """tasks:
  - key: docs
    kind: implement
    objective: document it
    depends_on: [fix]
edges:
  - {task: release, depends_on: docs}
"""


def test_an_amendment_file_loads_its_tasks_and_edges(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "more.yaml"
    path.write_text(GOOD)
    data = changefile.load_amendment(path)
    assert data["tasks"][0]["depends_on"] == ["fix"]
    assert data["edges"] == [{"task": "release", "depends_on": "docs"}]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("project: web\ntasks: []\n", "more.yaml:1: project: unknown key; known: edges, tasks"),
        ("edges: {task: a}\n", "more.yaml:1: edges: expected a list of edges, not a mapping"),
        ("edges:\n  - {task: a}\n", "more.yaml:2: edges[0]: an edge is a mapping of task and depends_on (Task keys)"),
        ("edges:\n  - {task: a, depends_on: [b]}\n", "more.yaml:2: edges[0].depends_on: expected a string, not a list"),
        ("tasks:\n  - key: a\n    command: ls -l\n", "more.yaml:3: tasks[0].command: an argv list, not a shell string"),
        ("- a\n", "more.yaml:1: an amendment file is a mapping with tasks and edges"),
    ],
)
def test_a_bad_amendment_file_is_refused_with_its_line(tmp_path: pathlib.Path, text: str, message: str) -> None:
    path = tmp_path / "more.yaml"
    path.write_text(text)
    with pytest.raises(InvalidArgument) as caught:
        changefile.load_amendment(path)
    assert caught.value.message == f"{tmp_path}/{message}"


def test_a_change_file_still_refuses_edges(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "change.yaml"
    path.write_text("project: web\ngoal: g\nedges: []\n")
    with pytest.raises(InvalidArgument, match="edges: unknown key"):
        changefile.load(path)
