"""AmendChange (issue 29, "Recovery after a stop"; seed 000 "Escalation": the replan a person does):
Tasks and edges added to a running Change, checked as a submit's are, refused by field, for the
Change's owner or a manager only. Real processes, real gRPC, the `drover` CLI as a user runs it."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

import drover
from tests.conftest import ControlPlane, Fleet, task, wait_for
from tests.security.test_4_tenancy import user


def _refused(error: type[drover.DroverError], call: Callable[[], Any]) -> drover.DroverError:
    with pytest.raises(error) as caught:
        call()
    return caught.value


def _cli(plane: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DROVER_TOKEN"}
    env.update(DROVER_TARGET=plane.target, DROVER_TOKEN=plane.admin_token)
    return subprocess.run(
        [sys.executable, "-m", "drover.cli", *args], capture_output=True, text=True, env=env, timeout=60
    )


def test_amend_refuses_by_field_and_by_role(fleet: Fleet, git_repo: pathlib.Path) -> None:
    plane = fleet.start_plane()
    plane.add_project("web", str(git_repo))
    plane.add_project("other", str(git_repo))
    fleet.agent("amend-agent")
    sam, mia = user(plane, "sam", "submit", "web"), user(plane, "mia", "run.manage", "web")
    olga = user(plane, "olga", "admin", "other")
    with plane.client(sam) as s, plane.client(mia) as m, plane.client(olga) as o, plane.client() as admin:
        change = s.submit_change("web", "naps", [task("nap", ["sleep", "300"]), task("then", ["true"], ("nap",))])
        wait_for(lambda: s.get_change(change.id).tasks[0].status == "running", 60, what="the nap to run")
        new = task("more", ["true"], ("then",))

        def field(error: type[drover.DroverError], tasks: Any = (), edges: Any = ()) -> str:
            return _refused(error, lambda: s.amend_change(change.id, tasks, edges)).field

        assert field(drover.InvalidArgument, [task("nap", ["true"])]) == "tasks[0].key"  # the key exists
        assert field(drover.InvalidArgument, [new, {**new, "key": "more"}]) == "tasks[1].key"
        assert field(drover.InvalidArgument, [task("x", ["true"], ("ghost",))]) == "tasks[0].depends_on"
        assert field(drover.InvalidArgument, [{**new, "runtime": "gpt"}]) == "tasks[0].runtime"
        assert field(drover.InvalidArgument, [{**new, "objective": ""}]) == "tasks[0].objective"
        assert field(drover.InvalidArgument, [{**new, "timeout_seconds": 10**9}]) == "tasks[0].timeout_seconds"
        assert field(drover.InvalidArgument, [new], [("more", "ghost")]) == "edges[0]"
        assert field(drover.InvalidArgument, [new], [("then", "then")]) == "edges[0]"
        cycle = _refused(drover.InvalidArgument, lambda: s.amend_change(change.id, [new], [("then", "more")]))
        assert cycle.field == "edges" and "cycle" in cycle.message
        started = _refused(drover.FailedPrecondition, lambda: s.amend_change(change.id, [new], [("nap", "more")]))
        assert started.field == "edges[0]" and "'nap' is running: it has started" in started.message
        many = [task(f"t{i}", ["true"]) for i in range(499)]  # 2 + 499 > 500
        assert field(drover.InvalidArgument, many) == "tasks"
        assert field(drover.InvalidArgument) == "tasks"  # nothing to add

        # Another tenant sees no such Change; a submitter of the same project may not amend sam's.
        assert _refused(drover.NotFound, lambda: o.amend_change(change.id, [new])).field == "change_id"
        assert _refused(drover.NotFound, lambda: s.amend_change("chg_nope", [new])).field == "change_id"
        ben = user(plane, "ben", "submit", "web")
        with plane.client(ben) as b:
            assert _refused(drover.PermissionDenied, lambda: b.amend_change(change.id, [new])).field == "change_id"
        assert len(admin.get_change(change.id).tasks) == 2  # nothing refused added anything
        assert admin.list_events(change_id=change.id, kind="change.amended") == []

        # A manager may; the pending Task `then` gains a dependency on the new one.
        amended = m.amend_change(change.id, [task("lint", ["true"])], [("then", "lint")])
        assert [(t.key, list(t.depends_on)) for t in amended.tasks] == [
            ("nap", []),
            ("then", ["nap", "lint"]),
            ("lint", []),
        ]
        (event,) = admin.list_events(change_id=change.id, kind="change.amended")
        assert event.data == {"by": "mia", "tasks": ["lint"], "edges": [["then", "lint"]]}

        # A cancelled, failed or succeeded Change is not amended; the message says its status.
        s.cancel_change(change.id)
        wait_for(lambda: s.get_change(change.id).status == "cancelled", 60, what="the Change to be cancelled")
        cancelled = _refused(drover.FailedPrecondition, lambda: s.amend_change(change.id, [new]))
        assert cancelled.message == f"change_id: change {change.id} is cancelled"
        failed = s.submit_change("web", "fails", [task("no", ["false"])])
        wait_for(lambda: s.get_change(failed.id).status == "failed", 60, what="the Change to fail")
        refused = _refused(drover.FailedPrecondition, lambda: s.amend_change(failed.id, [new]))
        assert f"change {failed.id} is failed; retry its failed Tasks first" in refused.message
        done = s.submit_change("web", "works", [task("yes", ["true"])])
        wait_for(lambda: s.get_change(done.id).status == "succeeded", 60, what="the Change to succeed")
        succeeded = _refused(drover.FailedPrecondition, lambda: s.amend_change(done.id, [new]))
        assert succeeded.message == f"change_id: change {done.id} is succeeded"


AMENDMENT = """tasks:
  - key: b
    kind: test
    objective: after a
    command: [python3, -c, "print('b ran')"]
    depends_on: [a]
  - key: c
    kind: test
    objective: last
    command: ["true"]
