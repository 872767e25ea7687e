"""What the SDK returns: plain, typed Python objects, one per kind of thing the control plane shows.

The wire format (protobuf, `drover.v1`) stays at the edge: `from_proto` turns a message into the
dataclass of the same name, field by field. Times are timezone-aware `datetime`s (None when unset),
JSON payloads (`Event.data`, `DecisionReceipt.data`) are dicts whose whole numbers are `int`, and
`to_json` gives the dict the CLI prints with `--json`: every field present, proper JSON types.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from google.protobuf import json_format
from google.protobuf.message import Message
from google.protobuf.struct_pb2 import Struct
from google.protobuf.timestamp_pb2 import Timestamp

# re-exported: drover.models has every type the SDK returns
from drover.project_models import ForgeCredential as ForgeCredential
from drover.project_models import GitCredential as GitCredential
from drover.project_models import Project as Project
from drover.project_models import WebhookSecret as WebhookSecret
from drover.project_models import WebhookSecretRotated as WebhookSecretRotated


@dataclasses.dataclass(frozen=True)
class Task:
    """One node of a Change's graph, and its status."""

    id: str
    key: str
    kind: str
    objective: str
    depends_on: list[str]
    command: list[str]
    env: dict[str, str]
    timeout_seconds: int
    status: str  # pending, ready, running, succeeded, failed, blocked, cancelled
    files: list[str]
    resources: list[str]
    size: str
    complexity: str
    risk: str
    required_capabilities: list[str]
    flags: dict[str, bool]
    latest_run_id: str
    reason: str  # why the Task is blocked, failed or cancelled
    runtime: str = ""  # harness, claude-code or opencode; "" for a command Task
    workspace_files: dict[str, str] = dataclasses.field(default_factory=dict)  # a command Task's files
    workdir: str = ""  # where a command Task runs, relative to the repository


@dataclasses.dataclass(frozen=True)
class Conflict:
    """Two Tasks whose ChangeSets or claims overlap."""

    task_a: str
    task_b: str
    files: list[str]
    resources: list[str]
    created_at: dt.datetime | None


@dataclasses.dataclass(frozen=True)
class Change:
    """A goal and its graph of Tasks."""

    id: str
    project: str
    goal: str
    criteria: list[str]
    invariants: list[str]
    budget_usd: float
    tasks: list[Task]
    status: str  # open, running, succeeded, failed, cancelled, budget_blocked
    submitted_by: str
    created_at: dt.datetime | None
    finished_at: dt.datetime | None
    candidate_branch: str  # drover/<change>/candidate once every ChangeSet composed
    candidate_commit: str
    reason: str  # why the Change failed (e.g. candidate_conflict: files)
    conflicts: list[Conflict]
    notices: list[str]  # what holds its queued runs up (no agent of its pool, all draining)


@dataclasses.dataclass(frozen=True)
class Claim:
    """An advisory claim of a run on a file or resource."""

    resource: str
    run_id: str
    change_id: str
    task_id: str
    holder: str  # the agent
    generation: int
    acquired_at: dt.datetime | None
    expires_at: dt.datetime | None


@dataclasses.dataclass(frozen=True)
class RunInput:
    """A person's message or interrupt to a running session."""

    id: str
    run_id: str
    seq: int
    kind: str  # message | interrupt
    text: str
    state: str  # sent (stored by the control plane) | received (on the agent's disk)
    sent_by: str
    created_at: dt.datetime | None
    received_at: dt.datetime | None
    question_id: str = ""  # kind answer: the question it answers


@dataclasses.dataclass(frozen=True)
class Question:
    """A question a session asked people; a blocking one holds the session until it is answered."""

    id: str
    run_id: str
    change_id: str
    task_key: str
    text: str
    blocking: bool
    state: str  # open | answered
    answer: str
    answered_by: str
    created_at: dt.datetime | None
    answered_at: dt.datetime | None


@dataclasses.dataclass(frozen=True)
class ChangeSet:
    """What one Task's run committed, on its branch."""

    id: str
    change_id: str
    task_id: str
    task_key: str
    run_id: str
    branch: str
    commit: str
    base_commit: str
    start_commit: str
    stacked_on: list[str]
    files: list[str]
    own_files: list[str]
    patch_ref: str  # object-store key of the patch
    summary: str
    created_at: dt.datetime | None
    left_out: list[str] = dataclasses.field(default_factory=list)
    """Build outputs the commit left out: a path, or a directory as "dir/ (N files)"."""


