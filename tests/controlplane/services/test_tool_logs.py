"""A run's tool log on a real store (SQLite with the object directory, PostgreSQL with its objects table):
each tool message is stored once, so a long run costs what it sent; the document is written when the
run ends, however it ends (a lost run's too, with what came after), and survives a restart mid-run."""

from __future__ import annotations

import datetime as dt
import json
import pathlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import func, select

from controlplane.domain.graph import ChangeSpec, TaskSpec
from controlplane.services import agent_presence, change_lifecycle, projects, run_lifecycle, tool_logs
from controlplane.services.run_lifecycle import RunMessage
from controlplane.store.engine import Store
from controlplane.store.models import Change, Run, ToolLogEntry
from controlplane.store.objects import DatabaseStore, DirectoryStore, ObjectStore, tool_log_key

AGENT = "toollog-agent"


class CountedObjects:
    """The real object store, counting what is written to it."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner, self.puts, self.bytes = inner, 0, 0

    def put(self, key: str, data: bytes) -> None:
        self.puts, self.bytes = self.puts + 1, self.bytes + len(data)
        self.inner.put(key, data)

    def get(self, key: str) -> bytes:
        return self.inner.get(key)

    def exists(self, key: str) -> bool:
        return self.inner.exists(key)


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> str:
    return f"sqlite:///{tmp_path / 'drover.db'}" if request.param == "sqlite" else request.getfixturevalue("pg_url")


def open_store(url: str, tmp_path: pathlib.Path) -> tuple[Store, CountedObjects]:
    store = Store(url)
    store.migrate()
    inner = DirectoryStore(tmp_path / "objects") if url.startswith("sqlite") else DatabaseStore(store.engine)
    return store, CountedObjects(inner)


@pytest.fixture
def plane(url: str, tmp_path: pathlib.Path) -> Iterator[tuple[Store, CountedObjects]]:
    store, objects = open_store(url, tmp_path)
    store.transaction(projects.add_project, "tools", "https://example.invalid/tools.git")
    yield store, objects
    store.close()


def start_run(store: Store) -> str:
    task = TaskSpec(key="fix", kind="code", objective="fix it")
    change_id = store.transaction(change_lifecycle.submit_change, ChangeSpec("tools", "fix", (task,)), "alice")
    run_id = store.transaction(lambda s: s.scalar(select(Run.id).where(Run.change_id == change_id)))
    store.transaction(agent_presence.agent_connected, AGENT, {}, 4, ["harness"], "test", set(), False)
    assert store.transaction(run_lifecycle.assign, run_id, AGENT) is not None
    say(store, objects=None, run_id=run_id, seq=1, kind="started")
    return str(run_id)


def say(store: Store, objects: ObjectStore | None, run_id: str, seq: int, kind: str, **fields: Any) -> int:
    message = RunMessage(run_id, seq, kind, **fields)
    return store.transaction(run_lifecycle.apply_run_message, AGENT, message, 1 << 20, objects)


def call(i: int, output: str = "") -> str:
    record = {"id": f"toolu_{i}", "tool": "read_file", "input": {"path": f"f{i}.py"}, "output": output or f"x = {i}"}
    return json.dumps(record) + "\n"


def document(store: Store, objects: ObjectStore, run_id: str) -> dict[str, Any] | None:
    run = store.transaction(lambda s: s.get(Run, run_id))
    change = store.transaction(lambda s: s.get(Change, run.change_id))
    key = tool_log_key(change.project, change.id, run.task_id, run.id)
    return json.loads(objects.get(key)) if objects.exists(key) else None


def kept(store: Store, run_id: str) -> tuple[int, int]:
    """Rows and text bytes of the run's tool-log entries."""
    rows, size = store.transaction(
        lambda s: s.execute(
            select(func.count(), func.coalesce(func.sum(func.length(ToolLogEntry.text)), 0)).where(
                ToolLogEntry.run_id == run_id
            )
        ).one()
    )
    return int(rows), int(size)


def test_a_long_runs_tool_messages_are_each_stored_once_and_the_document_written_at_its_end(
    plane: tuple[Store, CountedObjects],
) -> None:
    store, objects = plane
    run_id = start_run(store)
    messages = [call(i) for i in range(300)]
    big = call(300, output="y" * 30_000)  # a long record arrives in three pieces
    messages += [big[:10_000], big[10_000:20_000], big[20_000:]]
    for seq, text in enumerate(messages, start=2):
        say(store, objects, run_id, seq, "log", stream="tool", text=text)

    # O(N): one row per message holding just its text, and nothing rewritten while the run goes on
    # (before, every message rewrote the whole document: 303 writes of up to 60 kB each).
    assert kept(store, run_id) == (len(messages), sum(len(m) for m in messages))
    assert (objects.puts, objects.bytes) == (0, 0)
    readable = store.transaction(lambda s: tool_logs.read(s, objects, s.get(Run, run_id)))
    assert readable is not None and len(readable["calls"]) == 301, "readable from the entries mid-run"

    say(store, objects, run_id, len(messages) + 2, "finished", status="succeeded")
    written = document(store, objects, run_id)
    assert objects.puts == 1 and objects.bytes == len(json.dumps(written, ensure_ascii=False, indent=1).encode())
    assert written == readable
    assert written is not None and list(written) == ["run_id", "calls", "pending"]
    assert [c["id"] for c in written["calls"]] == [f"toolu_{i}" for i in range(301)]
    assert written["calls"][300]["output"] == "y" * 30_000 and written["pending"] == {}


