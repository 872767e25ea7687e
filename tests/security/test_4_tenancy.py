"""Finding 4: no tenancy. Any user read any Change (Task env included), cancelled anyone's Change,
submitted to any project and so used any project's git token. Tokens could not be listed, revoked or
expire."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import drover
from tests.conftest import ControlPlane, Fleet, python_command, task, wait_for

SLEEP = python_command("import time; time.sleep(60)")


def user(plane: ControlPlane, name: str, role: str, *projects: str, expires_in: str = "") -> str:
    args = ["token", "create", "--kind", "user", "--name", name, "--role", role]
    for project in projects:
        args += ["--project", project]
    if expires_in:
        args += ["--expires-in", expires_in]
    return plane.cli(*args).stdout.strip().splitlines()[-1]


def not_found(call: Callable[[], Any]) -> str:
    with pytest.raises(drover.NotFound) as caught:
        result = call()
        if hasattr(result, "__next__"):
            list(result)
    return caught.value.message


def refused(client: drover.Client) -> bool:
    """Whether the client's token is refused now (it answered before)."""
    try:
        client.list_changes()
    except drover.Unauthenticated:
        return True
    return False


def test_a_user_sees_and_uses_only_the_projects_of_its_token(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    for name in ("web", "api"):
        plane.add_project(name)
    alice, bob = user(plane, "alice", "submit", "web"), user(plane, "bob", "submit", "api")
    fleet.agent("worker")
    with plane.client(alice) as a, plane.client(bob) as b, plane.client() as admin:
        change = a.submit_change("web", "secret work", [task("env", SLEEP, env={"DB_PASSWORD": "hunter2"})])
        run_id = wait_for(lambda: a.get_change(change.id).tasks[0].latest_run_id, 30, what="a run")
        wait_for(lambda: a.get_run(run_id).state == "running", 30, what="the run to start")

        # Another project's Change, run and ChangeSets do not exist for bob: the very messages of an unknown id.
        assert not_found(lambda: b.get_change(change.id)) == not_found(
            lambda: b.get_change("chg_00000000000000000000")
        ).replace("chg_00000000000000000000", change.id)
        for call in (
            lambda: b.watch(change.id),
            lambda: b.cancel_change(change.id),
            lambda: b.list_changesets(change.id),
            lambda: b.raise_budget(change.id, 5),
            lambda: b.get_spend(change.id),
            lambda: b.get_run(run_id),
            lambda: b.run_logs(run_id),
            lambda: b.get_packet(run_id),
        ):
            assert "no " in not_found(call)
        with plane.client(user(plane, "erin", "run.manage", "api")) as e:  # a manager of api only
            assert "no run" in not_found(lambda: e.cancel_run(run_id))
        assert b.list_changes() == [] and b.list_changes(project="web") == []
        assert b.list_runs() == [] and b.list_events() == [] and b.list_claims() == []
        assert b.list_receipts(change_id=change.id) == []
        assert "hunter2" not in str(b.list_events()) + str(b.list_runs())
        # bob cannot submit to web: the same NOT_FOUND as a project that does not exist.
        unknown = not_found(lambda: b.submit_change("nowhere", "g", [task("t", ["true"])]))
        assert not_found(lambda: b.submit_change("web", "g", [task("t", ["true"])])) == unknown.replace(
            "nowhere", "web"
        )
        # bob sees no agent of web's pool, and no meter of web's.
        assert all(not m.key.startswith(("project-usd:web", f"change-usd:{change.id}")) for m in b.get_usage())

        # alice sees her own, admin sees everything.
        assert [c.id for c in a.list_changes()] == [change.id]
        assert dict(a.get_change(change.id).tasks[0].env) == {"DB_PASSWORD": "hunter2"}
        assert [c.id for c in admin.list_changes()] == [change.id]
        admin.cancel_change(change.id)


def test_cancelling_another_users_change_needs_run_manage(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    plane.add_project("web")
    alice, dave = user(plane, "alice", "submit", "web"), user(plane, "dave", "submit", "web")
    carol = user(plane, "carol", "run.manage", "web")
    with plane.client(alice) as a, plane.client(dave) as d, plane.client(carol) as c:
        change = a.submit_change("web", "mine", [task("t", SLEEP)])
        assert d.get_change(change.id).id == change.id  # the same project: dave may look
        with pytest.raises(drover.PermissionDenied) as caught:
            d.cancel_change(change.id)
        assert "run.manage" in caught.value.message
        with pytest.raises(drover.PermissionDenied):
            d.raise_budget(change.id, 5)
        assert a.get_change(change.id).status in ("open", "running")
        assert c.cancel_change(change.id).status == "cancelled"


def test_tokens_are_listed_without_secrets_revoked_at_once_and_expire(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    plane.add_project("web")
    alice = user(plane, "alice", "submit", "web")
    brief = user(plane, "brief", "submit", expires_in="3s")
    with plane.client(alice) as a, plane.client(brief) as short:
        assert a.list_changes() == [] and short.list_changes() == []
        listing = plane.cli("token", "list").stdout
        assert alice not in listing and brief not in listing
        lines = {line.split()[0]: line.split() for line in listing.splitlines()[1:]}
        assert set(lines) == {"admin", "agent", "alice", "brief"}
        assert lines["alice"][1:5] == ["user", "submit", "-", "web"]
        assert lines["agent"][1:5] == ["agent", "-", "default", "-"]

        plane.cli("token", "revoke", "--name", "alice")
        with pytest.raises(drover.Unauthenticated):  # the very next call: nothing is cached
            a.list_changes()
        assert "revoked" in plane.cli("token", "list").stdout.splitlines()[0].lower()
        wait_for(lambda: refused(short), 6, interval=0.2, what="the 3 s token to expire")
    with plane.client() as admin:
        assert admin.list_changes() == []  # the admin token still works
        assert any(e.kind == "token.revoked" for e in admin.list_events(kind="token."))


def test_a_revoked_agent_token_loses_its_stream(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    plane.add_project("web", pool="web")
    agent = fleet.agent("web-1", pool="web")
    plane.cli("token", "revoke", "--name", "web-1")
    with plane.client() as admin:
        wait_for(
            lambda: not any(a.connected for a in admin.list_agents()), 15, what="the revoked agent to be disconnected"
        )
        # agentd's next attempt is refused and, without retry_auth, it exits 4: it cannot reconnect.
        assert agent.proc is not None
        wait_for(lambda: agent.proc.poll() is not None, 30, what="agentd to give up on its revoked token")
        assert agent.proc.returncode == 4, agent.log()
        assert not any(a.connected for a in admin.list_agents()), "a revoked token reconnected"
    assert "UNAUTHENTICATED" in agent.log()
