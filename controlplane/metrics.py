"""The control plane's Prometheus metrics (`controlplane serve --metrics-listen HOST:PORT`, path /metrics).

Counters and histograms count what committed: code that changes state notes what happened on its
session (`after_commit`), and the notes are applied once the transaction commits, dropped if it rolls
back. Gauges (runs by state, agents, claims, meters) are read from the database at scrape time by
`controlplane.api.fleet_metrics`. Labels are bounded sets: event kinds, run states and reason codes,
tiers, members, meter kinds; never a run, Task or Change id.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from sqlalchemy import event as sa_event
from sqlalchemy.orm import Session

from controlplane.store import metric_hooks as store_hooks

REGISTRY = CollectorRegistry(auto_describe=True)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)

EVENTS = Counter("drover_events_total", "Events recorded, by kind.", ["kind"], registry=REGISTRY)
RUNS_FINISHED = Counter(
    "drover_runs_finished_total", "Runs that ended, by status and reason code.", ["status", "reason"], registry=REGISTRY
)
DISPATCH = Histogram(
    "drover_dispatch_latency_seconds",
    "From a run's creation (queued) to its assignment to an agent, and to its start on the agent.",
    ["stage"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
RUN_DURATION = Histogram(
    "drover_run_duration_seconds",
    "From a run's start on its agent to its end.",
    buckets=(0.5, 1, 5, 15, 60, 300, 900, 3600, 7200),
    registry=REGISTRY,
)
OUTPUT_BYTES = Counter("drover_output_bytes_total", "Run output ingested (kept), in bytes.", registry=REGISTRY)
OUTPUT_LINES = Counter("drover_output_lines_total", "Run output ingested, in log messages.", registry=REGISTRY)
MODEL_CALLS = Counter(
    "drover_model_calls_total", "Model calls settled, by tier and member.", ["tier", "member"], registry=REGISTRY
)
MODEL_SPEND = Counter(
    "drover_model_spend_usd_total",
    "Model spend settled, in USD, by tier and member.",
    ["tier", "member"],
    registry=REGISTRY,
)
OVER_RESERVATION = Counter(
    "drover_model_over_reservation_total",
    "Model calls whose usage report cost more than their reservation (settled at the reservation), by source.",
    ["source"],
    registry=REGISTRY,
)
OVER_RESERVATION_USD = Counter(
    "drover_model_over_reservation_usd_total",
    "What usage reports claimed above their reservations, in USD, never counted on a meter, by source.",
    ["source"],
    registry=REGISTRY,
)
PACKET_COMPILE = Histogram(
    "drover_packet_compile_seconds",
    "Time to compile a run's Context Packet.",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    registry=REGISTRY,
)
MEMORY_INDEX_ITEMS = Gauge(
    "drover_memory_index_items",
    "Chunks and intents in a project's semantic memory index, as of its last build by this process.",
    ["project"],
    registry=REGISTRY,
)
IMPORT_GRAPH_BUILD = Histogram(
    "drover_import_graph_build_seconds",
    "Time to build the import graph of a commit (off every run's path); its count is the graphs built.",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    registry=REGISTRY,
)
STORE_RETRIES = Counter(
    "drover_store_retries_total",
    "Transactions run again by the store, by reason: deadlock, serialization (PostgreSQL), sqlite_locked, "
    "batch_split (a group commit that kept failing, applied unit by unit), and reconnect (a pooled "
    "connection the database had dropped, found at the transaction's first statement).",
    ["reason"],
    registry=REGISTRY,
)
for _reason in ("deadlock", "serialization", "sqlite_locked", "batch_split", "reconnect"):
    STORE_RETRIES.labels(_reason)  # shown at 0 from the start
WATCH_WAKEUPS = Counter(
    "drover_watch_wakeups_total",
    "Times a WatchChange stream woke to read its Change again, by cause: event (an event of that Change "
    "committed here) or poll (its poll interval passed: other replicas' writes, a revoked token).",
    ["cause"],
    registry=REGISTRY,
)
for _cause in ("event", "poll"):
    WATCH_WAKEUPS.labels(_cause)
MEMORY_INDEX_FILES = Gauge(
    "drover_memory_index_files",
    "Files a project's semantic memory build embeds (state=total) and has embedded so far (state=done); "
    "equal when no build runs.",
    ["project", "state"],
    registry=REGISTRY,
)

_PENDING = "drover_metrics_pending"
_CODE = re.compile(r"[a-z][a-z0-9_]{0,39}")


def after_commit(s: Session, record: Callable[[], None]) -> None:
    """Run `record` once the session's transaction commits (never if it rolls back). Inside a savepoint
    it belongs to that savepoint: released, it passes to the enclosing transaction; rolled back, it is
    dropped, and what the enclosing transaction noted before stays."""
    s.info.setdefault(_PENDING, []).append((s.get_nested_transaction(), record))


# SQLAlchemy sends after_commit when a savepoint is released as well as when the transaction commits, and
# after_rollback when a savepoint rolls back; the savepoint, if any, is the session's innermost nested one.
@sa_event.listens_for(Session, "after_commit")
def _committed(s: Session) -> None:
    savepoint = s.get_nested_transaction()
    if savepoint is None:
        for _, record in s.info.pop(_PENDING, []):
            record()
        return
    enclosing = savepoint.parent if savepoint.parent is not None and savepoint.parent.nested else None
    s.info[_PENDING] = [(enclosing if owner is savepoint else owner, r) for owner, r in s.info.get(_PENDING, [])]


@sa_event.listens_for(Session, "after_rollback")
def _rolled_back(s: Session) -> None:
    savepoint = s.get_nested_transaction()
    if savepoint is None:
        s.info.pop(_PENDING, None)
        return
    s.info[_PENDING] = [(owner, r) for owner, r in s.info.get(_PENDING, []) if owner is not savepoint]


def code(text: str) -> str:
    """A reason as a bounded label: its leading code (`candidate_conflict: a.py` -> candidate_conflict)."""
    head = str(text or "").split(":", 1)[0].strip()
    return head if _CODE.fullmatch(head) else ("" if not head else "other")


def _seconds(start: dt.datetime | None, end: dt.datetime | None) -> float | None:
    if start is None or end is None:
        return None
    start, end = (t if t.tzinfo else t.replace(tzinfo=dt.UTC) for t in (start, end))
    return max(0.0, (end - start).total_seconds())


def on_event(s: Session, kind: str, data: Mapping[str, Any]) -> None:
    def record() -> None:
        EVENTS.labels(kind).inc()
        if kind == "run.finished":
            RUNS_FINISHED.labels(str(data.get("status", "")), code(str(data.get("reason", "")))).inc()

    after_commit(s, record)


def on_run(s: Session, kind: str, created: dt.datetime | None, started: dt.datetime | None, now: dt.datetime) -> None:
    """Latencies of a run's steps, from its event: assigned, started, finished."""
    spans = {
        "run.assigned": (DISPATCH.labels("queued_to_assigned"), created, now),
        "run.started": (DISPATCH.labels("queued_to_started"), created, started or now),
        "run.finished": (RUN_DURATION, started, now),
    }
    if kind not in spans:
        return
    histogram, start, end = spans[kind]
    took = _seconds(start, end)
    if took is not None:
        seconds: float = took
        after_commit(s, lambda: histogram.observe(seconds))