edges:
  - {task: c, depends_on: b}
"""


def test_a_running_change_amended_with_the_cli_runs_the_new_task_after_its_dependency(
    fleet: Fleet, git_repo: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    plane = fleet.start_plane()
    plane.add_project("web", str(git_repo))
    fleet.agent("amend-agent")
    with plane.client() as client:
        change = client.submit_change("web", "sleep, then more", [task("a", ["sleep", "2"])])
        wait_for(lambda: client.get_change(change.id).tasks[0].status == "running", 60, what="a to run")
        (tmp_path / "more.yaml").write_text(AMENDMENT)
        shown = _cli(plane, "amend", change.id, str(tmp_path / "more.yaml"))
        assert shown.returncode == 0, shown.stderr
        assert client.get_change(change.id).tasks[0].status == "running"  # amended while a was running
        list(client.watch(change.id))
        final = client.get_change(change.id)
        assert final.status == "succeeded", [(t.key, t.status, t.reason) for t in final.tasks]
        assert [(t.key, list(t.depends_on), t.status) for t in final.tasks] == [
            ("a", [], "succeeded"),
            ("b", ["a"], "succeeded"),
            ("c", ["b"], "succeeded"),
        ]
        events = client.list_events(change_id=change.id)
        kinds = [(e.kind, e.data.get("key", "")) for e in events]
        ids = {t.key: t.id for t in final.tasks}
        a_done = next(i for i, e in enumerate(events) if e.kind == "run.finished" and e.task_id == ids["a"])
        b_ready = next(i for i, e in enumerate(events) if e.kind == "task.ready" and e.task_id == ids["b"])
        amended = next(i for i, e in enumerate(events) if e.kind == "change.amended")
        assert amended < a_done < b_ready, kinds
        assert events[amended].data == {"by": "admin", "tasks": ["b", "c"], "edges": [["b", "a"], ["c", "b"]]}
