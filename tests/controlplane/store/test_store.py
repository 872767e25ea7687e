"""The store on SQLite and PostgreSQL: migrations, and the lifecycle of Changes, Tasks and Runs."""

from __future__ import annotations

import datetime as dt
import pathlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, func, inspect, select, text
from sqlalchemy.orm import Session

from controlplane.domain.graph import ChangeSpec, TaskSpec
from controlplane.services import agent_presence, change_lifecycle, projects, run_lifecycle, tokens
from controlplane.services.run_lifecycle import RunMessage
from controlplane.store import engine as store_module
from controlplane.store.engine import Store
from controlplane.store.models import (
    Agent,
    Base,
    Change,
    Event,
    Project,
    Run,
    RunLog,
    Task,
    Token,
)
from drover.errors import InvalidArgument, NotFound
from tests.conftest import PG_ADMIN_URL

LIMIT = 1024 * 1024  # output limit for tests that do not exercise it
AGENT = "agent-1"


# --- fixtures and helpers --------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'drover.db'}"
    return request.getfixturevalue("pg_url")


@pytest.fixture
def empty_store(database_url: str) -> Iterator[Store]:
    store = Store(database_url)
    yield store
    store.close()


@pytest.fixture
def store(empty_store: Store) -> Store:
    """A migrated store with project "web"."""
    empty_store.migrate()
    empty_store.transaction(projects.add_project, "web", "https://example.invalid/web.git")
    return empty_store


def spec(*tasks: TaskSpec, project: str = "web") -> ChangeSpec:
    return ChangeSpec(project=project, goal="make it better", tasks=tasks)


def task(key: str, *depends_on: str) -> TaskSpec:
    return TaskSpec(key=key, kind="test", objective=f"do {key}", depends_on=depends_on, command=("true",))


def submit(store: Store, *tasks: TaskSpec) -> str:
    return store.transaction(change_lifecycle.submit_change, spec(*tasks), "alice")


def counts(store: Store) -> dict[str, int]:
    def count(s: Session) -> dict[str, int]:
        return {
            model.__tablename__: s.scalar(select(func.count()).select_from(model))
            for model in (Change, Task, Run, Event, RunLog)
        }

    return store.transaction(count)


def event_kinds(store: Store, **where: str) -> list[str]:
    return store.transaction(lambda s: list(s.scalars(select(Event.kind).filter_by(**where).order_by(Event.id))))


def events(store: Store, kind: str, **where: str) -> list[Event]:
    return store.transaction(lambda s: list(s.scalars(select(Event).filter_by(kind=kind, **where).order_by(Event.id))))


def tasks_by_key(store: Store, change_id: str) -> dict[str, Task]:
    return store.transaction(lambda s: {t.key: t for t in s.scalars(select(Task).filter_by(change_id=change_id))})


def runs_by_key(store: Store, change_id: str) -> dict[str, list[Run]]:
    def load(s: Session) -> dict[str, list[Run]]:
        found: dict[str, list[Run]] = {}
        for run, key in s.execute(
            select(Run, Task.key)
            .join(Task, Task.id == Run.task_id)
            .where(Run.change_id == change_id)
            .order_by(Run.created_at, Run.id)
        ):
            found.setdefault(key, []).append(run)
        return found

    return store.transaction(load)


def run_of(store: Store, change_id: str, key: str) -> Run:
    [run] = runs_by_key(store, change_id)[key]
    return run


def get(store: Store, model: type, ident: Any) -> Any:
    return store.transaction(lambda s: s.get(model, ident))


def say(store: Store, run_id: str, seq: int, kind: str, limit: int = LIMIT, agent: str = AGENT, **fields: Any) -> int:
    """The agent's message about a run; answers the seq the control plane acks."""
    return store.transaction(run_lifecycle.apply_run_message, agent, RunMessage(run_id, seq, kind, **fields), limit)


def start(store: Store, run_id: str, agent: str = AGENT) -> None:
    assert store.transaction(run_lifecycle.assign, run_id, agent) is not None
    assert say(store, run_id, 1, "started", agent=agent) == 1


def logs(store: Store, run_id: str) -> list[tuple[int, str, str]]:
    return store.transaction(
        lambda s: [
            (r.seq, r.stream, r.text)
            for r in s.scalars(select(RunLog).filter_by(run_id=run_id).order_by(RunLog.seq, RunLog.id))
        ]
    )