def on_output(s: Session, size: int) -> None:
    def record() -> None:
        OUTPUT_BYTES.inc(size)
        OUTPUT_LINES.inc()

    after_commit(s, record)


def on_settled(s: Session, tier: str, member: str, cost_micros: int) -> None:
    def record() -> None:
        MODEL_CALLS.labels(tier or "none", member or "none").inc()
        MODEL_SPEND.labels(tier or "none", member or "none").inc(cost_micros / 1e6)

    after_commit(s, record)


def on_over_reservation(s: Session, source: str, excess_micros: int) -> None:
    """A settle capped at its reservation (source: agent, the runs' calls; compact, the control plane's own)."""

    def record() -> None:
        OVER_RESERVATION.labels(source).inc()
        OVER_RESERVATION_USD.labels(source).inc(excess_micros / 1e6)

    after_commit(s, record)


def on_store_retry(reason: str) -> None:
    """A transaction rolled back by a deadlock, a serialization failure or a busy database, about to run
    again: counted at once (it committed nothing to wait for)."""
    STORE_RETRIES.labels(reason).inc()


# The store reports through hooks (it imports nothing above it); importing this module connects them.
store_hooks.metrics.on_event, store_hooks.metrics.on_run = on_event, on_run
store_hooks.metrics.on_store_retry = on_store_retry


def on_watch_wakeup(cause: str) -> None:
    """A WatchChange stream woke from its sleep (cause: event or poll)."""
    WATCH_WAKEUPS.labels(cause).inc()
