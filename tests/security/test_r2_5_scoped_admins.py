"""Issue 24, finding 5: a project-scoped admin drained another pool's agent by name (DrainAgent and
UndrainAgent answered OK for an agent its ListAgents hid). A token scoped to some projects sees the agents
of those projects' pools, the meters of those projects, their Changes and its own user meter; anything else
is NOT_FOUND with the very message of a name that was never there, and nothing changes. Inside its scope
the same calls work."""

from __future__ import annotations

import pathlib

from drover.testing import fake_anthropic as fake
from tests.conftest import API_KEY, Fleet, task, wait_for
from tests.security.test_4_tenancy import not_found, user


def _agent(client, name: str):  # type: ignore[no-untyped-def]
    return next(a for a in client.list_agents() if a.name == name)


def _drains_of(client, name: str) -> list[str]:  # type: ignore[no-untyped-def]
    kinds = ("agent.draining", "agent.undrained")
    return [
        e.kind for e in client.list_events(kind="agent.") if e.kind in kinds and name in (e.agent, e.data.get("agent"))
    ]


def test_a_scoped_admin_cannot_drain_or_undrain_an_agent_of_another_pool(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    plane.add_project("web", pool="web")
    plane.add_project("api", pool="api")
    web, api = fleet.agent("web-1", pool="web"), fleet.agent("api-1", pool="api")
    ann = user(plane, "ann", "admin", "api")
    with plane.client(ann) as a, plane.client() as admin:
        assert [x.name for x in a.list_agents()] == ["api-1"]

        # web-1 does not exist for ann: the message of an agent that was never there, and nothing changes.
        for call in (a.drain_agent, a.undrain_agent):
            unknown = not_found(lambda call=call: call("no-such-agent"))
            assert unknown == "name: no agent 'no-such-agent'"
            assert not_found(lambda call=call: call("web-1")) == unknown.replace("no-such-agent", "web-1")
        assert not _agent(admin, "web-1").draining
        assert a.list_runs(agent="web-1") == []

        # An agent the fleet's admin drained stays drained when ann tries to undrain it.
        assert admin.drain_agent("web-1").draining
        assert not_found(lambda: a.undrain_agent("web-1")) == "name: no agent 'web-1'"
        assert _agent(admin, "web-1").draining
        assert not admin.undrain_agent("web-1").draining
        assert _drains_of(admin, "web-1") == ["agent.draining", "agent.undrained"]  # the admin's two, no more

        # Within its scope ann drains and undrains, and the agent is told.
        assert a.drain_agent("api-1").draining
        wait_for(lambda: "draining: taking no new runs" in api.log(), 15, what="api-1 to be told to drain")
        assert not a.undrain_agent("api-1").draining
        assert _drains_of(admin, "api-1") == ["agent.draining", "agent.undrained"]
    # web-1 was told only what the fleet's admin did: one drain, one undrain.
    assert web.log().count("draining: taking no new runs") == 1


def test_a_scoped_admin_sees_no_meter_change_or_budget_of_another_project(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path
) -> None:
    """Meters are read by key prefix; no prefix reaches another project's meters or another user's
    (a user named `ann:web` is not `ann`, though its meter key starts with `user-usd:ann:`)."""
    model.extend([fake.tool_use("complete_task", {"summary": "done"}) for _ in range(2)])
    fleet.plane.extra_env.update(ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=API_KEY)
    plane = fleet.start_plane()
    plane.add_project("web", str(calc_repo), pool="web")
    plane.add_project("api", str(calc_repo), pool="api")
    fleet.agent("web-1", pool="web")
    fleet.agent("api-1", pool="api")
    ann, other = user(plane, "ann", "admin", "api"), user(plane, "ann:web", "submit", "web")
    work = [{"key": "fix", "kind": "implement", "objective": "fix add", "size": "small", "risk": "low"}]
    with plane.client(ann) as a, plane.client(other) as o, plane.client() as admin:
        theirs = o.submit_change("web", "their work", work, budget_usd=1)
        mine = a.submit_change("api", "my work", work, budget_usd=1)
        for change in (theirs, mine):
            list(admin.watch(change.id))
            assert admin.get_change(change.id).status == "succeeded"
        every = {m.key for m in admin.get_usage()}
        month = next(k for k in every if k.startswith("provider-usd:")).split(":")[1]
        foreign = {f"change-usd:{theirs.id}", f"project-usd:web:{month}", f"user-usd:ann:web:{month}"}
        own = {f"change-usd:{mine.id}", f"project-usd:api:{month}", f"user-usd:ann:{month}"}
        assert foreign | own <= every

        # ann sees its own project's and its own meters, whatever prefix it asks with; never another's.
        for prefix in ("", "change-usd:", "project-usd:", "project-usd:web", "user-usd:", "user-usd:ann:"):
            seen = {m.key for m in a.get_usage(prefix)}
            assert not seen & foreign, f"prefix {prefix!r} showed {sorted(seen & foreign)}"
            assert seen >= {k for k in own if k.startswith(prefix)}

        # Another project's Change, budget and project are NOT_FOUND for the admin of api, as if never there.
        unknown = not_found(lambda: a.get_change("chg_00000000000000000000"))
        for call in (
            lambda: a.get_change(theirs.id),
            lambda: a.raise_budget(theirs.id, 50),
            lambda: a.get_spend(theirs.id),
            lambda: a.cancel_change(theirs.id),
            lambda: a.list_changesets(theirs.id),
        ):
            assert not_found(call) == unknown.replace("chg_00000000000000000000", theirs.id)
        assert a.list_changes(project="web") == []
        no_project = not_found(lambda: a.submit_change("nowhere", "g", [task("t", ["true"])]))
        assert not_found(lambda: a.submit_change("web", "g", [task("t", ["true"])])) == no_project.replace(
            "nowhere", "web"
        )
        assert admin.get_change(theirs.id).budget_usd == 1
        assert {c.project for c in admin.list_changes()} == {"web", "api"} and len(admin.list_changes()) == 2

        # Its own Change it reads, spend and all.
        assert a.get_change(mine.id).status == "succeeded" and a.get_spend(mine.id).spent_micros > 0