def connect(store: Store, name: str, listed: set[str]) -> agent_presence.HelloResult:
    return store.transaction(agent_presence.agent_connected, name, {}, 4, ["command"], "test", listed, False)


# --- migrations ------------------------------------------------------------------------------------


def schema_diff(store: Store) -> list[Any]:
    with store.engine.connect() as conn:
        return compare_metadata(MigrationContext.configure(conn), Base.metadata)


def versions(store: Store) -> list[str]:
    with store.engine.connect() as conn:
        return [row[0] for row in conn.execute(text("SELECT version_num FROM alembic_version"))]


def test_migrating_an_empty_database_creates_the_schema_of_the_models(empty_store: Store) -> None:
    assert inspect(empty_store.engine).get_table_names() == []
    empty_store.migrate()
    tables = set(inspect(empty_store.engine).get_table_names())
    assert tables == set(Base.metadata.tables) | {"alembic_version"}
    assert schema_diff(empty_store) == []
    assert versions(empty_store) == [ScriptDirectory(str(store_module.MIGRATIONS)).get_current_head()]


def test_migrating_twice_changes_nothing(empty_store: Store) -> None:
    empty_store.migrate()
    empty_store.transaction(projects.add_project, "web", "repo")
    before = versions(empty_store)
    empty_store.migrate()
    assert versions(empty_store) == before
    assert schema_diff(empty_store) == []
    assert get(empty_store, Project, "web").repo == "repo", "data survives a second migrate"


def test_the_head_read_from_file_names_is_alembics_head() -> None:
    """`migrate` leaves a database at `head_revision()` to itself without importing alembic: every
    migration file must be named for its revision, or a new one would not be applied."""
    scripts = ScriptDirectory(str(store_module.MIGRATIONS))
    for script in scripts.walk_revisions():
        assert pathlib.Path(script.path).name.startswith(f"{script.revision}_"), script.path
    assert store_module.head_revision() == scripts.get_current_head()


def test_a_database_behind_the_head_is_migrated(empty_store: Store) -> None:
    empty_store.migrate()
    config = Config()
    config.set_main_option("script_location", str(store_module.MIGRATIONS))
    with empty_store.engine.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, "-1")
    behind = store_module.revision(empty_store.engine)
    assert behind and behind != store_module.head_revision()
    assert schema_diff(empty_store) != []
    empty_store.migrate()
    assert versions(empty_store) == [store_module.head_revision()]
    assert schema_diff(empty_store) == []


# --- submitting ------------------------------------------------------------------------------------


def test_submit_makes_tasks_without_dependencies_ready_with_queued_runs(store: Store) -> None:
    change_id = submit(store, task("a"), task("b", "a"), task("c"))

    change = get(store, Change, change_id)
    assert (change.project, change.status, change.submitted_by) == ("web", "open", "alice")
    tasks = tasks_by_key(store, change_id)
    assert {key: t.status for key, t in tasks.items()} == {"a": "ready", "b": "pending", "c": "ready"}
    runs = runs_by_key(store, change_id)
    assert {key: [(r.state, r.attempt) for r in rs] for key, rs in runs.items()} == {
        "a": [("queued", 1)],
        "c": [("queued", 1)],
    }
    assert event_kinds(store, change_id=change_id) == [
        "change.submitted",
        "task.ready",
        "run.queued",
        "task.ready",
        "run.queued",
    ]
    [queued_a] = events(store, "run.queued", run_id=runs["a"][0].id)
    assert (queued_a.task_id, queued_a.data["key"]) == (tasks["a"].id, "a")


def test_submit_to_an_unknown_project_stores_nothing(store: Store) -> None:
    before = counts(store)
    with pytest.raises(NotFound) as caught:
        store.transaction(change_lifecycle.submit_change, spec(task("a"), project="nope"), "alice")
    assert caught.value.field == "project"
    assert counts(store) == before


def test_an_invalid_graph_stores_nothing(store: Store) -> None:
    before = counts(store)
    with pytest.raises(InvalidArgument) as caught:
        submit(store, task("a", "b"), task("b", "a"))
    assert caught.value.field == "tasks[0].depends_on"
    assert counts(store) == before


