"""Who sees which agent and which meter, on SQLite and PostgreSQL: the rule ListAgents, DrainAgent,
UndrainAgent and GetUsage share (controlplane.services.tenancy)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.domain import graph
from controlplane.services import agent_presence, change_lifecycle
from controlplane.services.projects import add_project
from controlplane.services.tenancy import Scope, visible_agent, visible_meters, visible_pools
from controlplane.store.engine import Store
from controlplane.store.models import Agent, Event, Meter
from drover.errors import NotFound


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path) -> Iterator[Store]:  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path / 't.db'}" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    s = Store(url)
    s.migrate()

    def fleet(s: Session) -> None:
        for project, pool in (("web", "web"), ("api", "api"), ("plain", "")):
            add_project(s, project, "", pool=pool)
        for name, pool in (("web-1", "web"), ("api-1", "api"), ("any-1", ""), ("spare-1", "spare")):
            s.add(Agent(name=name, pool=pool))

    s.transaction(fleet)
    yield s
    s.close()


@pytest.mark.parametrize(
    "scope, pools, seen",
    [
        (None, None, {"web-1", "api-1", "any-1", "spare-1"}),
        (frozenset({"api"}), {"api"}, {"api-1"}),
        (frozenset({"plain"}), {""}, {"any-1"}),  # the default pool serves a project of no pool
        (frozenset({"web", "api"}), {"web", "api"}, {"web-1", "api-1"}),
        (frozenset({"gone"}), set(), set()),  # a token's project since removed shows nothing
        (frozenset(), set(), set()),
    ],
)
def test_a_caller_sees_the_agents_of_its_projects_pools(
    store: Store, scope: Scope, pools: set[str] | None, seen: set[str]
) -> None:
    def check(s: Session) -> None:
        assert visible_pools(s, scope) == (None if pools is None else frozenset(pools))
        for name in ("web-1", "api-1", "any-1", "spare-1", "never-1"):
            if name in seen:
                assert visible_agent(s, name, scope).name == name
            else:
                with pytest.raises(NotFound) as caught:
                    visible_agent(s, name, scope)
                assert caught.value.message == f"name: no agent {name!r}"

    store.transaction(check)


def test_draining_an_agent_out_of_scope_changes_nothing(store: Store) -> None:
    with pytest.raises(NotFound):
        store.transaction(agent_presence.drain_agent, "web-1", True, frozenset({"api"}))
    assert store.transaction(agent_presence.drain_agent, "api-1", True, frozenset({"api"})).draining
    drained = store.transaction(lambda s: {a.name for a in s.scalars(select(Agent).where(Agent.draining))})
    events = store.transaction(lambda s: [(e.kind, e.agent) for e in s.scalars(select(Event))])
    assert drained == {"api-1"}
    assert [e for e in events if e[0].startswith("agent.")] == [("agent.draining", "api-1")]


def test_a_caller_reads_the_fleets_meters_its_projects_and_its_own_never_a_longer_name(store: Store) -> None:
    def seed(s: Session) -> str:
        change_id = change_lifecycle.submit_change(
            s, graph.ChangeSpec("api", "g", (graph.TaskSpec("t", "implement", "o"),)), "ann"
        )
        other = change_lifecycle.submit_change(
            s, graph.ChangeSpec("web", "g", (graph.TaskSpec("t", "implement", "o"),)), "ann:web"
        )
        for key, kind, period in (
            ("provider-usd:2026-12", "provider_month", "2026-12"),
            ("agent-calls:2026-12-02", "agent_calls_day", "2026-12-02"),
            (f"change-usd:{change_id}", "change", ""),
            (f"change-usd:{other}", "change", ""),
            ("project-usd:api:2026-12", "project", "2026-12"),
            ("project-usd:web:2026-12", "project", "2026-12"),
            ("user-usd:ann:2026-12", "user", "2026-12"),
            ("user-usd:ann:web:2026-12", "user", "2026-12"),  # the user ann:web, not ann
            ("user-usd:bob:2026-12", "user", "2026-12"),
        ):
            s.add(Meter(key=key, kind=kind, period=period))
        return change_id

    mine = store.transaction(seed)
    seen = store.transaction(
        lambda s: set(s.scalars(select(Meter.key).where(visible_meters("ann", frozenset({"api"})))))
    )
    assert seen == {
        "provider-usd:2026-12",
        "agent-calls:2026-12-02",
        f"change-usd:{mine}",
        "project-usd:api:2026-12",
        "user-usd:ann:2026-12",
    }
