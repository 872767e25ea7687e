import datetime

from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Task(_message.Message):
    __slots__ = ("id", "key", "kind", "objective", "depends_on", "command", "env", "timeout_seconds", "status", "files", "resources", "size", "complexity", "risk", "required_capabilities", "flags", "latest_run_id", "reason", "runtime", "workspace_files", "workdir")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class FlagsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bool
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bool] = ...) -> None: ...
    class WorkspaceFilesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    OBJECTIVE_FIELD_NUMBER: _ClassVar[int]
    DEPENDS_ON_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    COMPLEXITY_FIELD_NUMBER: _ClassVar[int]
    RISK_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    LATEST_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FILES_FIELD_NUMBER: _ClassVar[int]
    WORKDIR_FIELD_NUMBER: _ClassVar[int]
    id: str
    key: str
    kind: str
    objective: str
    depends_on: _containers.RepeatedScalarFieldContainer[str]
    command: _containers.RepeatedScalarFieldContainer[str]
    env: _containers.ScalarMap[str, str]
    timeout_seconds: int
    status: str
    files: _containers.RepeatedScalarFieldContainer[str]
    resources: _containers.RepeatedScalarFieldContainer[str]
    size: str
    complexity: str
    risk: str
    required_capabilities: _containers.RepeatedScalarFieldContainer[str]
    flags: _containers.ScalarMap[str, bool]
    latest_run_id: str
    reason: str
    runtime: str
    workspace_files: _containers.ScalarMap[str, str]
    workdir: str
    def __init__(self, id: _Optional[str] = ..., key: _Optional[str] = ..., kind: _Optional[str] = ..., objective: _Optional[str] = ..., depends_on: _Optional[_Iterable[str]] = ..., command: _Optional[_Iterable[str]] = ..., env: _Optional[_Mapping[str, str]] = ..., timeout_seconds: _Optional[int] = ..., status: _Optional[str] = ..., files: _Optional[_Iterable[str]] = ..., resources: _Optional[_Iterable[str]] = ..., size: _Optional[str] = ..., complexity: _Optional[str] = ..., risk: _Optional[str] = ..., required_capabilities: _Optional[_Iterable[str]] = ..., flags: _Optional[_Mapping[str, bool]] = ..., latest_run_id: _Optional[str] = ..., reason: _Optional[str] = ..., runtime: _Optional[str] = ..., workspace_files: _Optional[_Mapping[str, str]] = ..., workdir: _Optional[str] = ...) -> None: ...

class Change(_message.Message):
    __slots__ = ("id", "project", "goal", "criteria", "invariants", "budget_usd", "tasks", "status", "submitted_by", "created_at", "finished_at", "candidate_branch", "candidate_commit", "reason", "conflicts", "notices")
    ID_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    GOAL_FIELD_NUMBER: _ClassVar[int]
    CRITERIA_FIELD_NUMBER: _ClassVar[int]
    INVARIANTS_FIELD_NUMBER: _ClassVar[int]
    BUDGET_USD_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_BY_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_BRANCH_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_COMMIT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CONFLICTS_FIELD_NUMBER: _ClassVar[int]
    NOTICES_FIELD_NUMBER: _ClassVar[int]
    id: str
    project: str
    goal: str
    criteria: _containers.RepeatedScalarFieldContainer[str]
    invariants: _containers.RepeatedScalarFieldContainer[str]
    budget_usd: float
    tasks: _containers.RepeatedCompositeFieldContainer[Task]
    status: str
    submitted_by: str
    created_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    candidate_branch: str
    candidate_commit: str
    reason: str
    conflicts: _containers.RepeatedCompositeFieldContainer[Conflict]
    notices: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, id: _Optional[str] = ..., project: _Optional[str] = ..., goal: _Optional[str] = ..., criteria: _Optional[_Iterable[str]] = ..., invariants: _Optional[_Iterable[str]] = ..., budget_usd: _Optional[float] = ..., tasks: _Optional[_Iterable[_Union[Task, _Mapping]]] = ..., status: _Optional[str] = ..., submitted_by: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., candidate_branch: _Optional[str] = ..., candidate_commit: _Optional[str] = ..., reason: _Optional[str] = ..., conflicts: _Optional[_Iterable[_Union[Conflict, _Mapping]]] = ..., notices: _Optional[_Iterable[str]] = ...) -> None: ...

