"""A merge conflict reopens the later Task stacked on the one it conflicted with, and the Change
succeeds with both edits (issue 29 "Merge conflicts", seed 000 "Stacked workspaces"), across a real
control plane, agentd and git.

Two Tasks edit neighbouring lines of f.txt ("x\\n"): alpha rewrites line 1, beta adds a line after it.
From the base they conflict in git's merge; either one run again on the other's ChangeSet holds both
edits, so the same edits compose once stacked."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterator
from typing import Any

import httpx
import pygit2
import pytest

from drover.testing import fake_anthropic as fake
from tests.conftest import API_KEY, Fleet, make_repo
from tests.fleet.test_console import console_url

EDITS = {
    "alpha": {"old_text": "x", "new_text": "alpha"},  # line 1, wherever beta's line is
    "beta": {"old_text": "\n", "new_text": "\nbeta\n"},  # a line after line 1, whatever line 1 says
    "gamma": {"old_text": "alpha\nbeta\n", "new_text": "alpha\nbeta\ngamma\n"},  # only with both edits
}


def respond(body: Any) -> fake.Step:
    """Each Task's run: its one edit, then complete_task (as many runs as the Change needs)."""
    messages = body.get("messages") or []
    last = messages[-1].get("content") if messages else ""
    if isinstance(last, list) and any(block.get("type") == "tool_result" for block in last):
        return fake.tool_use("complete_task", {"summary": "done"})
    whole = json.dumps(body)
    key = next(k for k in EDITS if f"# Your Task: {k} (" in whole)
    return fake.tool_use("edit_file", {"path": "f.txt", "edits": [EDITS[key]]})


@pytest.fixture
def scripted() -> Iterator[fake.FakeAnthropic]:
    server = fake.FakeAnthropic(api_key=API_KEY, responder=respond).start()
    yield server
    server.stop()


def task(key: str, *deps: str) -> dict:
    return {"key": key, "kind": "implement", "objective": f"do {key}", "depends_on": list(deps), "complexity": "medium"}


def start(fleet: Fleet, model: fake.FakeAnthropic, tmp_path: pathlib.Path) -> pathlib.Path:
    repo = make_repo(tmp_path / "origin", {"f.txt": "x\n"})
    fleet.plane.extra_env.update(ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=API_KEY)
    fleet.start_plane("--http-listen", "127.0.0.1:0")
    fleet.plane.add_project("web", str(repo))
    fleet.agent("worker")
    return repo


def blob(repo: pathlib.Path, branch: str, path: str) -> str:
    origin = pygit2.Repository(str(repo))
    tree = origin[origin.branches[branch].target].peel(pygit2.Commit).tree
    return origin[tree[path].id].data.decode()


def test_a_candidate_conflict_reopens_the_later_task_and_the_change_succeeds(
    fleet: Fleet, scripted: fake.FakeAnthropic, tmp_path: pathlib.Path
) -> None:
    repo = start(fleet, scripted, tmp_path)
    with fleet.plane.client() as client:
        change = client.submit_change("web", "two edits", [task("alpha"), task("beta")])
        events = list(client.watch(change.id))
        final = client.get_change(change.id)
        changesets = client.list_changesets(change.id)
    assert final.status == "succeeded", final
    assert blob(repo, final.candidate_branch, "f.txt") == "alpha\nbeta\n"
    kinds = [e.kind for e in events]
    conflicted, reopening = kinds.index("change.candidate_conflict"), kinds.index("task.reopened")
    assert conflicted < reopening < kinds.index("change.candidate_composed")
    (reopened,) = [e for e in events if e.kind == "task.reopened"]
    later, earlier = reopened.data["key"], reopened.data["depends_on"][0]
    assert {later, earlier} == {"alpha", "beta"}
    assert reopened.data["reason"] == "candidate_conflict" and reopened.data["files"] == ["f.txt"]
    assert reopened.data["reopening"] == 1
    by_key = {t.key: t for t in final.tasks}
    assert list(by_key[later].depends_on) == [earlier]  # GetChange shows the added edge
    assert [cs.task_key for cs in changesets].count(later) == 2  # it published again, stacked
    newest = max((cs for cs in changesets if cs.task_key == later), key=lambda cs: cs.created_at)
    assert list(newest.stacked_on)  # on the earlier Task's ChangeSet

    with httpx.Client(base_url=console_url(fleet), timeout=30) as console:
        assert console.post("/login", data={"token": fleet.plane.admin_token, "next": "/"}).status_code == 303
        page = console.get(f"/changes/{change.id}").text
    assert f"task.reopened {later} (candidate_conflict in f.txt), now depends on {earlier}" in page


def test_a_dependency_conflict_reopens_the_dependency_and_the_dependent_runs_again(
    fleet: Fleet, scripted: fake.FakeAnthropic, tmp_path: pathlib.Path
) -> None:
    repo = start(fleet, scripted, tmp_path)
    with fleet.plane.client() as client:
        change = client.submit_change(
            "web", "two edits, then a reader", [task("alpha"), task("beta"), task("gamma", "alpha", "beta")]
        )
        events = list(client.watch(change.id))
        final = client.get_change(change.id)
        gamma = next(t for t in final.tasks if t.key == "gamma")
        runs = client.list_runs(change_id=change.id)
    assert final.status == "succeeded", final
    (reopened,) = [e for e in events if e.kind == "task.reopened"]
    assert reopened.data["reason"] == "dependency_merge_conflict" and reopened.data["dependent"] == "gamma"
    assert reopened.data["files"] == ["f.txt"]
    gamma_runs = sorted((r for r in runs if r.task_id == gamma.id), key=lambda r: r.created_at)
    assert gamma_runs[0].reason == "dependency_merge_conflict" and gamma_runs[-1].state == "succeeded"
    assert blob(repo, final.candidate_branch, "f.txt") == "alpha\nbeta\ngamma\n"  # gamma saw both edits
