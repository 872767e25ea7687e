"""Advisory Claims: leases, renewal at half-life, expiry, contention, fencing, release on every run end,
and conflict detection (tables for the pure part; the store part on SQLite and PostgreSQL)."""

from __future__ import annotations

import datetime as dt
import pathlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.domain import claims as claim_rules
from controlplane.domain.claims import task_resources
from controlplane.domain.graph import ChangeSpec, TaskSpec
from controlplane.services import agent_presence, change_lifecycle, claims, projects, run_lifecycle
from controlplane.services.claims import ClaimState
from controlplane.services.run_lifecycle import RunMessage
from controlplane.store.engine import Store, aware
from controlplane.store.events import new_id
from controlplane.store.models import (
    Agent,
    ChangeSet,
    Claim,
    Conflict,
    Event,
    Run,
    Task,
    utcnow,
)
from drover.errors import FailedPrecondition, InvalidArgument

T0 = dt.datetime(2026, 11, 30, 12, 0, 0, tzinfo=dt.UTC)
AGENT = "agent-1"


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


# --- pure ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "renewed, expires, now, due",
    [
        (0, 120, 0, False),
        (0, 120, 59.9, False),
        (0, 120, 60, True),  # half-life of a 120 s lease
        (0, 120, 119, True),
        (0, 120, 200, True),  # expired: overdue too
        (60, 180, 119, False),  # renewed at 60 s: next due at 120 s
        (60, 180, 120, True),
        (0, 30, 15, True),  # a shorter lease has a shorter half-life
    ],
)
def test_renewal_is_due_at_half_life(renewed: float, expires: float, now: float, due: bool) -> None:
    assert claim_rules.needs_renewal(at(renewed), at(expires), at(now)) is due


@pytest.mark.parametrize("now, expired", [(119.999, False), (120, True), (500, True)])
def test_a_lease_expires_at_its_end(now: float, expired: bool) -> None:
    assert claim_rules.lease_expired(at(120), at(now)) is expired


@pytest.mark.parametrize(
    "given, normal",
    [
        ("src/app.py", "src/app.py"),
        ("./src//app.py", "src/app.py"),
        ("  /src/app.py ", "src/app.py"),
        ("src\\app.py", "src/app.py"),
        ("file:src/app.py", "src/app.py"),
        ("src/*.py", "src/*.py"),
        ("table:users", "table:users"),
        ("Table: users ", "table:users"),
        ("endpoint:/api/x", "endpoint:/api/x"),
    ],
)
def test_resources_are_normalised(given: str, normal: str) -> None:
    assert claim_rules.normalise(given) == normal


