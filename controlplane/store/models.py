"""The store's tables (SQLAlchemy 2). The database is the one source of truth."""

from __future__ import annotations

import datetime as dt
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy import false as sa_false
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from controlplane.store.admission_columns import ProjectAdmission
from controlplane.store.forge_columns import ChangeBase, DeliveryColumns, ForgeLink, IssueChangeColumns
from controlplane.store.notification_columns import NotificationCursorColumns, NotificationDeliveryColumns
from controlplane.store.quota_columns import QuotaFailureColumns
from controlplane.store.run_columns import RunOutcomeColumns

UNRECONCILED: dict[str, Any] = {f"{db}_where": text("settled AND NOT reconciled") for db in ("postgresql", "sqlite")}
"""The partial index of settled reservations their escrow slice has not counted yet."""


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        dict[str, Any]: JSON,
        list[Any]: JSON,
        dt.datetime: DateTime(timezone=True),
    }


class Token(Base):
    __tablename__ = "tokens"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(16))  # agent | user
    role: Mapped[str] = mapped_column(String(32), default="")  # submit | run.manage | admin (users)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    monthly_budget_usd: Mapped[float] = mapped_column(default=0.0)  # a user's monthly budget; 0: none
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    pool: Mapped[str] = mapped_column(String(200), default="")  # agent tokens: the pool it serves; "": default
    projects: Mapped[list[Any]] = mapped_column(default=list)  # user tokens: the projects it may use; []: all
    expires_at: Mapped[dt.datetime | None] = mapped_column(nullable=True)
    revoked_at: Mapped[dt.datetime | None] = mapped_column(nullable=True)
    last_used_at: Mapped[dt.datetime | None] = mapped_column(nullable=True)
    created_by: Mapped[str] = mapped_column(String(200), default="")  # the token that minted it; "": the host


class Project(ProjectAdmission, ForgeLink, Base):
    __tablename__ = "projects"
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    repo: Mapped[str] = mapped_column(Text, default="")
    branch: Mapped[str] = mapped_column(String(200), default="main")
    pool: Mapped[str] = mapped_column(String(200), default="")
    commands: Mapped[list[Any]] = mapped_column(default=list)  # allowlist rules; empty: the default
    network: Mapped[bool] = mapped_column(Boolean, default=False)  # may commands use the network
    git_token_file: Mapped[str] = mapped_column(Text, default="")  # where the git token is; never the token
    monthly_budget_usd: Mapped[float] = mapped_column(default=0.0)  # 0: no Project budget
    answer_window_minutes: Mapped[float] = mapped_column(default=15.0)  # held longer: parked; 0: never parked
    build_outputs: Mapped[list[Any]] = mapped_column(default=list)  # left out of ChangeSets; empty: the default
    setup: Mapped[list[Any]] = mapped_column(default=list)  # run after the clone, in order (seed 003 preparation)
    setup_network: Mapped[bool] = mapped_column(Boolean, default=True)  # setup may use the network
    env: Mapped[dict[str, Any]] = mapped_column(default=dict)  # every run's environment (no secrets)
    git_name: Mapped[str] = mapped_column(String(200), default="")  # ChangeSet commits' author; "": Drover's
    git_email: Mapped[str] = mapped_column(String(200), default="")
    branch_template: Mapped[str] = mapped_column(String(300), default="")  # "": drover/{change}/{task}
    cache_key_files: Mapped[list[Any]] = mapped_column(default=list)  # their contents key the prepared workspace
    git_credential_kind: Mapped[str] = mapped_column(String(16), default="")  # token | ssh_key; "": none
    git_credential_sealed: Mapped[str] = mapped_column(Text, default="")  # sealed (operator's key), never returned
    git_credential_fingerprint: Mapped[str] = mapped_column(String(16), default="")
    git_credential_set_at: Mapped[dt.datetime | None] = mapped_column(nullable=True)
    git_credential_set_by: Mapped[str] = mapped_column(String(200), default="")
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[dt.datetime | None] = mapped_column(nullable=True)


class Change(ChangeBase, Base):
    __tablename__ = "changes"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    project: Mapped[str] = mapped_column(ForeignKey("projects.name"))
    goal: Mapped[str] = mapped_column(Text)
    criteria: Mapped[list[Any]] = mapped_column(default=list)
    invariants: Mapped[list[Any]] = mapped_column(default=list)
    budget_usd: Mapped[float] = mapped_column(default=0.0)
    status: Mapped[str] = mapped_column(String(32), default="open")
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    submitted_by: Mapped[str] = mapped_column(String(200), default="")
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[dt.datetime | None] = mapped_column(nullable=True)
    candidate_state: Mapped[str] = mapped_column(String(16), default="")  # "", pending, composed, failed
    candidate_branch: Mapped[str] = mapped_column(String(300), default="")
    candidate_commit: Mapped[str] = mapped_column(String(64), default="")
    reason: Mapped[str] = mapped_column(Text, default="")