# --- runs ------------------------------------------------------------------------------------------


def test_a_run_moves_from_queued_to_succeeded_and_its_dependents_become_ready(store: Store) -> None:
    change_id = submit(store, task("a"), task("b", "a"))
    run_id = run_of(store, change_id, "a").id

    assert store.transaction(run_lifecycle.assign, run_id, AGENT) is not None
    assert (get(store, Run, run_id).state, get(store, Run, run_id).agent) == ("starting", AGENT)
    assert store.transaction(run_lifecycle.assign, run_id, "agent-2") is None, "assigned only once"

    assert say(store, run_id, 1, "started") == 1
    assert get(store, Run, run_id).state == "running"
    assert tasks_by_key(store, change_id)["a"].status == "running"
    assert get(store, Change, change_id).status == "running"

    assert say(store, run_id, 2, "log", stream="stdout", text="hello\n") == 2
    assert say(store, run_id, 3, "finished", status="succeeded") == 3
    run = get(store, Run, run_id)
    assert (run.state, run.exit_code, run.last_seq, run.output_bytes) == ("succeeded", 0, 3, 6)
    assert run.finished_at is not None
    assert logs(store, run_id) == [(2, "stdout", "hello\n")]

    tasks = tasks_by_key(store, change_id)
    assert (tasks["a"].status, tasks["b"].status) == ("succeeded", "ready")
    assert [r.state for r in runs_by_key(store, change_id)["b"]] == ["queued"]
    assert event_kinds(store, run_id=run_id) == ["run.queued", "run.assigned", "run.started", "run.finished"]


def test_a_duplicate_seq_is_applied_once(store: Store) -> None:
    change_id = submit(store, task("a"))
    run_id = run_of(store, change_id, "a").id
    start(store, run_id)
    assert say(store, run_id, 2, "log", stream="stdout", text="once\n") == 2
    assert say(store, run_id, 2, "log", stream="stdout", text="once\n") == 2, "resent after a reconnect"
    assert say(store, run_id, 1, "started") == 2
    assert logs(store, run_id) == [(2, "stdout", "once\n")]
    assert event_kinds(store, run_id=run_id).count("run.started") == 1


def test_a_seq_after_a_gap_waits_for_the_missing_one(store: Store) -> None:
    change_id = submit(store, task("a"))
    run_id = run_of(store, change_id, "a").id
    start(store, run_id)
    assert say(store, run_id, 3, "finished", status="succeeded") == 1, "seq 2 is missing"
    assert (get(store, Run, run_id).state, get(store, Run, run_id).last_seq) == ("running", 1)
    assert say(store, run_id, 2, "log", stream="stderr", text="late\n") == 2
    assert say(store, run_id, 3, "finished", status="succeeded") == 3
    assert get(store, Run, run_id).state == "succeeded"
    assert logs(store, run_id) == [(2, "stderr", "late\n")]


def test_a_message_from_another_agent_is_not_applied(store: Store) -> None:
    change_id = submit(store, task("a"))
    run_id = run_of(store, change_id, "a").id
    start(store, run_id)
    assert say(store, run_id, 2, "finished", agent="intruder", status="failed") == 2, "acked so it forgets"
    assert (get(store, Run, run_id).state, get(store, Run, run_id).last_seq) == ("running", 1)


def test_output_beyond_the_limit_is_cut_with_one_system_line(store: Store) -> None:
    change_id = submit(store, task("a"))
    run_id = run_of(store, change_id, "a").id
    start(store, run_id)
    say(store, run_id, 2, "log", limit=10, stream="stdout", text="12345678")
    say(store, run_id, 3, "log", limit=10, stream="stdout", text="abcdef")
    say(store, run_id, 4, "log", limit=10, stream="stderr", text="dropped\n")
    assert say(store, run_id, 5, "finished", limit=10, status="succeeded") == 5

    dropped = run_lifecycle.DROPPED_LINE.format(limit=10)
    assert logs(store, run_id) == [(2, "stdout", "12345678"), (3, "stdout", "ab"), (3, "system", dropped)]
    run = get(store, Run, run_id)
    assert (run.output_truncated, run.output_bytes, run.state) == (True, 10, "succeeded")
    assert [e.data["limit"] for e in events(store, "run.output_truncated", run_id=run_id)] == [10]


