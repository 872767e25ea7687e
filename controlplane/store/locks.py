"""Row locks: one order for every transaction, and what the store does when two wait on each other anyway.

The order. A transaction takes the row locks it needs in this order, and several rows of one table
sorted by key, so no two transactions ever wait for each other in a circle:

1. agents (by name)
2. changes (by id)
3. tasks (by id)
4. runs (by id), then the claims lock (PostgreSQL advisory lock) and claims
5. model_calls (by id)
6. escrow slices (by meter key; a holder's own first, others only with SKIP LOCKED, or all of one
   meter sorted by holder when its limit changes), then meters (by key)

A run's end locks its Change before it writes the run (`finish_run`), and a sweep that ends the runs
of an agent takes them sorted by Change. A group commit of run messages (several units of work in one
transaction) takes every Change its units will lock first, all of them sorted by id (`lock_changes`),
before any unit writes a run: a unit later in the batch never locks a Change after an earlier unit
wrote a run, and two batches never take two Changes in opposite orders. A dispatch pass does the same:
it locks the queued runs it may assign (SKIP LOCKED: it never waits for a run), plans, then locks the
Changes of every run it will write, sorted, before writing the first (writing a run takes a key-share
lock on its Change, which waits for a batch's FOR UPDATE). A group commit of model calls
cannot know its meters before its units run (each unit takes its own sorted): two such batches may
still meet in opposite orders, rarely, and are then run again (below).

The retry. A deadlock or serialization failure (PostgreSQL) or "database is locked" (SQLite) rolls
the whole transaction back; the store runs it again from the start after a short random pause
(`retry_reason`, `pause`), counting each retry in `drover_store_retries_total{reason}`. A unit of work
must therefore be safe to run again: everything it does goes through its session (metrics through
`metrics.after_commit`), or is idempotent (an object stored under a fixed key).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from controlplane.store.models import Change, Run

ORDER = ("agents", "changes", "tasks", "runs", "claims", "model_calls", "meter_slices", "meters")
"""The tables in the order their rows are locked (see above)."""

SQLSTATES = {"40P01": "deadlock", "40001": "serialization"}
"""PostgreSQL: deadlock detected, serialization failure."""
SQLITE_BUSY = ("database is locked", "database table is locked")

HELD = "drover_changes_locked"
"""session.info key: the Change ids this transaction holds locked."""

PAUSE_FIRST = 0.02
PAUSE_MAX = 1.0


def lock_changes(s: Session, change_ids: Iterable[str]) -> None:
    """Lock the Changes (FOR UPDATE), sorted by id. Nothing pending in the session is written first:
    the locks come before any run row this transaction writes."""
    held = s.info.setdefault(HELD, set())
    ids = sorted({i for i in change_ids if i} - held)
    if ids:
        _lock(s, Change.id.in_(ids))
        _remember(s, held, ids)


def lock_changes_of_runs(s: Session, run_ids: Iterable[str]) -> None:
    """Lock the Changes of these runs (FOR UPDATE), sorted by id, in one statement."""
    ids = sorted(set(run_ids))
    if ids:
        found = _lock(s, Change.id.in_(select(Run.change_id).where(Run.id.in_(ids))))
        _remember(s, s.info.setdefault(HELD, set()), found)


def _lock(s: Session, where: Any) -> list[str]:
    with s.no_autoflush:
        return list(s.scalars(select(Change.id).where(where).order_by(Change.id).with_for_update()))


def _remember(s: Session, held: set[str], ids: Iterable[str]) -> None:
    """Locks taken outside a savepoint last until the transaction ends: taking them again is skipped.
    (A savepoint rolled back would release its own, so those are not remembered.)"""
    if not s.in_nested_transaction():
        held.update(ids)


def retry_reason(err: BaseException) -> str | None:
    """ "deadlock", "serialization" or "sqlite_locked" when running the transaction again can succeed;
    None for every other error."""
    orig = err.orig if isinstance(err, DBAPIError) else err
    state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if state in SQLSTATES:
        return SQLSTATES[str(state)]
    if isinstance(err, DBAPIError) and any(text in str(orig).lower() for text in SQLITE_BUSY):
        return "sqlite_locked"
    return None


def pause(attempt: int) -> float:
    """Seconds to wait before retry number `attempt` (0-based): doubling from 20 ms up to 1 s, at random
    within that bound so two victims do not meet again in step."""
    return random.uniform(PAUSE_FIRST / 2, min(PAUSE_MAX, PAUSE_FIRST * 2**attempt))
