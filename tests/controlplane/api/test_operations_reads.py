"""OperationsService's read-only calls read beside the writer: on SQLite they answer while another
process holds the database's write lock (`BEGIN IMMEDIATE`), where a call on the writer would wait for
it (30 s busy timeout)."""

from __future__ import annotations

import sqlite3
import time

import pytest

from drover.errors import FailedPrecondition
from tests.conftest import Fleet, python_command, task, wait_for

TRUE = python_command("pass")


def test_operations_reads_answer_while_another_process_holds_the_write_lock(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    plane.add_project("readers")
    with plane.client() as client:  # no agent: the run stays queued
        change = client.submit_change("readers", "r", [task("t", TRUE)], budget_usd=1)
        run_id = wait_for(lambda: client.get_change(change.id).tasks[0].latest_run_id, 30, what="a run")
        holder = sqlite3.connect(plane.data_dir / "drover.db", isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # a writer of another process (a backup, a CLI command) holds the lock
        try:
            started = time.monotonic()
            assert client.get_run(run_id).state == "queued"
            assert [r.id for r in client.list_runs(change_id=change.id)] == [run_id]
            assert list(client.run_logs(run_id)) == []
            assert "change.submitted" in [e.kind for e in client.list_events(change_id=change.id)]
            assert client.list_agents() == []
            assert client.list_claims(change.id) == []
            assert client.list_receipts(run_id=run_id) == []
            assert client.get_usage() == []  # no model call yet
            with pytest.raises(FailedPrecondition):
                client.get_packet(run_id)  # a command run has none: answered from the read side too
            elapsed = time.monotonic() - started
        finally:
            holder.rollback()
            holder.close()
    assert elapsed < 10, f"the reads waited {elapsed:.1f} s for the writer"