def test_a_failed_run_blocks_its_dependents(store: Store) -> None:
    change_id = submit(store, task("a"), task("b", "a"), task("c", "b"), task("d"))
    run_id = run_of(store, change_id, "a").id
    start(store, run_id)
    say(store, run_id, 2, "finished", status="failed", exit_code=3)

    run = get(store, Run, run_id)
    assert (run.state, run.exit_code) == ("failed", 3)
    statuses = {key: (t.status, t.reason) for key, t in tasks_by_key(store, change_id).items()}
    assert statuses == {
        "a": ("failed", "failed"),
        "b": ("blocked", "dependency a failed"),
        "c": ("blocked", "dependency a failed"),
        "d": ("ready", ""),
    }
    blocked = events(store, "task.blocked", change_id=change_id)
    assert sorted((e.data["key"], e.data["because"]) for e in blocked) == [("b", "a"), ("c", "a")]
    assert set(runs_by_key(store, change_id)) == {"a", "d"}, "blocked tasks get no run"
    assert get(store, Change, change_id).status == "running", "d can still run"

    d_run = run_of(store, change_id, "d").id
    start(store, d_run)
    say(store, d_run, 2, "finished", status="succeeded")
    change = get(store, Change, change_id)
    assert (change.status, change.finished_at is not None) == ("failed", True)
    [finished] = events(store, "change.finished", change_id=change_id)
    assert finished.data == {"status": "failed", "tasks": {"failed": 1, "blocked": 2, "succeeded": 1}}


def test_cancelling_a_change_with_a_queued_run_finishes_it_as_cancelled(store: Store) -> None:
    change_id = submit(store, task("a"), task("b", "a"))
    run_id = run_of(store, change_id, "a").id

    told = store.transaction(change_lifecycle.cancel_change, change_id)
    assert told == [], "no agent holds a queued run"
    run = get(store, Run, run_id)
    assert (run.state, run.reason) == ("cancelled", "cancelled")
    assert {key: t.status for key, t in tasks_by_key(store, change_id).items()} == {"a": "cancelled", "b": "cancelled"}
    change = get(store, Change, change_id)
    assert (change.status, change.cancel_requested, change.finished_at is not None) == ("cancelled", True, True)
    [finished] = events(store, "change.finished", change_id=change_id)
    assert finished.data["status"] == "cancelled"
    assert event_kinds(store, change_id=change_id)[-1] == "change.finished"
    assert store.transaction(change_lifecycle.cancel_change, change_id) == [], "a second cancel changes nothing"
    assert len(events(store, "change.finished", change_id=change_id)) == 1


def test_a_cancelled_change_ends_with_its_last_running_run(store: Store) -> None:
    change_id = submit(store, task("a"))
    run_id = run_of(store, change_id, "a").id
    start(store, run_id)

    told = store.transaction(change_lifecycle.cancel_change, change_id)
    assert [r.id for r in told] == [run_id], "the agent must be told to stop"
    assert get(store, Run, run_id).cancel_requested is True
    assert get(store, Change, change_id).status == "running", "still winding down"
    assert events(store, "change.finished", change_id=change_id) == []

    say(store, run_id, 2, "finished", status="cancelled", exit_code=-15)
    assert get(store, Run, run_id).state == "cancelled"
    assert get(store, Change, change_id).status == "cancelled"
    assert [e.data["status"] for e in events(store, "change.finished", change_id=change_id)] == ["cancelled"]


# --- agents ----------------------------------------------------------------------------------------


