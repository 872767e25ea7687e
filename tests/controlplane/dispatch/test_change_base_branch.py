"""A Change's base branch (issue 28, fix rounds): a Change that names one has its runs assigned that
branch and its candidate composed on it; one that names none uses the project's branch. Through the
migrated schema, the submit function the API uses, and the functions dispatch and the composer call."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.config import HarnessConfig
from controlplane.dispatch import assignments, composer
from controlplane.domain import graph
from controlplane.services.change_lifecycle import submit_change
from controlplane.services.projects import add_project
from controlplane.store.engine import Store
from controlplane.store.models import Change, Project, Run, Task, utcnow
from controlplane.store.objects import DirectoryStore


@pytest.fixture
def store(tmp_path: pathlib.Path) -> Iterator[Store]:
    s = Store(f"sqlite:///{tmp_path / 't.db'}")
    s.migrate()
    s.transaction(lambda db: add_project(db, "web", "https://forge.invalid/octo/app.git", branch="trunk"))
    yield s
    s.close()


def submitted(store: Store, base_branch: str) -> str:
    task = graph.TaskSpec(key="fix", kind="fix", objective="make CI pass", command=("true",))
    spec = graph.ChangeSpec(project="web", goal="fix the pull request", tasks=(task,), base_branch=base_branch)
    return store.transaction(lambda s: submit_change(s, spec, "github:alice"))


def assigned_branch(store: Store, change_id: str, tmp_path: pathlib.Path) -> str:
    def build(s: Session) -> str:
        task = s.scalars(select(Task).where(Task.change_id == change_id)).one()
        run = Run(id=f"run-{change_id}", change_id=change_id, task_id=task.id, driver="command", created_at=utcnow())
        s.add(run)
        s.flush()
        project = s.get(Project, "web")
        assert project is not None
        return assignments.build(s, run, task, project, HarnessConfig(), DirectoryStore(tmp_path / "objects")).branch

    return store.transaction(build)


def test_a_change_on_a_pull_request_branch_starts_and_composes_there(store: Store, tmp_path: pathlib.Path) -> None:
    on_pr = submitted(store, "drover/issue-7")
    plain = submitted(store, "")
    assert store.transaction(lambda s: s.get(Change, on_pr).base_branch) == "drover/issue-7"
    assert assigned_branch(store, on_pr, tmp_path) == "drover/issue-7"
    assert assigned_branch(store, plain, tmp_path) == "trunk"
    repo, branch, items, _ = store.transaction(lambda s: composer.inputs(s, on_pr))
    assert (repo, branch, items) == ("https://forge.invalid/octo/app.git", "drover/issue-7", [])
    assert store.transaction(lambda s: composer.inputs(s, plain))[1] == "trunk"
