"""One validation layer at the edge: every request message, of every service, is checked against one table of rules
before any servicer sees it (DESIGN.md "Security": names, sizes, NUL, finite numbers, normalised paths). A refusal
is INVALID_ARGUMENT naming the field (`tasks[1].env["A=B"]: ...`), and nothing has been read or written yet.

`RULES` holds what is particular to a field, keyed by the field's full protobuf name; every other
field gets the default of its type: strings at most 4,096 characters, lists and maps at most 1,000
entries, integers not negative, doubles finite, and no NUL in any string or map key. The walk is
generic over descriptors, so a field added to the proto is bounded before anyone writes a rule for it.
`check` is pure: it reads the message and answers nothing or raises.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from controlplane.domain import graph, resources
from controlplane.domain.names import (
    AGENT_NAME,
    BRANCH,
    CAPABILITY,
    COMMIT,
    ENV_NAME,
    EVENT_KIND,
    ID,
    KIND,
    LABEL_KEY,
    MODEL,
    NAME,
    TASK_KEY,
)
from drover.errors import DroverError, InvalidArgument

KiB, MiB = 1024, 1024 * 1024
DEFAULT_STRING = 4096
DEFAULT_ITEMS = 1000
MAX_CHANGE_BYTES = 1 * MiB
"""A whole SubmitChange request, serialized: at most this (a page of Changes must fit one answer)."""
MAX_TIMEOUT_SECONDS = 7 * 24 * 3600


RUN_STATES = ("", "queued", "starting", "running", "succeeded", "failed", "cancelled")
CHANGE_STATUSES = ("", "open", "running", "succeeded", "failed", "cancelled", "budget_blocked")
SIZES = ("", "small", "medium", "large")
LEVELS = ("", "low", "medium", "high")
FLAGS = frozenset({"destructive_migration", "billing", "authorization", "authorization_trivial", "design_conflict"})
STREAMS = ("stdout", "stderr", "system", "event", "tool")
PURPOSES = ("", "agent", "fold")


@dataclasses.dataclass(frozen=True)
class Limits:
    """What the operator configures."""

    max_budget_usd: float = 10_000.0
    """The highest budget a Change may have (SubmitChange, RaiseBudget)."""


@dataclasses.dataclass(frozen=True)
class Rule:
    """What one field may hold. For a list or a map the item rules apply to each entry."""

    max_len: int = DEFAULT_STRING
    """Characters of a string (each item of a list of strings, each value of a map)."""
    pattern: re.Pattern[str] | None = None
    """A string (each item, each value) must match whole; an empty string is checked too unless optional."""
    optional: bool = True
    """An empty string is allowed (a filter left out)."""
    choices: tuple[str, ...] = ()
    max_items: int = DEFAULT_ITEMS
    key_pattern: re.Pattern[str] | None = None
    """For a map: every key must match whole."""
    key_choices: frozenset[str] = frozenset()
    minimum: float = 0
    maximum: float | None = None
    """Numbers: inclusive bounds. A double also has to be finite."""
    limit: Callable[[Limits], float] | None = None
    """A maximum the operator configures."""
    clamp: bool = False
    """A number over the maximum is taken as the maximum (page sizes, as AIP-158 says), not refused."""
    item: Callable[[str], str] | None = None
    """A check of each string that answers a normalised value or raises DroverError (files, resources)."""
    json_object: bool = False
    explain: str = ""
    """What the pattern means, for the message."""


def _page(maximum: int) -> Rule:
    return Rule(maximum=maximum, clamp=True)


TOKEN = Rule(max_len=512)
KEY = Rule(
    pattern=TASK_KEY,
    optional=False,
    explain="a Task key: lower-case letters, digits, '.', '_', '-', starting with a letter or digit, at most 64",
)
ID_RULE = Rule(pattern=ID, max_len=64, explain="an id: letters, digits, '_', '.', '-', at most 64")
"""An optional id: a filter left out."""
ID_REQUIRED = dataclasses.replace(ID_RULE, optional=False)

PROJECT_NAME = Rule(pattern=NAME, optional=False, explain="a project name")
PROJECT_NAMES = ["Project.name", "GetProjectRequest.name", "DeleteProjectRequest.name", "CreateTokenRequest.projects"]
PROJECT_NAMES += [f"{m}Request.project" for m in ("SubmitChange", "RotateWebhookSecret", "SetGitCredential")]
PROJECT_NAMES += [f"{m}Request.project" for m in ("DeleteGitCredential", "SetForgeCredential", "DeleteForgeCredential")]
CHANGE_IDS = [f"{m}Request.change_id" for m in ("GetChange", "WatchChange", "CancelChange", "ListChangeSets")]
CHANGE_IDS += [f"{m}Request.change_id" for m in ("RaiseBudget", "GetSpend", "AmendChange")]
RULES: dict[str, Rule] = {
    **{f"drover.v1.{field}": PROJECT_NAME for field in PROJECT_NAMES},
    **{f"drover.v1.{field}": ID_REQUIRED for field in CHANGE_IDS},
    # --- ProjectService, TokenService (a project's forge link: controlplane/domain/forge.py) -----------
    "drover.v1.Project.pool": Rule(pattern=NAME, explain="a pool name"),
    "drover.v1.Project.monthly_budget_usd": Rule(maximum=1e9),
    "drover.v1.Project.answer_window_minutes": Rule(maximum=7 * 24 * 60),
    "drover.v1.Project.setup": Rule(max_len=8 * KiB, max_items=50),
    "drover.v1.Project.env": Rule(max_len=32 * KiB, max_items=200, key_pattern=ENV_NAME, explain="a variable name"),
    "drover.v1.ListProjectsRequest.page_size": _page(1000),
    "drover.v1.ListProjectsRequest.page_token": TOKEN,
    "drover.v1.SetGitCredentialRequest.kind": Rule(choices=("token", "ssh_key"), optional=False),
    "drover.v1.SetGitCredentialRequest.secret": Rule(max_len=16 * KiB, optional=False),
    "drover.v1.SetForgeCredentialRequest.kind": Rule(choices=("token", "app"), optional=False),
    "drover.v1.SetForgeCredentialRequest.secret": Rule(max_len=16 * KiB, optional=False),
    "drover.v1.CreateTokenRequest.name": Rule(pattern=AGENT_NAME, optional=False, explain="a token name"),
    "drover.v1.CreateTokenRequest.kind": Rule(choices=("", "user", "agent")),
    "drover.v1.CreateTokenRequest.role": Rule(choices=("", "submit", "run.manage", "admin")),
    "drover.v1.CreateTokenRequest.pool": Rule(pattern=NAME, explain="a pool name"),
    "drover.v1.CreateTokenRequest.monthly_budget_usd": Rule(maximum=1e9),
    "drover.v1.CreateTokenRequest.expires_in": Rule(max_len=64),
    "drover.v1.ListTokensRequest.page_size": _page(1000),
    "drover.v1.ListTokensRequest.page_token": TOKEN,
    "drover.v1.RevokeTokenRequest.name": Rule(pattern=AGENT_NAME, optional=False, explain="a token name"),
    "drover.v1.RevokeTokenRequest.kind": Rule(choices=("", "user", "agent")),
    # --- ChangeService --------------------------------------------------------------------------
    "drover.v1.SubmitChangeRequest.goal": Rule(max_len=64 * KiB),
    "drover.v1.SubmitChangeRequest.criteria": Rule(max_len=4 * KiB, max_items=100),
    "drover.v1.SubmitChangeRequest.invariants": Rule(max_len=4 * KiB, max_items=100),
    "drover.v1.SubmitChangeRequest.budget_usd": Rule(limit=lambda limits: limits.max_budget_usd),
    "drover.v1.SubmitChangeRequest.tasks": Rule(max_items=500),
    "drover.v1.Task.key": KEY,
    "drover.v1.Task.kind": Rule(
        pattern=KIND, optional=False, explain="a kind: lower-case letters, digits, '_', '-', at most 32"
    ),
    "drover.v1.Task.objective": Rule(max_len=64 * KiB),
    "drover.v1.Task.depends_on": Rule(pattern=TASK_KEY, optional=False, max_items=500, explain="a Task key"),
    "drover.v1.Task.command": Rule(max_len=16 * KiB, max_items=1000),
    "drover.v1.Task.env": Rule(
        max_len=32 * KiB, max_items=200, key_pattern=ENV_NAME, explain="a POSIX environment variable name"
    ),
    "drover.v1.Task.timeout_seconds": Rule(maximum=MAX_TIMEOUT_SECONDS),
    "drover.v1.Task.files": Rule(max_len=1 * KiB, max_items=200, item=resources.normalise),
    "drover.v1.Task.resources": Rule(max_len=1 * KiB, max_items=200, item=resources.normalise),
    # a command Task's files: paths are checked by the domain (controlplane/domain/preparation.py)
    "drover.v1.Task.workspace_files": Rule(max_len=256 * KiB, max_items=100),
    "drover.v1.Task.workdir": Rule(max_len=1 * KiB),
    "drover.v1.Task.size": Rule(choices=SIZES),
    "drover.v1.Task.complexity": Rule(choices=LEVELS),
    "drover.v1.Task.risk": Rule(choices=LEVELS),
    "drover.v1.Task.required_capabilities": Rule(
        pattern=CAPABILITY, optional=False, max_items=32, explain="a capability name"
    ),
    "drover.v1.Task.flags": Rule(max_items=len(FLAGS), key_choices=FLAGS),
    "drover.v1.Task.runtime": Rule(choices=("", *graph.RUNTIMES)),
    # Output fields of a Task: a submission leaves them empty, and they are ignored.
    "drover.v1.Task.id": Rule(max_len=64),
    "drover.v1.Task.status": Rule(max_len=32),
    "drover.v1.Task.latest_run_id": Rule(max_len=64),
    "drover.v1.Task.reason": Rule(max_len=1 * KiB),
    "drover.v1.ListChangesRequest.project": Rule(pattern=NAME, explain="a project name"),
    "drover.v1.ListChangesRequest.limit": _page(500),
    "drover.v1.ListChangesRequest.page_size": _page(500),
    "drover.v1.ListChangesRequest.page_token": TOKEN,
    "drover.v1.ListChangesRequest.status": Rule(choices=CHANGE_STATUSES),
    "drover.v1.ListChangesRequest.submitted_by": Rule(max_len=200),
    "drover.v1.ListChangeSetsRequest.page_size": _page(500),
    "drover.v1.ListChangeSetsRequest.page_token": TOKEN,
    "drover.v1.GetPatchRequest.changeset_id": ID_REQUIRED,
    "drover.v1.RaiseBudgetRequest.budget_usd": Rule(limit=lambda limits: limits.max_budget_usd),
    "drover.v1.RetryTaskRequest.task_id": ID_REQUIRED,
    **dict.fromkeys(("drover.v1.AmendChangeRequest.tasks", "drover.v1.AmendChangeRequest.edges"), Rule(max_items=500)),
    **dict.fromkeys(("drover.v1.TaskEdge.task", "drover.v1.TaskEdge.depends_on"), KEY),
    # --- OperationsService ----------------------------------------------------------------------
    "drover.v1.ListAgentsRequest.page_size": _page(1000),
    "drover.v1.ListAgentsRequest.page_token": TOKEN,
    "drover.v1.DrainAgentRequest.name": Rule(pattern=AGENT_NAME, optional=False, explain="an agent name"),
    "drover.v1.UndrainAgentRequest.name": Rule(pattern=AGENT_NAME, optional=False, explain="an agent name"),
    "drover.v1.ListRunsRequest.change_id": ID_RULE,
    "drover.v1.ListRunsRequest.state": Rule(choices=RUN_STATES),
    "drover.v1.ListRunsRequest.agent": Rule(pattern=AGENT_NAME, explain="an agent name"),
    "drover.v1.ListRunsRequest.limit": _page(1000),
    "drover.v1.ListRunsRequest.page_size": _page(1000),
    "drover.v1.ListRunsRequest.page_token": TOKEN,
    "drover.v1.GetRunRequest.run_id": ID_REQUIRED,
    "drover.v1.CancelRunRequest.run_id": ID_REQUIRED,
    "drover.v1.CancelRunRequest.reason": Rule(max_len=1 * KiB),
    "drover.v1.TailRunLogsRequest.run_id": ID_REQUIRED,
    "drover.v1.ListEventsRequest.change_id": ID_RULE,
    "drover.v1.ListEventsRequest.run_id": ID_RULE,
    "drover.v1.ListEventsRequest.kind": Rule(pattern=EVENT_KIND, explain="an event kind prefix (run., change.)"),
    "drover.v1.ListEventsRequest.limit": _page(1000),
    "drover.v1.ListEventsRequest.page_size": _page(1000),
    "drover.v1.ListEventsRequest.page_token": TOKEN,
    "drover.v1.GetUsageRequest.prefix": Rule(max_len=300),
    "drover.v1.GetUsageRequest.page_size": _page(1000),
    "drover.v1.GetUsageRequest.page_token": TOKEN,
    "drover.v1.ListReceiptsRequest.change_id": ID_RULE,
    "drover.v1.ListReceiptsRequest.run_id": ID_RULE,
    "drover.v1.ListReceiptsRequest.page_size": _page(1000),
    "drover.v1.ListReceiptsRequest.page_token": TOKEN,
    "drover.v1.ListClaimsRequest.change_id": ID_RULE,
    "drover.v1.ListClaimsRequest.page_size": _page(1000),
    "drover.v1.ListClaimsRequest.page_token": TOKEN,
    "drover.v1.GetPacketRequest.run_id": ID_REQUIRED,
    "drover.v1.SendInputRequest.run_id": ID_REQUIRED,
    "drover.v1.SendInputRequest.kind": Rule(choices=("message", "interrupt"), optional=False),
    "drover.v1.SendInputRequest.text": Rule(max_len=64 * KiB),
    "drover.v1.ListInputsRequest.run_id": ID_REQUIRED,
    "drover.v1.ListInputsRequest.page_size": _page(1000),
    "drover.v1.ListInputsRequest.page_token": TOKEN,
    "drover.v1.ListQuestionsRequest.change_id": ID_RULE,
    "drover.v1.ListQuestionsRequest.run_id": ID_RULE,
    "drover.v1.ListQuestionsRequest.page_size": _page(1000),
    "drover.v1.ListQuestionsRequest.page_token": TOKEN,
    "drover.v1.AnswerQuestionRequest.question_id": ID_REQUIRED,
    "drover.v1.AnswerQuestionRequest.text": Rule(max_len=64 * KiB),
    # --- AgentService: unary calls --------------------------------------------------------------
    "drover.v1.ReserveModelCallRequest.run_id": Rule(pattern=ID, optional=False, explain="a run id"),
    "drover.v1.ReserveModelCallRequest.key": Rule(max_len=200),
    "drover.v1.ReserveModelCallRequest.model": Rule(pattern=MODEL, explain="a model id"),
    "drover.v1.ReserveModelCallRequest.purpose": Rule(choices=PURPOSES),
    "drover.v1.ReserveModelCallRequest.max_output_tokens": Rule(maximum=1_000_000),
    "drover.v1.ReserveModelCallRequest.estimated_input_tokens": Rule(maximum=10_000_000),
    "drover.v1.SettleModelCallRequest.reservation_id": Rule(pattern=ID, optional=False, explain="a reservation id"),
    "drover.v1.SettleModelCallRequest.error": Rule(max_len=200),
    "drover.v1.Usage.input_tokens": Rule(maximum=1_000_000_000),
    "drover.v1.Usage.output_tokens": Rule(maximum=1_000_000_000),
    "drover.v1.Usage.cache_creation_input_tokens": Rule(maximum=1_000_000_000),
    "drover.v1.Usage.cache_read_input_tokens": Rule(maximum=1_000_000_000),
    "drover.v1.PublishChangeSetRequest.run_id": Rule(pattern=ID, optional=False, explain="a run id"),
    "drover.v1.PublishChangeSetRequest.branch": Rule(pattern=BRANCH, optional=False, explain="a branch name"),
    "drover.v1.PublishChangeSetRequest.commit": Rule(pattern=COMMIT, optional=False, explain="a commit id"),
    "drover.v1.PublishChangeSetRequest.base_commit": Rule(pattern=COMMIT, explain="a commit id"),
    "drover.v1.PublishChangeSetRequest.start_commit": Rule(pattern=COMMIT, explain="a commit id"),
    "drover.v1.PublishChangeSetRequest.stacked_on": Rule(
        pattern=ID, optional=False, max_items=500, explain="a ChangeSet id"
    ),
    "drover.v1.PublishChangeSetRequest.files": Rule(max_items=100_000),
    "drover.v1.PublishChangeSetRequest.own_files": Rule(max_items=100_000),
    "drover.v1.PublishChangeSetRequest.left_out": Rule(max_items=100_000),
    "drover.v1.PublishChangeSetRequest.patch": Rule(max_len=64 * MiB),
    "drover.v1.PublishChangeSetRequest.summary": Rule(max_len=64 * KiB),
    "drover.v1.PublishChangeSetRequest.intent_json": Rule(max_len=64 * KiB, json_object=True),
    # --- AgentService.Connect: the agent's messages ----------------------------------------------
    "drover.v1.Hello.name": Rule(
        pattern=AGENT_NAME,
        optional=False,
        explain="an agent name: letters, digits, '.', '_', ':', '@', '-', at most 200",
    ),
    "drover.v1.Hello.labels": Rule(max_len=256, max_items=64, key_pattern=LABEL_KEY, explain="a label key"),
    "drover.v1.Hello.capacity": Rule(minimum=1, maximum=1024),
    "drover.v1.Hello.drivers": Rule(pattern=KIND, optional=False, max_items=16, explain="a driver name"),
    "drover.v1.Hello.version": Rule(max_len=64),
    "drover.v1.Hello.active_runs": Rule(pattern=ID, optional=False, max_items=10_000, explain="a run id"),
    "drover.v1.Hello.undelivered_runs": Rule(pattern=ID, optional=False, max_items=10_000, explain="a run id"),
    "drover.v1.Hello.resume_runs": Rule(pattern=ID, optional=False, max_items=10_000, explain="a run id"),
    "drover.v1.RunMessage.run_id": Rule(pattern=ID, optional=False, explain="a run id"),
    "drover.v1.RunMessage.seq": Rule(minimum=1, maximum=2**62),
    "drover.v1.RunRefused.reason": Rule(max_len=1 * KiB),
    "drover.v1.LogBatch.stream": Rule(choices=STREAMS, optional=False),
    "drover.v1.LogBatch.text": Rule(max_len=16 * MiB),
    "drover.v1.RunFinished.status": Rule(max_len=32),
    "drover.v1.RunFinished.exit_code": Rule(minimum=-(2**31)),
    "drover.v1.RunFinished.reason": Rule(max_len=1 * KiB),
    "drover.v1.RunFinished.error": Rule(max_len=64 * KiB),
    "drover.v1.RunFinished.parked": Rule(max_len=16 * KiB),
    "drover.v1.RunFinished.session_state": Rule(max_len=3 * MiB),
    "drover.v1.InputReceived.input_seq": Rule(minimum=1, maximum=2**62),
    "drover.v1.AskQuestionRequest.run_id": Rule(pattern=ID, optional=False, explain="a run id"),
    "drover.v1.AskQuestionRequest.key": Rule(pattern=ID, optional=False, max_len=64, explain="a question key"),
    "drover.v1.AskQuestionRequest.text": Rule(max_len=16 * KiB),
}


def check(message: Message, limits: Limits = Limits()) -> None:
    """Raise InvalidArgument naming the first field of `message` that breaks its rule."""
    _message(message, "", limits)
    if message.DESCRIPTOR.full_name in ("drover.v1.SubmitChangeRequest", "drover.v1.AmendChangeRequest"):
        size = message.ByteSize()
        if size > MAX_CHANGE_BYTES:
            raise InvalidArgument(f"the Change is {size} bytes; at most {MAX_CHANGE_BYTES}", field="tasks")


def _message(message: Message, path: str, limits: Limits) -> None:
    for field in message.DESCRIPTOR.fields:
        name = f"{path}.{field.name}" if path else field.name
        rule = RULES.get(field.full_name, Rule())
        value = getattr(message, field.name)
        if _is_map(field):
            _map(value, field, rule, name, limits)
        elif _repeated(field):
            if len(value) > rule.max_items:
                raise InvalidArgument(f"{len(value)} entries; at most {rule.max_items}", field=name)
            for i, item in enumerate(value):
                _scalar(item, field, rule, f"{name}[{i}]", limits)
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            if message.HasField(field.name):
                _message(value, name, limits)
        else:
            _scalar(value, field, rule, name, limits)


def _scalar(value: Any, field: FieldDescriptor, rule: Rule, name: str, limits: Limits) -> None:
    kind = field.type
    if kind == FieldDescriptor.TYPE_MESSAGE:
        _message(value, name, limits)
    elif kind == FieldDescriptor.TYPE_STRING:
        _string(value, rule, name)
    elif kind == FieldDescriptor.TYPE_BYTES:
        if len(value) > rule.max_len:
            raise InvalidArgument(f"longer than {rule.max_len} bytes ({len(value)})", field=name)
    elif kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        _number(value, rule, name, limits, real=True)
    elif kind != FieldDescriptor.TYPE_BOOL and kind != FieldDescriptor.TYPE_ENUM:
        _number(value, rule, name, limits, real=False)


def _string(value: str, rule: Rule, name: str) -> None:
    if "\x00" in value:
        raise InvalidArgument("must not contain NUL", field=name)
    if len(value) > rule.max_len:
        raise InvalidArgument(f"longer than {rule.max_len} characters ({len(value)})", field=name)
    if rule.choices and value not in rule.choices:
        shown = ", ".join(repr(c) for c in rule.choices if c)
        raise InvalidArgument(f"{_show(value)} is not one of {shown}", field=name)
    if not value and not rule.optional:
        raise InvalidArgument("must not be empty", field=name)
    if rule.pattern is not None and value and not rule.pattern.fullmatch(value):
        raise InvalidArgument(f"{_show(value)} is not {rule.explain or 'allowed here'}", field=name)
    if rule.item is not None:
        try:
            rule.item(value)
        except DroverError as err:
            raise InvalidArgument(str(err).split(": ", 1)[-1], field=name) from None
    if rule.json_object and value:
        try:
            parsed = json.loads(value)
        except ValueError:
            raise InvalidArgument("is not JSON", field=name) from None
        if not isinstance(parsed, dict):
            raise InvalidArgument("must be a JSON object", field=name)


def _number(value: float, rule: Rule, name: str, limits: Limits, *, real: bool) -> None:
    if real and not math.isfinite(value):
        raise InvalidArgument(f"must be a finite number, not {value}", field=name)
    if value < rule.minimum:
        raise InvalidArgument(f"must be at least {rule.minimum:g}", field=name)
    maximum = rule.limit(limits) if rule.limit is not None else rule.maximum
    if maximum is not None and value > maximum and not rule.clamp:
        raise InvalidArgument(f"must be at most {maximum:g}", field=name)


def _map(value: Any, field: FieldDescriptor, rule: Rule, name: str, limits: Limits) -> None:
    if len(value) > rule.max_items:
        raise InvalidArgument(f"{len(value)} entries; at most {rule.max_items}", field=name)
    value_field = field.message_type.fields_by_name["value"]
    for key in value:
        where = f"{name}[{json.dumps(key)[:80]}]"
        if isinstance(key, str):
            if "\x00" in key:
                raise InvalidArgument("a key must not contain NUL", field=where)
            if len(key) > 256:
                raise InvalidArgument("a key of more than 256 characters", field=where)
            if rule.key_pattern is not None and not rule.key_pattern.fullmatch(key):
                raise InvalidArgument(f"{_show(key)} is not {rule.explain or 'an allowed key'}", field=where)
            if rule.key_choices and key not in rule.key_choices:
                raise InvalidArgument(
                    f"unknown key {_show(key)}; known: {', '.join(sorted(rule.key_choices))}", field=where
                )
        item_rule = dataclasses.replace(rule, pattern=None, choices=(), key_pattern=None)
        _scalar(value[key], value_field, item_rule, where, limits)


def _repeated(field: FieldDescriptor) -> bool:
    return bool(field.is_repeated)


def _is_map(field: FieldDescriptor) -> bool:
    return field.type == FieldDescriptor.TYPE_MESSAGE and _repeated(field) and field.message_type.GetOptions().map_entry


def _show(value: str) -> str:
    return repr(value if len(value) <= 60 else value[:57] + "...")