def test_a_reconnecting_agent_gets_back_only_the_runs_it_lists(store: Store) -> None:
    change_id = submit(store, task("never_received"), task("lost"), task("kept"))
    never = run_of(store, change_id, "never_received").id
    lost = run_of(store, change_id, "lost").id
    kept = run_of(store, change_id, "kept").id
    connect(store, AGENT, set())
    assert store.transaction(run_lifecycle.assign, never, AGENT) is not None  # sent, never acknowledged
    start(store, lost)
    start(store, kept)
    say(store, kept, 2, "log", stream="stdout", text="x\n")

    result = connect(store, AGENT, {kept, "run_unknown"})

    assert result.applied == {kept: 2, "run_unknown": agent_presence.FORGET}
    assert result.to_cancel == ["run_unknown"]
    requeued = get(store, Run, never)
    assert (requeued.state, requeued.agent) == ("queued", "")
    [event] = events(store, "run.requeued", run_id=never)
    assert (event.data["reason"], event.data["previous_agent"]) == ("assignment_not_received", AGENT)
    failed = get(store, Run, lost)
    assert (failed.state, failed.reason, failed.exit_code) == ("failed", "agent_restarted", -1)
    assert tasks_by_key(store, change_id)["lost"].status == "failed"
    assert get(store, Run, kept).state == "running"


def test_runs_of_an_agent_disconnected_too_long_fail_as_agent_lost(store: Store) -> None:
    change_id = submit(store, task("gone"), task("here"))
    gone = run_of(store, change_id, "gone").id
    here = run_of(store, change_id, "here").id
    for name, run_id in ((AGENT, gone), ("agent-2", here)):
        connect(store, name, set())
        start(store, run_id, agent=name)
    store.transaction(agent_presence.agent_disconnected, AGENT)
    assert get(store, Agent, AGENT).connected is False

    assert store.transaction(agent_presence.fail_lost_runs, dt.timedelta(hours=1)) == [], "not lost yet"
    assert get(store, Run, gone).state == "running"
    time.sleep(0.01)
    assert store.transaction(agent_presence.fail_lost_runs, dt.timedelta(milliseconds=1)) == [gone]

    run = get(store, Run, gone)
    assert (run.state, run.reason, run.exit_code) == ("failed", "agent_lost", -1)
    assert get(store, Run, here).state == "running", "a connected agent's run goes on"
    assert store.transaction(agent_presence.fail_lost_runs, dt.timedelta(milliseconds=1)) == []


# --- tokens ----------------------------------------------------------------------------------------


def test_tokens_are_stored_only_as_hashes(store: Store) -> None:
    user_token = store.transaction(tokens.create_token, "user", "alice", "run.manage")
    agent_token = store.transaction(tokens.create_token, "agent", "fleet")

    assert store.transaction(tokens.lookup, tokens.hash_token(user_token)) == tokens.Principal(
        "alice", "user", "run.manage", 1
    )
    assert store.transaction(tokens.lookup, tokens.hash_token(agent_token)) == tokens.Principal("fleet", "agent", "", 2)
    assert store.transaction(tokens.lookup, tokens.hash_token(user_token + "x")) is None
    assert store.transaction(tokens.lookup, user_token) is None, "the token itself is not a key"

    rows = store.transaction(lambda s: list(s.scalars(select(Token).order_by(Token.id))))
    assert [r.token_hash for r in rows] == [tokens.hash_token(user_token), tokens.hash_token(agent_token)]
    for row in rows:
        stored = [str(getattr(row, column.key)) for column in Token.__table__.columns]
        assert not any(user_token in value or agent_token in value for value in stored)


def _drop_connections(pg_url: str) -> int:
    """Have the server terminate every connection to the database (as a restart would)."""
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        dropped = conn.execute(
            text("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = :d"),
            {"d": pg_url.rsplit("/", 1)[1]},
        ).scalar()
    admin.dispose()
    return int(dropped or 0)


def test_a_dropped_postgresql_connection_is_replaced_and_the_transaction_applied_once(pg_url: str) -> None:
    # The pool does not ping before each use: a connection the server dropped (a restart, an idle
    # timeout) fails at its transaction's first statement, and the store runs the transaction again on a
    # fresh connection. Here every connection of the store's pool is terminated by the server.
    store = Store(pg_url)
    store.migrate()
    try:
        store.transaction(lambda s: projects.add_project(s, "before", ""))
        assert store.read_now(lambda s: s.scalar(select(func.count()).select_from(Project))) == 1
        assert _drop_connections(pg_url) >= 1
        store.transaction(lambda s: projects.add_project(s, "after", ""))
        assert _drop_connections(pg_url) >= 1
        names = store.read_now(lambda s: sorted(s.scalars(select(Project.name))))  # a read, too
        assert names == ["after", "before"]  # written once, on a fresh connection
    finally:
        store.close()