class Task(Base):
    __tablename__ = "tasks"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    change_id: Mapped[str] = mapped_column(ForeignKey("changes.id"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    key: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(64))
    objective: Mapped[str] = mapped_column(Text)
    depends_on: Mapped[list[Any]] = mapped_column(default=list)
    command: Mapped[list[Any]] = mapped_column(default=list)
    env: Mapped[dict[str, Any]] = mapped_column(default=dict)
    timeout_seconds: Mapped[int] = mapped_column(Integer, default=0)
    spec: Mapped[dict[str, Any]] = mapped_column(default=dict)  # routing fields kept for later issues
    status: Mapped[str] = mapped_column(String(32), default="pending")
    reason: Mapped[str] = mapped_column(Text, default="")
    attempts_reset_at: Mapped[dt.datetime | None] = mapped_column(nullable=True)  # a raised budget opens a window


class Run(RunOutcomeColumns, Base):
    __tablename__ = "runs"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    change_id: Mapped[str] = mapped_column(ForeignKey("changes.id"), index=True)
    task_id: Mapped[str] = mapped_column(ForeignKey("tasks.id"), index=True)
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    state: Mapped[str] = mapped_column(String(16), default="queued", index=True)
    agent: Mapped[str] = mapped_column(String(200), default="", index=True)
    exit_code: Mapped[int] = mapped_column(Integer, default=0)
    reason: Mapped[str] = mapped_column(Text, default="")
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    driver: Mapped[str] = mapped_column(String(16), default="command")
    parked: Mapped[dict[str, Any]] = mapped_column(default=dict)  # a parked session: id, state key, workspace
    resume_of: Mapped[str] = mapped_column(String(40), default="")  # the parked run this run resumes
    tier: Mapped[str] = mapped_column(String(16), default="")
    model: Mapped[str] = mapped_column(String(200), default="")
    member: Mapped[str] = mapped_column(String(200), default="")  # the member's route key
    not_before: Mapped[dt.datetime | None] = mapped_column(nullable=True)  # a retry or escalation waits 5 s
    context_hash: Mapped[str] = mapped_column(String(64), default="")  # the Context Packet's hash; "": none
    last_seq: Mapped[int] = mapped_column(BigInteger, default=0)
    output_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    output_truncated: Mapped[bool] = mapped_column(Boolean, default=False)
    branch: Mapped[str] = mapped_column(String(300), default="")  # where its ChangeSet is pushed
    setup_cached: Mapped[bool] = mapped_column(Boolean, default=False)  # its workspace came prepared
    setup_seconds: Mapped[float] = mapped_column(default=0.0)  # spent preparing the workspace
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    started_at: Mapped[dt.datetime | None] = mapped_column(nullable=True)
    finished_at: Mapped[dt.datetime | None] = mapped_column(nullable=True)


class RunLog(Base):
    __tablename__ = "run_logs"
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"))
    seq: Mapped[int] = mapped_column(BigInteger)
    stream: Mapped[str] = mapped_column(String(16))
    text: Mapped[str] = mapped_column(Text)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    __table_args__ = (Index("ix_run_logs_run_seq", "run_id", "seq"),)


class ToolLogEntry(Base):
    """A run's tool-stream message as it came (a JSON line or a piece of one); its tool log in seq order."""

    __tablename__ = "tool_log_entries"
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"))
    seq: Mapped[int] = mapped_column(BigInteger)
    text: Mapped[str] = mapped_column(Text)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    __table_args__ = (Index("ix_tool_log_entries_run_seq", "run_id", "seq"),)


class RunInput(Base):
    """A person's input to a running session: sent until the run's agent reports it received."""

    __tablename__ = "run_inputs"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"))
    seq: Mapped[int] = mapped_column(BigInteger)
    kind: Mapped[str] = mapped_column(String(16))
    text: Mapped[str] = mapped_column(Text, default="")
    state: Mapped[str] = mapped_column(String(16), default="sent")
    sent_by: Mapped[str] = mapped_column(String(200), default="")
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    received_at: Mapped[dt.datetime | None] = mapped_column(nullable=True)
    question_id: Mapped[str] = mapped_column(String(40), default="")
    __table_args__ = (Index("ux_run_inputs_run_seq", "run_id", "seq", unique=True),)


class Question(Base):
    """A question a session asked people; a blocking one holds the session until it is answered."""

    __tablename__ = "questions"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"))
    change_id: Mapped[str] = mapped_column(ForeignKey("changes.id"), index=True)
    task_id: Mapped[str] = mapped_column(String(40))
    key: Mapped[str] = mapped_column(String(64))
    text: Mapped[str] = mapped_column(Text)
    blocking: Mapped[bool] = mapped_column(Boolean, default=True)
    state: Mapped[str] = mapped_column(String(16), default="open")
    answer: Mapped[str] = mapped_column(Text, default="")
    answered_by: Mapped[str] = mapped_column(String(200), default="")
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    answered_at: Mapped[dt.datetime | None] = mapped_column(nullable=True)
    __table_args__ = (Index("ux_questions_run_key", "run_id", "key", unique=True),)


class Agent(Base):
    __tablename__ = "agents"
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    labels: Mapped[dict[str, Any]] = mapped_column(default=dict)
    capacity: Mapped[int] = mapped_column(Integer, default=1)
    drivers: Mapped[list[Any]] = mapped_column(default=list)
    version: Mapped[str] = mapped_column(String(64), default="")
    connected: Mapped[bool] = mapped_column(Boolean, default=False)
    draining: Mapped[bool] = mapped_column(Boolean, default=False)
    connected_at: Mapped[dt.datetime | None] = mapped_column(nullable=True)
    disconnected_at: Mapped[dt.datetime | None] = mapped_column(nullable=True)
    token_id: Mapped[int | None] = mapped_column(Integer, nullable=True)  # the token this name is bound to
    pool: Mapped[str] = mapped_column(String(200), default="")  # its token's pool, whatever its labels say
    replica: Mapped[str] = mapped_column(String(100), default="")  # the control-plane replica holding its stream
    lease_until: Mapped[dt.datetime | None] = mapped_column(nullable=True)  # renewed by it; past it: agent gone


class StoredObject(Base):
    """The object store in the database (PostgreSQL), so every replica reads what any one wrote."""

    __tablename__ = "objects"
    key: Mapped[str] = mapped_column(String(1000), primary_key=True)
    data: Mapped[bytes] = mapped_column(LargeBinary)


class Event(Base):
    __tablename__ = "events"
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(64))
    change_id: Mapped[str] = mapped_column(String(40), default="", index=True)
    task_id: Mapped[str] = mapped_column(String(40), default="")
    run_id: Mapped[str] = mapped_column(String(40), default="", index=True)
    agent: Mapped[str] = mapped_column(String(200), default="")
    data: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class ModelCall(Base):
    """One model call attempt of a run: reserved before it, settled to its exact cost after."""

    __tablename__ = "model_calls"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    key: Mapped[str] = mapped_column(String(200))  # the agent's idempotency key for the attempt
    model: Mapped[str] = mapped_column(String(200))
    purpose: Mapped[str] = mapped_column(String(16), default="agent")
    state: Mapped[str] = mapped_column(String(16), default="reserved")  # reserved | settled
    estimate_micros: Mapped[int] = mapped_column(BigInteger, default=0)
    cost_micros: Mapped[int] = mapped_column(BigInteger, default=0)
    input_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    output_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cache_write_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cache_read_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    error: Mapped[str] = mapped_column(String(64), default="")
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    settled_at: Mapped[dt.datetime | None] = mapped_column(nullable=True)
    __table_args__ = (Index("ux_model_calls_run_key", "run_id", "key", unique=True),)