def test_a_record_replaced_by_its_id_and_an_unfinished_line_are_kept_as_before(
    plane: tuple[Store, CountedObjects],
) -> None:
    store, objects = plane
    run_id = start_run(store)
    say(store, objects, run_id, 2, "log", stream="tool", text=call(1) + call(2, "first") + "not json\n")
    say(store, objects, run_id, 3, "log", stream="tool", text=call(2, "second") + call(3)[:12])
    say(store, objects, run_id, 4, "finished", status="failed", exit_code=1, reason="timeout")

    written = document(store, objects, run_id)
    assert written is not None
    assert [(c["id"], c["output"]) for c in written["calls"]] == [("toolu_1", "x = 1"), ("toolu_2", "second")]
    assert written["pending"] == {"3": call(3)[:12]}


def test_the_tool_log_of_a_run_ended_as_lost_is_complete_and_takes_what_came_after(
    plane: tuple[Store, CountedObjects],
) -> None:
    store, objects = plane
    run_id = start_run(store)
    for seq in range(2, 7):
        say(store, objects, run_id, seq, "log", stream="tool", text=call(seq))
    store.transaction(agent_presence.agent_disconnected, AGENT)
    time.sleep(0.01)
    lost = store.transaction(agent_presence.fail_lost_runs, dt.timedelta(milliseconds=1), None, None, None, objects)
    assert lost == [run_id]

    written = document(store, objects, run_id)
    assert written is not None and [c["id"] for c in written["calls"]] == [f"toolu_{i}" for i in range(2, 7)]

    # The agent comes back with the rest of the run: its later tool calls, then its result.
    hello = store.transaction(
        agent_presence.agent_connected,
        AGENT,
        {},
        4,
        ["harness"],
        "test",
        {run_id},
        False,
        0,
        "",
        None,
        "",
        dt.timedelta(seconds=30),
        objects,
    )
    assert hello.applied == {run_id: 6}
    say(store, objects, run_id, 7, "log", stream="tool", text=call(7))
    say(store, objects, run_id, 8, "finished", status="succeeded")
    written = document(store, objects, run_id)
    assert written is not None and [c["id"] for c in written["calls"]] == [f"toolu_{i}" for i in range(2, 8)]
    assert objects.puts == 2


def test_the_tool_log_of_a_run_whose_agent_came_back_without_it_is_written(
    plane: tuple[Store, CountedObjects],
) -> None:
    store, objects = plane
    run_id = start_run(store)
    say(store, objects, run_id, 2, "log", stream="tool", text=call(1))
    store.transaction(
        agent_presence.agent_connected,
        AGENT,
        {},
        4,
        ["harness"],
        "test",
        set(),
        False,
        0,
        "",
        None,
        "",
        dt.timedelta(seconds=30),
        objects,
    )
    assert store.transaction(lambda s: s.get(Run, run_id)).reason == "agent_restarted"
    written = document(store, objects, run_id)
    assert written is not None and [c["id"] for c in written["calls"]] == ["toolu_1"]


def test_the_tool_log_survives_a_restart_of_the_control_plane_mid_run(url: str, tmp_path: pathlib.Path) -> None:
    store, objects = open_store(url, tmp_path)
    store.transaction(projects.add_project, "tools", "https://example.invalid/tools.git")
    run_id = start_run(store)
    big = call(3, output="z" * 9_000)
    say(store, objects, run_id, 2, "log", stream="tool", text=call(1) + call(2))
    say(store, objects, run_id, 3, "log", stream="tool", text=big[:4_000])  # a record cut by the restart
    store.close()

    store, objects = open_store(url, tmp_path)  # a new process on the same database and objects
    try:
        say(store, objects, run_id, 4, "log", stream="tool", text=big[4_000:])
        say(store, objects, run_id, 5, "finished", status="succeeded")
        written = document(store, objects, run_id)
    finally:
        store.close()
    assert written is not None and [c["id"] for c in written["calls"]] == ["toolu_1", "toolu_2", "toolu_3"]
    assert written["calls"][2]["output"] == "z" * 9_000 and written["pending"] == {}


def test_a_run_that_recorded_no_tool_call_has_no_document(plane: tuple[Store, CountedObjects]) -> None:
    store, objects = plane
    run_id = start_run(store)
    say(store, objects, run_id, 2, "log", stream="stdout", text="hello\n")
    say(store, objects, run_id, 3, "finished", status="succeeded")
    assert document(store, objects, run_id) is None and objects.puts == 0


def test_a_run_upgraded_mid_run_keeps_the_calls_of_its_earlier_document(plane: tuple[Store, CountedObjects]) -> None:
    """A run in flight across the upgrade to entries: its calls so far are in the document the
    version before wrote on every message, the rest in entries."""
    store, objects = plane
    run_id = start_run(store)
    run = store.transaction(lambda s: s.get(Run, run_id))
    key = tool_log_key("tools", run.change_id, run.task_id, run_id)
    piece = call(2)
    before = {"run_id": run_id, "calls": [json.loads(call(1))], "pending": {"2": piece[:10]}}
    objects.put(key, json.dumps(before, indent=1).encode())
    store.transaction(lambda s: setattr(s.get(Run, run_id), "last_seq", 2))  # seq 2 applied before
    say(store, objects, run_id, 3, "log", stream="tool", text=piece[10:] + call(3))
    say(store, objects, run_id, 4, "finished", status="succeeded")
    written = document(store, objects, run_id)
    assert written is not None and [c["id"] for c in written["calls"]] == ["toolu_1", "toolu_2", "toolu_3"]
    assert written["pending"] == {}