@dataclasses.dataclass(frozen=True)
class Run:
    """One attempt at a Task on one agent."""

    id: str
    change_id: str
    task_id: str
    task_key: str
    state: str  # queued, assigned, running, succeeded, failed, cancelled
    agent: str
    attempt: int
    exit_code: int
    reason: str  # failure or cancel reason: exit_code, timeout, agent_lost, ...
    created_at: dt.datetime | None
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    output_bytes: int
    output_truncated: bool
    cancel_requested: bool
    project: str
    tier: str
    model: str
    context_hash: str
    outcome: str  # harness runs: completed, failed, no_outcome, run_call_cap, ...
    model_calls: int
    cost_micros: int
    driver: str
    branch: str = ""  # where the run's ChangeSet is pushed (the project's branch_template)
    setup_cached: bool = False  # the workspace came prepared from the agent's cache
    setup_seconds: float = 0.0  # spent running the project's setup commands
    last_activity_at: dt.datetime | None = None  # its last output, model or tool call, as of the last run check
    # a model-driven session's result as its agent reported it (has_result False: none); result_text is
    # Task-written: print it, never interpret it
    has_result: bool = False
    result_text: str = ""  # the session's final message, redacted, at most 4 KiB
    result_turns: int = 0
    result_cost_micros: int = 0  # the session's own count (Claude Code's); 0 when it keeps none
    result_success: bool = False
    compactions: int = 0


@dataclasses.dataclass(frozen=True)
class Agent:
    """A machine running agentd, as the control plane sees it."""

    name: str
    labels: dict[str, str]
    capacity: int
    active_runs: int
    connected: bool
    draining: bool
    drivers: list[str]
    version: str
    connected_at: dt.datetime | None
    disconnected_at: dt.datetime | None


@dataclasses.dataclass(frozen=True)
class Event:
    """One thing that happened, in order: `id` grows."""

    id: int
    kind: str  # run.queued, run.started, run.finished, task.ready, change.finished, ...
    change_id: str
    task_id: str
    run_id: str
    agent: str
    data: dict[str, Any]
    created_at: dt.datetime | None


@dataclasses.dataclass(frozen=True)
class LogLine:
    """A line a run printed (stdout, stderr), the harness's events (event) or the agent's notes (system)."""

    run_id: str
    seq: int
    stream: str
    text: str
    created_at: dt.datetime | None


@dataclasses.dataclass(frozen=True)
class DecisionReceipt:
    """Why a run got its tier and member: rule, classifier, floor, escalation, members, agent."""

    run_id: str
    task_id: str
    task_key: str
    tier: str
    data: dict[str, Any]
    created_at: dt.datetime | None


@dataclasses.dataclass(frozen=True)
class MeterUsage:
    """A spend meter: micro-dollars (unit usd) or calls, used and reserved against its limit (0: none)."""

    key: str
    kind: str
    period: str
    unit: str
    limit: int
    used: int
    reserved: int


@dataclasses.dataclass(frozen=True)
class SpendLine:
    """A Change's model spend on one tier and member."""

    tier: str
    member: str
    model: str
    calls: int
    cost_micros: int


@dataclasses.dataclass(frozen=True)
class Spend:
    """A Change's budget, what it spent, by tier and member, and the receipts of its runs."""

    change_id: str
    budget_micros: int
    spent_micros: int
    lines: list[SpendLine]
    receipts: list[DecisionReceipt]


@dataclasses.dataclass(frozen=True)
class Token:
    """A bearer token as it is listed: never the token itself."""

    id: int
    name: str
    kind: str  # user or agent
    role: str  # a user token's: submit, run.manage or admin
    pool: str  # an agent token's
    projects: list[str]  # a user token's; empty: all
    monthly_budget_usd: float
    created_at: str  # RFC 3339
    created_by: str  # the token that minted it ("": on the host)
    expires_at: str  # "": never
    last_used_at: str
    revoked_at: str


@dataclasses.dataclass(frozen=True)
class CreatedToken:
    """A token just minted: `secret` is the bearer token, shown this once."""

    token: Token
    secret: str


M = TypeVar("M")


def _whole(value: Any) -> Any:
    """JSON numbers arrive as floats through a protobuf Struct; give back the whole ones as int."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_whole(v) for v in value]
    if isinstance(value, dict):
        return {k: _whole(v) for k, v in value.items()}
    return value


def _value(raw: Any, hint: Any) -> Any:
    if isinstance(raw, Timestamp):
        return raw.ToDatetime(tzinfo=dt.UTC) if (raw.seconds or raw.nanos) else None
    if isinstance(raw, Struct):
        return _whole(json_format.MessageToDict(raw))
    origin = typing.get_origin(hint)
    if origin is list:
        (item,) = typing.get_args(hint)
        return [_value(v, item) for v in raw]
    if origin is dict:
        return dict(raw)
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return from_proto(raw, hint)
    return raw


def from_proto(message: Message, cls: type[M]) -> M:
    """The dataclass `cls` with the fields of `message` (a `drover.v1` message of the same name)."""
    hints = typing.get_type_hints(cls)
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    return cls(**{f.name: _value(getattr(message, f.name), hints[f.name]) for f in fields})


def _plain(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def to_json(obj: Any) -> dict[str, Any]:
    """A dataclass of this module as JSON-ready data: every field, numbers as numbers, times in RFC 3339."""
    plain: dict[str, Any] = _plain(dataclasses.asdict(obj))
    return plain