class ChangeSet(Base):
    """A Task's published result (seed 000's ChangeSet table)."""

    __tablename__ = "changesets"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    change_id: Mapped[str] = mapped_column(ForeignKey("changes.id"), index=True)
    task_id: Mapped[str] = mapped_column(ForeignKey("tasks.id"), index=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), unique=True)
    branch: Mapped[str] = mapped_column(String(300))
    commit: Mapped[str] = mapped_column(String(64))
    base_commit: Mapped[str] = mapped_column(String(64))
    start_commit: Mapped[str] = mapped_column(String(64))
    stacked_on: Mapped[list[Any]] = mapped_column(default=list)
    files: Mapped[list[Any]] = mapped_column(default=list)
    own_files: Mapped[list[Any]] = mapped_column(default=list)
    patch_ref: Mapped[str] = mapped_column(Text)
    summary: Mapped[str] = mapped_column(Text, default="")
    intent: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    left_out: Mapped[list[Any]] = mapped_column(default=list)  # build outputs not committed: "dir/ (N files)"


class Meter(Base):
    """One spend or count meter for one period: provider month, daily calls, a Change, a Project, a user."""

    __tablename__ = "meters"
    key: Mapped[str] = mapped_column(String(300), primary_key=True)  # e.g. provider-usd:2026-11, change-usd:chg_x
    # provider_month | agent_calls_day | classifier_calls_day | change | project | user
    kind: Mapped[str] = mapped_column(String(32))
    period: Mapped[str] = mapped_column(String(16), default="")  # YYYY-MM, YYYY-MM-DD, or "" (a Change's life)
    unit: Mapped[str] = mapped_column(String(8), default="usd")  # usd (micro-dollars) | calls
    limit_amount: Mapped[int] = mapped_column(BigInteger, default=0)  # 0: no limit
    used: Mapped[int] = mapped_column(BigInteger, default=0)  # settled
    reserved: Mapped[int] = mapped_column(BigInteger, default=0)  # admitted, not yet settled