class Conflict(_message.Message):
    __slots__ = ("task_a", "task_b", "files", "resources", "created_at")
    TASK_A_FIELD_NUMBER: _ClassVar[int]
    TASK_B_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    task_a: str
    task_b: str
    files: _containers.RepeatedScalarFieldContainer[str]
    resources: _containers.RepeatedScalarFieldContainer[str]
    created_at: _timestamp_pb2.Timestamp
    def __init__(self, task_a: _Optional[str] = ..., task_b: _Optional[str] = ..., files: _Optional[_Iterable[str]] = ..., resources: _Optional[_Iterable[str]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Claim(_message.Message):
    __slots__ = ("resource", "run_id", "change_id", "task_id", "holder", "generation", "acquired_at", "expires_at")
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CHANGE_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    ACQUIRED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    resource: str
    run_id: str
    change_id: str
    task_id: str
    holder: str
    generation: int
    acquired_at: _timestamp_pb2.Timestamp
    expires_at: _timestamp_pb2.Timestamp
    def __init__(self, resource: _Optional[str] = ..., run_id: _Optional[str] = ..., change_id: _Optional[str] = ..., task_id: _Optional[str] = ..., holder: _Optional[str] = ..., generation: _Optional[int] = ..., acquired_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ChangeSet(_message.Message):
    __slots__ = ("id", "change_id", "task_id", "task_key", "run_id", "branch", "commit", "base_commit", "start_commit", "stacked_on", "files", "own_files", "patch_ref", "summary", "created_at", "left_out")
    ID_FIELD_NUMBER: _ClassVar[int]
    CHANGE_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_KEY_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    BRANCH_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    BASE_COMMIT_FIELD_NUMBER: _ClassVar[int]
    START_COMMIT_FIELD_NUMBER: _ClassVar[int]
    STACKED_ON_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    OWN_FILES_FIELD_NUMBER: _ClassVar[int]
    PATCH_REF_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    LEFT_OUT_FIELD_NUMBER: _ClassVar[int]
    id: str
    change_id: str
    task_id: str
    task_key: str
    run_id: str
    branch: str
    commit: str
    base_commit: str
    start_commit: str
    stacked_on: _containers.RepeatedScalarFieldContainer[str]
    files: _containers.RepeatedScalarFieldContainer[str]
    own_files: _containers.RepeatedScalarFieldContainer[str]
    patch_ref: str
    summary: str
    created_at: _timestamp_pb2.Timestamp
    left_out: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, id: _Optional[str] = ..., change_id: _Optional[str] = ..., task_id: _Optional[str] = ..., task_key: _Optional[str] = ..., run_id: _Optional[str] = ..., branch: _Optional[str] = ..., commit: _Optional[str] = ..., base_commit: _Optional[str] = ..., start_commit: _Optional[str] = ..., stacked_on: _Optional[_Iterable[str]] = ..., files: _Optional[_Iterable[str]] = ..., own_files: _Optional[_Iterable[str]] = ..., patch_ref: _Optional[str] = ..., summary: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., left_out: _Optional[_Iterable[str]] = ...) -> None: ...

class Run(_message.Message):
    __slots__ = ("id", "change_id", "task_id", "task_key", "state", "agent", "attempt", "exit_code", "reason", "created_at", "started_at", "finished_at", "output_bytes", "output_truncated", "cancel_requested", "project", "tier", "model", "context_hash", "outcome", "model_calls", "cost_micros", "driver", "branch", "setup_cached", "setup_seconds", "last_activity_at", "has_result", "result_text", "result_turns", "result_cost_micros", "result_success", "compactions")
    ID_FIELD_NUMBER: _ClassVar[int]
    CHANGE_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_KEY_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_HASH_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    MODEL_CALLS_FIELD_NUMBER: _ClassVar[int]
    COST_MICROS_FIELD_NUMBER: _ClassVar[int]
    DRIVER_FIELD_NUMBER: _ClassVar[int]
    BRANCH_FIELD_NUMBER: _ClassVar[int]
    SETUP_CACHED_FIELD_NUMBER: _ClassVar[int]
    SETUP_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LAST_ACTIVITY_AT_FIELD_NUMBER: _ClassVar[int]
    HAS_RESULT_FIELD_NUMBER: _ClassVar[int]
    RESULT_TEXT_FIELD_NUMBER: _ClassVar[int]
    RESULT_TURNS_FIELD_NUMBER: _ClassVar[int]
    RESULT_COST_MICROS_FIELD_NUMBER: _ClassVar[int]
    RESULT_SUCCESS_FIELD_NUMBER: _ClassVar[int]
    COMPACTIONS_FIELD_NUMBER: _ClassVar[int]
    id: str
    change_id: str
    task_id: str
    task_key: str
    state: str
    agent: str
    attempt: int
    exit_code: int
    reason: str
    created_at: _timestamp_pb2.Timestamp
    started_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    output_bytes: int
    output_truncated: bool
    cancel_requested: bool
    project: str
    tier: str
    model: str
    context_hash: str
    outcome: str
    model_calls: int
    cost_micros: int
    driver: str
    branch: str
    setup_cached: bool
    setup_seconds: float
    last_activity_at: _timestamp_pb2.Timestamp
    has_result: bool
    result_text: str
    result_turns: int
    result_cost_micros: int
    result_success: bool
    compactions: int
    def __init__(self, id: _Optional[str] = ..., change_id: _Optional[str] = ..., task_id: _Optional[str] = ..., task_key: _Optional[str] = ..., state: _Optional[str] = ..., agent: _Optional[str] = ..., attempt: _Optional[int] = ..., exit_code: _Optional[int] = ..., reason: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., output_bytes: _Optional[int] = ..., output_truncated: _Optional[bool] = ..., cancel_requested: _Optional[bool] = ..., project: _Optional[str] = ..., tier: _Optional[str] = ..., model: _Optional[str] = ..., context_hash: _Optional[str] = ..., outcome: _Optional[str] = ..., model_calls: _Optional[int] = ..., cost_micros: _Optional[int] = ..., driver: _Optional[str] = ..., branch: _Optional[str] = ..., setup_cached: _Optional[bool] = ..., setup_seconds: _Optional[float] = ..., last_activity_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., has_result: _Optional[bool] = ..., result_text: _Optional[str] = ..., result_turns: _Optional[int] = ..., result_cost_micros: _Optional[int] = ..., result_success: _Optional[bool] = ..., compactions: _Optional[int] = ...) -> None: ...

class RunInput(_message.Message):
    __slots__ = ("id", "run_id", "seq", "kind", "text", "state", "sent_by", "created_at", "received_at", "question_id")
    ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SENT_BY_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    RECEIVED_AT_FIELD_NUMBER: _ClassVar[int]
    QUESTION_ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    run_id: str
    seq: int
    kind: str
    text: str
    state: str
    sent_by: str
    created_at: _timestamp_pb2.Timestamp
    received_at: _timestamp_pb2.Timestamp
    question_id: str
    def __init__(self, id: _Optional[str] = ..., run_id: _Optional[str] = ..., seq: _Optional[int] = ..., kind: _Optional[str] = ..., text: _Optional[str] = ..., state: _Optional[str] = ..., sent_by: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., received_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., question_id: _Optional[str] = ...) -> None: ...

class Question(_message.Message):
    __slots__ = ("id", "run_id", "change_id", "task_key", "text", "blocking", "state", "answer", "answered_by", "created_at", "answered_at")
    ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CHANGE_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_KEY_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    BLOCKING_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    ANSWERED_BY_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    ANSWERED_AT_FIELD_NUMBER: _ClassVar[int]
    id: str
    run_id: str
    change_id: str
    task_key: str
    text: str
    blocking: bool
    state: str
    answer: str
    answered_by: str
    created_at: _timestamp_pb2.Timestamp
    answered_at: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., run_id: _Optional[str] = ..., change_id: _Optional[str] = ..., task_key: _Optional[str] = ..., text: _Optional[str] = ..., blocking: _Optional[bool] = ..., state: _Optional[str] = ..., answer: _Optional[str] = ..., answered_by: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., answered_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Agent(_message.Message):
    __slots__ = ("name", "labels", "capacity", "active_runs", "connected", "draining", "drivers", "version", "connected_at", "disconnected_at")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_RUNS_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    DRIVERS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_AT_FIELD_NUMBER: _ClassVar[int]
    DISCONNECTED_AT_FIELD_NUMBER: _ClassVar[int]
    name: str
    labels: _containers.ScalarMap[str, str]
    capacity: int
    active_runs: int
    connected: bool
    draining: bool
    drivers: _containers.RepeatedScalarFieldContainer[str]
    version: str
    connected_at: _timestamp_pb2.Timestamp
    disconnected_at: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., capacity: _Optional[int] = ..., active_runs: _Optional[int] = ..., connected: _Optional[bool] = ..., draining: _Optional[bool] = ..., drivers: _Optional[_Iterable[str]] = ..., version: _Optional[str] = ..., connected_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., disconnected_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ("id", "kind", "change_id", "task_id", "run_id", "agent", "data", "created_at")
    ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    CHANGE_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    id: int
    kind: str
    change_id: str
    task_id: str
    run_id: str
    agent: str
    data: _struct_pb2.Struct
    created_at: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[int] = ..., kind: _Optional[str] = ..., change_id: _Optional[str] = ..., task_id: _Optional[str] = ..., run_id: _Optional[str] = ..., agent: _Optional[str] = ..., data: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class LogLine(_message.Message):
    __slots__ = ("run_id", "seq", "stream", "text", "created_at")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    seq: int
    stream: str
    text: str
    created_at: _timestamp_pb2.Timestamp
    def __init__(self, run_id: _Optional[str] = ..., seq: _Optional[int] = ..., stream: _Optional[str] = ..., text: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class DecisionReceipt(_message.Message):
    __slots__ = ("run_id", "task_id", "task_key", "tier", "data", "created_at")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_KEY_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    task_id: str
    task_key: str
    tier: str
    data: _struct_pb2.Struct
    created_at: _timestamp_pb2.Timestamp
    def __init__(self, run_id: _Optional[str] = ..., task_id: _Optional[str] = ..., task_key: _Optional[str] = ..., tier: _Optional[str] = ..., data: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class MeterUsage(_message.Message):
    __slots__ = ("key", "kind", "period", "unit", "limit", "used", "reserved")
    KEY_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PERIOD_FIELD_NUMBER: _ClassVar[int]
    UNIT_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    RESERVED_FIELD_NUMBER: _ClassVar[int]
    key: str
    kind: str
    period: str
    unit: str
    limit: int
    used: int
    reserved: int
    def __init__(self, key: _Optional[str] = ..., kind: _Optional[str] = ..., period: _Optional[str] = ..., unit: _Optional[str] = ..., limit: _Optional[int] = ..., used: _Optional[int] = ..., reserved: _Optional[int] = ...) -> None: ...