@pytest.mark.parametrize("given", ["", "  ", ".", "../outside.py", "a/../../b", "table:"])
def test_a_resource_that_names_nothing_is_refused(given: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        claim_rules.normalise(given)
    assert caught.value.field == "resources"


def test_a_tasks_resources_are_its_files_and_named_resources() -> None:
    spec = {"files": ["./src/a.py", "src/a.py"], "resources": ["table:users", "src/*.py"], "size": "small"}
    assert task_resources(spec) == ("src/*.py", "src/a.py", "table:users")
    assert task_resources({}) == ()


@pytest.mark.parametrize(
    "a, b, overlap",
    [
        ("src/app.py", "src/app.py", True),
        ("src/app.py", "src/db.py", False),
        ("src/*.py", "src/app.py", True),  # a glob and a file overlap when the glob matches it
        ("src/app.py", "src/*.py", True),
        ("src/*.py", "src/app.ts", False),
        ("src/*.py", "lib/app.py", False),
        ("src/[ab].py", "src/a.py", True),
        ("src/[!ab].py", "src/a.py", False),
        ("src/*.py", "src/a*", True),  # src/a.py matches both
        ("src/*.py", "src/*.ts", False),
        ("src/?.py", "src/ab*", False),  # one character cannot be "ab..."
        ("*", "table:users", False),  # a path glob never covers a named resource
        ("table:users", "table:users", True),
        ("table:users", "table:orders", False),
        ("table:users", "endpoint:users", False),
        ("endpoint:/api/*", "endpoint:/api/x", True),
    ],
)
def test_overlap(a: str, b: str, overlap: bool) -> None:
    assert claim_rules.overlaps(a, b) is overlap
    assert claim_rules.overlaps(b, a) is overlap


def test_find_conflicts_pairs_tasks_by_shared_files_and_contention() -> None:
    order = ["a", "b", "c", "d"]
    deps = {"c": ["a"], "d": []}
    files = {"a": ["x.py", "y.py"], "b": ["y.py", "z.py"], "c": ["x.py"], "d": ["q.py"]}
    found = claim_rules.find_conflicts(order, deps, files, [("d", "b", "table:users"), ("c", "c", "table:users")])
    assert found == {("a", "b"): (["y.py"], []), ("b", "d"): ([], ["table:users"])}, (
        "c stacks on a, so their shared x.py is no conflict; a Task never conflicts with itself"
    )


# --- store -----------------------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Store]:
    """A migrated store with project "web", on SQLite and on PostgreSQL."""
    url = f"sqlite:///{tmp_path / 'drover.db'}" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    store = Store(url)
    store.migrate()
    store.transaction(projects.add_project, "web", "https://example.invalid/web.git")
    yield store
    store.close()


def task(key: str, *depends_on: str) -> TaskSpec:
    return TaskSpec(key=key, kind="test", objective=f"do {key}", depends_on=depends_on, command=("true",))


def submit(store: Store, *tasks: TaskSpec) -> str:
    return store.transaction(change_lifecycle.submit_change, ChangeSpec(project="web", goal="g", tasks=tasks), "alice")


def run_of(store: Store, change_id: str, key: str) -> Run:
    def load(s: Session) -> Run:
        return s.scalars(
            select(Run).join(Task, Task.id == Run.task_id).where(Run.change_id == change_id, Task.key == key)
        ).one()

    return store.transaction(load)


def say(store: Store, run_id: str, seq: int, kind: str, agent: str = AGENT, **fields: Any) -> int:
    return store.transaction(run_lifecycle.apply_run_message, agent, RunMessage(run_id, seq, kind, **fields), 1 << 20)


def start(store: Store, run_id: str, agent: str = AGENT) -> None:
    assert store.transaction(run_lifecycle.assign, run_id, agent) is not None
    assert say(store, run_id, 1, "started", agent=agent) == 1


def started_runs(store: Store, *keys: str, agents: tuple[str, ...] = ()) -> tuple[str, list[str]]:
    """A Change with independent Tasks `keys`, each with a running run (on agent-1, or `agents`)."""
    change_id = submit(store, *(task(k) for k in keys))
    run_ids = []
    for n, key in enumerate(keys):
        run_ids.append(run_of(store, change_id, key).id)
        start(store, run_ids[-1], agents[n] if agents else AGENT)
    return change_id, run_ids


def acquire(
    store: Store, run_id: str, resources: list[str], now: dt.datetime, lease: dt.timedelta = claim_rules.LEASE
) -> list[ClaimState]:
    return store.transaction(claims.acquire, run_id, resources, now, lease)


def events(store: Store, kind: str, **where: str) -> list[Event]:
    return store.transaction(lambda s: list(s.scalars(select(Event).filter_by(kind=kind, **where).order_by(Event.id))))


def held(store: Store, run_id: str) -> dict[str, int]:
    return {c.resource: c.generation for c in store.transaction(lambda s: claims.list_claims(s, False, run_id=run_id))}


def test_a_run_acquires_its_resources_with_a_120_s_lease(store: Store) -> None:
    change_id, [run_id] = started_runs(store, "a")

    got = acquire(store, run_id, ["./src/app.py", "table:users", "src/app.py"], T0)

    assert [(c.resource, c.run_id, c.holder, c.generation, c.contended_with) for c in got] == [
        ("src/app.py", run_id, AGENT, 1, ()),
        ("table:users", run_id, AGENT, 1, ()),
    ]
    assert {(c.acquired_at, c.expires_at, c.released_at) for c in got} == {(T0, at(120), None)}
    assert store.transaction(claims.list_claims) == got
    [acquired] = events(store, "claim.acquired", run_id=run_id)
    assert (acquired.change_id, acquired.agent) == (change_id, AGENT)
    assert acquired.data["claims"] == [
        {"resource": "src/app.py", "generation": 1},
        {"resource": "table:users", "generation": 1},
    ]


def test_acquiring_again_renews_the_runs_own_claim(store: Store) -> None:
    _, [run_id] = started_runs(store, "a")
    acquire(store, run_id, ["src/app.py"], T0)
    [again] = acquire(store, run_id, ["src/app.py"], at(30))
    assert (again.generation, again.acquired_at, again.expires_at) == (1, T0, at(150))
    assert len(store.transaction(claims.list_claims, True)) == 1
    assert events(store, "claim.contended") == []


def test_a_finished_run_cannot_acquire(store: Store) -> None:
    _change_id, [run_id] = started_runs(store, "a")
    say(store, run_id, 2, "finished", status="succeeded")
    with pytest.raises(FailedPrecondition):
        acquire(store, run_id, ["src/app.py"], T0)


def test_claims_are_renewed_at_half_life(store: Store) -> None:
    _, [run_id] = started_runs(store, "a")
    acquire(store, run_id, ["src/app.py", "table:users"], T0)

    assert store.transaction(claims.renew_due, run_id, at(59)) == {}, "not yet at half-life"
    assert store.transaction(claims.renew_due, run_id, at(60)) == {"src/app.py": True, "table:users": True}
    assert {c.expires_at for c in store.transaction(claims.list_claims)} == {at(180)}
    assert store.transaction(claims.renew_due, run_id, at(119)) == {}, "next due at 120 s"

    assert store.transaction(claims.renew, run_id, {"./src/app.py": 1}, at(130)) == {"./src/app.py": True}
    assert {c.resource: c.expires_at for c in store.transaction(claims.list_claims)} == {
        "src/app.py": at(250),
        "table:users": at(180),
    }


def test_an_expired_claim_is_free_and_the_next_holder_gets_a_new_generation(store: Store) -> None:
    _, [old, new] = started_runs(store, "a", "b", agents=("agent-1", "agent-2"))
    acquire(store, old, ["src/app.py"], T0)

    [taken] = acquire(store, new, ["src/app.py"], at(120))

    assert (taken.run_id, taken.holder, taken.generation, taken.contended_with) == (new, "agent-2", 2, ())
    assert held(store, old) == {}, "the expired claim is marked released"
    [freed] = store.transaction(lambda s: claims.list_claims(s, True, run_id=old))
    assert freed.released_at == at(120)
    assert events(store, "claim.contended") == [], "an expired lease contends with nobody"
    [expired] = events(store, "claim.expired", run_id=old)
    assert (expired.data["resource"], expired.data["generation"], expired.data["taken_by"]) == ("src/app.py", 1, new)


def test_a_claim_another_run_holds_is_contended_but_never_blocks(store: Store) -> None:
    change_id, [holder, contender] = started_runs(store, "a", "b", agents=("agent-1", "agent-2"))
    acquire(store, holder, ["src/app.py", "table:users"], T0)

    got = acquire(store, contender, ["src/*.py", "table:users", "table:orders"], at(30))

    assert [(c.resource, c.generation, c.contended_with) for c in got] == [
        ("src/*.py", 1, (holder,)),
        ("table:orders", 1, ()),
        ("table:users", 1, (holder,)),
    ]
    assert held(store, holder) == {"src/app.py": 1, "table:users": 1}, "both hold"
    assert held(store, contender) == {"src/*.py": 1, "table:orders": 1, "table:users": 1}
    contended = events(store, "claim.contended", change_id=change_id)
    assert [(e.run_id, e.agent) for e in contended] == [(contender, "agent-2")] * 2
    assert [
        {k: e.data[k] for k in ("resource", "held_resource", "holder_run", "holder_agent", "contender_run")}
        for e in contended
    ] == [
        {
            "resource": "src/*.py",
            "held_resource": "src/app.py",
            "holder_run": holder,
            "holder_agent": "agent-1",
            "contender_run": contender,
        },
        {
            "resource": "table:users",
            "held_resource": "table:users",
            "holder_run": holder,
            "holder_agent": "agent-1",
            "contender_run": contender,
        },
    ]
    tasks = store.transaction(lambda s: {t.key: t.id for t in s.scalars(select(Task))})
    assert store.transaction(claims.contended_runs, change_id) == [
        claims.Contention("src/*.py", "src/app.py", holder, tasks["a"], change_id, contender, tasks["b"]),
        claims.Contention("table:users", "table:users", holder, tasks["a"], change_id, contender, tasks["b"]),
    ]


def test_concurrent_acquisitions_all_hold_and_each_contends_with_the_earlier_ones(store: Store) -> None:
    keys = [f"t{n}" for n in range(4)]
    change_id, run_ids = started_runs(store, *keys)
    barrier = threading.Barrier(len(run_ids))
    errors: list[BaseException] = []

    def claim(run_id: str) -> None:
        barrier.wait()
        try:
            acquire(store, run_id, ["table:users"], T0)
        except BaseException as err:  # reported by the assertion below
            errors.append(err)

    threads = [threading.Thread(target=claim, args=(r,)) for r in run_ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert {c.generation for c in store.transaction(claims.list_claims)} == {1}, "one lease, shared"
    assert len(store.transaction(claims.list_claims)) == 4
    assert len(events(store, "claim.contended", change_id=change_id)) == 0 + 1 + 2 + 3


def test_a_holder_whose_expired_lease_was_taken_over_is_fenced(store: Store) -> None:
    _, [old, new] = started_runs(store, "a", "b", agents=("agent-1", "agent-2"))
    [first] = acquire(store, old, ["src/app.py"], T0)
    acquire(store, new, ["src/app.py"], at(121))

    assert store.transaction(claims.renew, old, {"src/app.py": first.generation}, at(122)) == {"src/app.py": False}
    [fenced] = events(store, "claim.fenced", run_id=old)
    assert (fenced.agent, fenced.data["resource"], fenced.data["generation"], fenced.data["current_generation"]) == (
        "agent-1",
        "src/app.py",
        1,
        2,
    )
    assert store.transaction(claims.renew, new, {"src/app.py": 2}, at(122)) == {"src/app.py": True}
    assert held(store, old) == {} and held(store, new) == {"src/app.py": 2}


def test_a_takeover_through_an_overlapping_glob_fences_the_old_holder(store: Store) -> None:
    _, [old, new] = started_runs(store, "a", "b")
    acquire(store, old, ["src/app.py"], T0)
    acquire(store, new, ["src/*.py"], at(200))
    assert store.transaction(claims.renew, old, {"src/app.py": 1}, at(201)) == {"src/app.py": False}


def test_an_expired_lease_nobody_took_can_still_be_renewed(store: Store) -> None:
    _, [run_id] = started_runs(store, "a")
    acquire(store, run_id, ["src/app.py"], T0)
    assert store.transaction(claims.renew, run_id, {"src/app.py": 1}, at(300)) == {"src/app.py": True}
    assert {c.expires_at for c in store.transaction(claims.list_claims)} == {at(420)}


def test_renewing_a_generation_the_run_never_held_is_refused(store: Store) -> None:
    _, [run_id] = started_runs(store, "a")
    acquire(store, run_id, ["src/app.py"], T0)
    assert store.transaction(claims.renew, run_id, {"src/app.py": 7, "table:x": 1}, at(1)) == {
        "src/app.py": False,
        "table:x": False,
    }


# --- release on every run end ------------------------------------------------------------------------


def _finish_succeeded(store: Store, change_id: str, run_id: str) -> None:
    say(store, run_id, 2, "finished", status="succeeded")


def _finish_failed(store: Store, change_id: str, run_id: str) -> None:
    say(store, run_id, 2, "finished", status="failed", exit_code=1)


def _finish_cancelled(store: Store, change_id: str, run_id: str) -> None:
    store.transaction(run_lifecycle.cancel_run, run_id, "stop it")
    say(store, run_id, 2, "finished", status="cancelled", exit_code=-15)


def _cancel_change(store: Store, change_id: str, run_id: str) -> None:
    store.transaction(change_lifecycle.cancel_change, change_id)
    say(store, run_id, 2, "finished", status="cancelled", exit_code=-15)


def _agent_lost(store: Store, change_id: str, run_id: str) -> None:
    store.transaction(agent_presence.agent_disconnected, AGENT)
    store.transaction(lambda s: setattr(s.get(Agent, AGENT), "disconnected_at", utcnow() - dt.timedelta(hours=1)))
    assert store.transaction(agent_presence.fail_lost_runs, dt.timedelta(minutes=2)) == [run_id]


def _agent_restarted(store: Store, change_id: str, run_id: str) -> None:
    store.transaction(agent_presence.agent_connected, AGENT, {}, 1, ["command"], "test", set(), False)


@pytest.mark.parametrize(
    "end, state, reason",
    [
        (_finish_succeeded, "succeeded", ""),
        (_finish_failed, "failed", ""),
        (_finish_cancelled, "cancelled", ""),
        (_cancel_change, "cancelled", ""),
        (_agent_lost, "failed", "agent_lost"),
        (_agent_restarted, "failed", "agent_restarted"),
    ],
)
def test_every_run_end_releases_the_runs_claims(
    store: Store, end: Callable[[Store, str, str], None], state: str, reason: str
) -> None:
    store.transaction(agent_presence.agent_connected, AGENT, {}, 1, ["command"], "test", set(), False)
    change_id, [run_id, other] = started_runs(store, "a", "b", agents=(AGENT, "agent-2"))
    acquire(store, run_id, ["src/app.py", "table:users"], T0)
    acquire(store, other, ["docs/*.md"], T0)

    end(store, change_id, run_id)

    run = store.transaction(lambda s: s.get(Run, run_id))
    assert (run.state, run.reason) == (state, reason)
    assert held(store, run_id) == {}
    every = store.transaction(lambda s: claims.list_claims(s, True, run_id=run_id))
    assert len(every) == 2 and all(c.released_at is not None for c in every)
    [released] = events(store, "claim.released", run_id=run_id)
    assert (released.change_id, released.agent, released.data["resources"]) == (
        change_id,
        AGENT,
        ["src/app.py", "table:users"],
    )
    if end is not _cancel_change:
        assert held(store, other) == {"docs/*.md": 1}, "other runs keep theirs"


def test_a_queued_run_cancelled_releases_its_claims(store: Store) -> None:
    change_id = submit(store, task("a"))
    run_id = run_of(store, change_id, "a").id
    acquire(store, run_id, ["src/app.py"], T0)
    store.transaction(run_lifecycle.cancel_run, run_id, "no longer needed")
    assert store.transaction(lambda s: s.get(Run, run_id)).state == "cancelled"
    assert held(store, run_id) == {}
    assert len(events(store, "claim.released", run_id=run_id)) == 1


def test_a_released_resource_is_free_with_a_new_generation(store: Store) -> None:
    _, [first, second] = started_runs(store, "a", "b")
    acquire(store, first, ["table:users"], T0)
    say(store, first, 2, "finished", status="succeeded")
    [taken] = acquire(store, second, ["table:users"], at(1))
    assert (taken.generation, taken.contended_with) == (2, ())


# --- conflict detection ------------------------------------------------------------------------------


def add_changesets(store: Store, change_id: str, own_files: dict[str, list[str]]) -> dict[str, str]:
    """A ChangeSet row for each Task key (its run is the Task's first run); answers Task ids by key."""

    def add(s: Session) -> dict[str, str]:
        ids = {}
        for key, files in own_files.items():
            run = s.scalars(
                select(Run).join(Task, Task.id == Run.task_id).where(Run.change_id == change_id, Task.key == key)
            ).one()
            s.add(
                ChangeSet(
                    id=new_id("cs"),
                    change_id=change_id,
                    task_id=run.task_id,
                    run_id=run.id,
                    branch=f"drover/{change_id}/{key}",
                    commit="c" * 40,
                    base_commit="b" * 40,
                    start_commit="b" * 40,
                    files=files,
                    own_files=files,
                    patch_ref="",
                )
            )
            ids[key] = run.task_id
        return ids

    return store.transaction(add)


def conflicts(store: Store, change_id: str) -> list[tuple[str, str, list[str], list[str]]]:
    return store.transaction(
        lambda s: [
            (c.task_a, c.task_b, c.files, c.resources)
            for c in s.scalars(
                select(Conflict).where(Conflict.change_id == change_id).order_by(Conflict.created_at, Conflict.id)
            )
        ]
    )


def test_changesets_touching_the_same_files_make_one_conflict(store: Store) -> None:
    change_id = submit(store, task("a"), task("b"), task("c"))
    ids = add_changesets(
        store, change_id, {"a": ["src/app.py", "README.md"], "b": ["src/app.py", "src/db.py"], "c": ["docs/guide.md"]}
    )

    found = store.transaction(
        lambda s: [(c.task_a, c.task_b, c.files, c.resources) for c in claims.detect_conflicts(s, change_id)]
    )

    assert found == [(ids["a"], ids["b"], ["src/app.py"], [])]
    assert conflicts(store, change_id) == found
    [event] = events(store, "change.conflict", change_id=change_id)
    assert {k: event.data[k] for k in ("task_a", "task_b", "key_a", "key_b", "files", "resources")} == {
        "task_a": ids["a"],
        "task_b": ids["b"],
        "key_a": "a",
        "key_b": "b",
        "files": ["src/app.py"],
        "resources": [],
    }

    assert len(store.transaction(claims.detect_conflicts, change_id)) == 1, "idempotent"
    assert len(conflicts(store, change_id)) == 1
    assert len(events(store, "change.conflict", change_id=change_id)) == 1


def test_changesets_touching_different_files_make_no_conflict(store: Store) -> None:
    change_id = submit(store, task("a"), task("b"))
    add_changesets(store, change_id, {"a": ["src/app.py"], "b": ["src/db.py"]})
    assert store.transaction(claims.detect_conflicts, change_id) == []
    assert conflicts(store, change_id) == []
    assert events(store, "change.conflict", change_id=change_id) == []


def test_a_task_stacked_on_another_shares_its_files_without_conflict(store: Store) -> None:
    change_id = submit(store, task("a"), task("b", "a"))
    run_a = run_of(store, change_id, "a").id
    start(store, run_a)
    say(store, run_a, 2, "finished", status="succeeded")
    add_changesets(store, change_id, {"a": ["src/app.py"], "b": ["src/app.py"]})
    assert store.transaction(claims.detect_conflicts, change_id) == []


def test_runs_that_contended_make_a_conflict_that_grows_with_changesets(store: Store) -> None:
    change_id, [run_a, run_b] = started_runs(store, "a", "b")
    acquire(store, run_a, ["table:users", "src/app.py"], T0)
    acquire(store, run_b, ["table:users"], at(1))
    tasks = store.transaction(lambda s: {t.key: t.id for t in s.scalars(select(Task))})

    assert [
        (c.task_a, c.task_b, c.files, c.resources) for c in store.transaction(claims.detect_conflicts, change_id)
    ] == [(tasks["a"], tasks["b"], [], ["table:users"])]

    add_changesets(store, change_id, {"a": ["src/app.py"], "b": ["src/app.py"]})
    store.transaction(claims.detect_conflicts, change_id)
    assert conflicts(store, change_id) == [(tasks["a"], tasks["b"], ["src/app.py"], ["table:users"])]
    assert [e.data["files"] for e in events(store, "change.conflict", change_id=change_id)] == [[], ["src/app.py"]], (
        "a second event only because the conflict grew"
    )


def test_claim_rows_keep_their_times_in_utc(store: Store) -> None:
    _, [run_id] = started_runs(store, "a")
    acquire(store, run_id, ["src/app.py"], T0)
    row = store.transaction(lambda s: s.scalars(select(Claim)).one())
    assert (aware(row.acquired_at), aware(row.renewed_at), aware(row.expires_at)) == (T0, T0, at(120))


def test_a_model_call_renews_claims_only_when_one_is_due(store: Store) -> None:
    """renew_due_until answers when the run's claims are next due, and Renewals holds a model call's
    check until then: no claim passes half-life unrenewed, and a call in between reads no claim."""
    _, [run_id] = started_runs(store, "a")
    assert store.transaction(claims.renew_due_until, run_id, T0) == at(60), "no claim: half a lease from now"
    acquire(store, run_id, ["src/app.py"], T0)
    acquire(store, run_id, ["table:users"], at(20))
    assert store.transaction(claims.renew_due_until, run_id, at(10)) == at(60)
    assert store.transaction(claims.renew_due_until, run_id, at(60)) == at(80), "app renewed; users due at 80"
    assert {c.resource: c.expires_at for c in store.transaction(claims.list_claims)} == {
        "src/app.py": at(180),
        "table:users": at(140),
    }
    assert store.transaction(claims.renew_due_until, run_id, at(80)) == at(120)

    renewals = claims.Renewals()
    assert renewals.due(run_id, T0), "never renewed here"
    renewals.renewed(run_id, at(80), at(60))
    assert not renewals.due(run_id, at(79))
    assert renewals.due(run_id, at(80))
    assert renewals.due("run_other", at(61))
    renewals.renewed("run_other", at(200), at(200))  # half a lease on: entries past due are dropped
    assert renewals.due(run_id, at(0)), "dropped: due again"