class MeterReservation(Base):
    """The share of one model-call reservation held on one meter until it settles."""

    __tablename__ = "meter_reservations"
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    reservation_id: Mapped[str] = mapped_column(String(40), index=True)
    meter_key: Mapped[str] = mapped_column(ForeignKey("meters.key"))
    amount: Mapped[int] = mapped_column(BigInteger)
    settled: Mapped[bool] = mapped_column(Boolean, default=False)
    holder: Mapped[str] = mapped_column(String(64), default="", server_default="")
    """The escrow slice the share was admitted into ("": held on the meter row itself)."""
    used_amount: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")  # what it settled at
    reconciled: Mapped[bool] = mapped_column(Boolean, default=False, server_default=sa_false())  # its slice counted it
    __table_args__ = (Index("ix_meter_reservations_unreconciled", "holder", "meter_key", **UNRECONCILED),)


class MeterSlice(Base):
    """One holder's escrow slice of a meter's headroom (`controlplane.store.escrow`)."""

    __tablename__ = "meter_slices"
    meter_key: Mapped[str] = mapped_column(ForeignKey("meters.key"), primary_key=True)
    holder: Mapped[str] = mapped_column(String(64), primary_key=True)  # a writer thread of one process
    granted: Mapped[int] = mapped_column(BigInteger, default=0)  # counted in the meter's reserved (bounded)
    reserved: Mapped[int] = mapped_column(BigInteger, default=0)  # admitted into the slice, not yet counted settled
    used: Mapped[int] = mapped_column(BigInteger, default=0)  # settled and counted by the slice
    unbounded: Mapped[bool] = mapped_column(Boolean, default=False)  # the meter has no limit: nothing granted
    limit_seen: Mapped[int] = mapped_column(BigInteger, default=-1)  # the meter's limit when last granted
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))


class DecisionReceipt(Base):
    """Why a run got its tier, member and agent. Holds no model reasoning."""

    __tablename__ = "decision_receipts"
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    change_id: Mapped[str] = mapped_column(String(40), index=True)
    task_id: Mapped[str] = mapped_column(String(40), index=True)
    tier: Mapped[str] = mapped_column(String(16))
    data: Mapped[dict[str, Any]] = mapped_column(default=dict)  # rule, classifier, floor, escalation, members...
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class Claim(Base):
    """An advisory lease of one run on one resource (DESIGN.md "Claims"). It never blocks anyone."""

    __tablename__ = "claims"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    resource: Mapped[str] = mapped_column(Text)  # normalised: a path, a glob, or kind:name
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    change_id: Mapped[str] = mapped_column(String(40), index=True)
    task_id: Mapped[str] = mapped_column(String(40))
    holder: Mapped[str] = mapped_column(String(200), default="")  # the agent running the run
    generation: Mapped[int] = mapped_column(Integer)  # per resource; a new one after expiry or release
    acquired_at: Mapped[dt.datetime] = mapped_column()
    renewed_at: Mapped[dt.datetime] = mapped_column()  # acquired_at until the first renewal
    expires_at: Mapped[dt.datetime] = mapped_column()
    released_at: Mapped[dt.datetime | None] = mapped_column(nullable=True)  # also set when it expired and was freed
    __table_args__ = (Index("ix_claims_resource", "resource"),)


class Conflict(Base):
    """Two Tasks of one Change that touched the same files or contended for the same resources."""

    __tablename__ = "conflicts"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    change_id: Mapped[str] = mapped_column(ForeignKey("changes.id"), index=True)
    task_a: Mapped[str] = mapped_column(String(40))  # the earlier Task of the Change
    task_b: Mapped[str] = mapped_column(String(40))
    files: Mapped[list[Any]] = mapped_column(default=list)
    resources: Mapped[list[Any]] = mapped_column(default=list)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    __table_args__ = (UniqueConstraint("change_id", "task_a", "task_b", name="uq_conflicts_change_tasks"),)


class ForgeDelivery(DeliveryColumns, Base): ...


class ForgeIssueChange(IssueChangeColumns, Base): ...


class NotificationDelivery(NotificationDeliveryColumns, Base): ...


class NotificationCursor(NotificationCursorColumns, Base): ...


class QuotaFailure(QuotaFailureColumns, Base): ...
