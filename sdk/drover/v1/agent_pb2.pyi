from drover.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AgentMessage(_message.Message):
    __slots__ = ("hello", "run", "heartbeat")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    hello: Hello
    run: RunMessage
    heartbeat: Heartbeat
    def __init__(self, hello: _Optional[_Union[Hello, _Mapping]] = ..., run: _Optional[_Union[RunMessage, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Hello(_message.Message):
    __slots__ = ("name", "labels", "capacity", "drivers", "version", "active_runs", "undelivered_runs", "draining", "resume_runs")
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
    DRIVERS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_RUNS_FIELD_NUMBER: _ClassVar[int]
    UNDELIVERED_RUNS_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    RESUME_RUNS_FIELD_NUMBER: _ClassVar[int]
    name: str
    labels: _containers.ScalarMap[str, str]
    capacity: int
    drivers: _containers.RepeatedScalarFieldContainer[str]
    version: str
    active_runs: _containers.RepeatedScalarFieldContainer[str]
    undelivered_runs: _containers.RepeatedScalarFieldContainer[str]
    draining: bool
    resume_runs: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., capacity: _Optional[int] = ..., drivers: _Optional[_Iterable[str]] = ..., version: _Optional[str] = ..., active_runs: _Optional[_Iterable[str]] = ..., undelivered_runs: _Optional[_Iterable[str]] = ..., draining: _Optional[bool] = ..., resume_runs: _Optional[_Iterable[str]] = ...) -> None: ...

class RunMessage(_message.Message):
    __slots__ = ("run_id", "seq", "refused", "started", "log", "finished", "input_received")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    LOG_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    INPUT_RECEIVED_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    seq: int
    refused: RunRefused
    started: RunStarted
    log: LogBatch
    finished: RunFinished
    input_received: InputReceived
    def __init__(self, run_id: _Optional[str] = ..., seq: _Optional[int] = ..., refused: _Optional[_Union[RunRefused, _Mapping]] = ..., started: _Optional[_Union[RunStarted, _Mapping]] = ..., log: _Optional[_Union[LogBatch, _Mapping]] = ..., finished: _Optional[_Union[RunFinished, _Mapping]] = ..., input_received: _Optional[_Union[InputReceived, _Mapping]] = ...) -> None: ...

class InputReceived(_message.Message):
    __slots__ = ("input_seq",)
    INPUT_SEQ_FIELD_NUMBER: _ClassVar[int]
    input_seq: int
    def __init__(self, input_seq: _Optional[int] = ...) -> None: ...

class RunRefused(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class RunStarted(_message.Message):
    __slots__ = ("pid",)
    PID_FIELD_NUMBER: _ClassVar[int]
    pid: int
    def __init__(self, pid: _Optional[int] = ...) -> None: ...

class LogBatch(_message.Message):
    __slots__ = ("stream", "text")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    stream: str
    text: str
    def __init__(self, stream: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class RunFinished(_message.Message):
    __slots__ = ("status", "exit_code", "reason", "error", "parked", "session_state", "setup_seconds", "setup_cached", "result")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    PARKED_FIELD_NUMBER: _ClassVar[int]
    SESSION_STATE_FIELD_NUMBER: _ClassVar[int]
    SETUP_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SETUP_CACHED_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    status: str
    exit_code: int
    reason: str
    error: str
    parked: str
    session_state: bytes
    setup_seconds: float
    setup_cached: bool
    result: SessionResult
    def __init__(self, status: _Optional[str] = ..., exit_code: _Optional[int] = ..., reason: _Optional[str] = ..., error: _Optional[str] = ..., parked: _Optional[str] = ..., session_state: _Optional[bytes] = ..., setup_seconds: _Optional[float] = ..., setup_cached: _Optional[bool] = ..., result: _Optional[_Union[SessionResult, _Mapping]] = ...) -> None: ...

class SessionResult(_message.Message):
    __slots__ = ("text", "turns", "cost_micros", "success", "compactions")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TURNS_FIELD_NUMBER: _ClassVar[int]
    COST_MICROS_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    COMPACTIONS_FIELD_NUMBER: _ClassVar[int]
    text: str
    turns: int
    cost_micros: int
    success: bool
    compactions: int
    def __init__(self, text: _Optional[str] = ..., turns: _Optional[int] = ..., cost_micros: _Optional[int] = ..., success: _Optional[bool] = ..., compactions: _Optional[int] = ...) -> None: ...

class ControlMessage(_message.Message):
    __slots__ = ("welcome", "assign", "cancel", "ack", "drain", "input")
    WELCOME_FIELD_NUMBER: _ClassVar[int]
    ASSIGN_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    DRAIN_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    welcome: Welcome
    assign: RunAssignment
    cancel: CancelRun
    ack: Ack
    drain: Drain
    input: SessionInput
    def __init__(self, welcome: _Optional[_Union[Welcome, _Mapping]] = ..., assign: _Optional[_Union[RunAssignment, _Mapping]] = ..., cancel: _Optional[_Union[CancelRun, _Mapping]] = ..., ack: _Optional[_Union[Ack, _Mapping]] = ..., drain: _Optional[_Union[Drain, _Mapping]] = ..., input: _Optional[_Union[SessionInput, _Mapping]] = ...) -> None: ...

class SessionInput(_message.Message):
    __slots__ = ("run_id", "input_seq", "kind", "text", "input_id", "question_id")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    INPUT_SEQ_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    INPUT_ID_FIELD_NUMBER: _ClassVar[int]
    QUESTION_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    input_seq: int
    kind: str
    text: str
    input_id: str
    question_id: str
    def __init__(self, run_id: _Optional[str] = ..., input_seq: _Optional[int] = ..., kind: _Optional[str] = ..., text: _Optional[str] = ..., input_id: _Optional[str] = ..., question_id: _Optional[str] = ...) -> None: ...

class AskQuestionRequest(_message.Message):
    __slots__ = ("run_id", "key", "text", "blocking")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    BLOCKING_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    key: str
    text: str
    blocking: bool
    def __init__(self, run_id: _Optional[str] = ..., key: _Optional[str] = ..., text: _Optional[str] = ..., blocking: _Optional[bool] = ...) -> None: ...

class Welcome(_message.Message):
    __slots__ = ("agent", "applied")
    class AppliedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    AGENT_FIELD_NUMBER: _ClassVar[int]
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    agent: str
    applied: _containers.ScalarMap[str, int]
    def __init__(self, agent: _Optional[str] = ..., applied: _Optional[_Mapping[str, int]] = ...) -> None: ...

class RunAssignment(_message.Message):
    __slots__ = ("run_id", "change_id", "task_id", "task_key", "kind", "driver", "command", "workspace", "secret_env", "attempt", "tier", "model", "base_url", "context_hash", "limits", "harness", "resume")
    class SecretEnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class LimitsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CHANGE_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_KEY_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    DRIVER_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    SECRET_ENV_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    BASE_URL_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_HASH_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    HARNESS_FIELD_NUMBER: _ClassVar[int]
    RESUME_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    change_id: str
    task_id: str
    task_key: str
    kind: str
    driver: str
    command: CommandSpec
    workspace: WorkspaceSpec
    secret_env: _containers.ScalarMap[str, str]
    attempt: int
    tier: str
    model: str
    base_url: str
    context_hash: str
    limits: _containers.ScalarMap[str, int]
    harness: HarnessSpec
    resume: bool
    def __init__(self, run_id: _Optional[str] = ..., change_id: _Optional[str] = ..., task_id: _Optional[str] = ..., task_key: _Optional[str] = ..., kind: _Optional[str] = ..., driver: _Optional[str] = ..., command: _Optional[_Union[CommandSpec, _Mapping]] = ..., workspace: _Optional[_Union[WorkspaceSpec, _Mapping]] = ..., secret_env: _Optional[_Mapping[str, str]] = ..., attempt: _Optional[int] = ..., tier: _Optional[str] = ..., model: _Optional[str] = ..., base_url: _Optional[str] = ..., context_hash: _Optional[str] = ..., limits: _Optional[_Mapping[str, int]] = ..., harness: _Optional[_Union[HarnessSpec, _Mapping]] = ..., resume: _Optional[bool] = ...) -> None: ...

class HarnessSpec(_message.Message):
    __slots__ = ("workspace_mode", "max_calls", "max_output_tokens", "thinking_json", "prompt", "command_rules", "network", "context_window_tokens", "fold_fraction", "fold_model", "stall_timeout_seconds", "max_attempts", "instructions", "billing", "resume_branch", "resume_workspace_json", "resume_session_id", "resume_state", "resume_answers", "build_outputs", "anthropic_workspace_id", "effort", "attempt_ceiling_seconds")
    WORKSPACE_MODE_FIELD_NUMBER: _ClassVar[int]
    MAX_CALLS_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    THINKING_JSON_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    COMMAND_RULES_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_WINDOW_TOKENS_FIELD_NUMBER: _ClassVar[int]
    FOLD_FRACTION_FIELD_NUMBER: _ClassVar[int]
    FOLD_MODEL_FIELD_NUMBER: _ClassVar[int]
    STALL_TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    BILLING_FIELD_NUMBER: _ClassVar[int]
    RESUME_BRANCH_FIELD_NUMBER: _ClassVar[int]
    RESUME_WORKSPACE_JSON_FIELD_NUMBER: _ClassVar[int]
    RESUME_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    RESUME_STATE_FIELD_NUMBER: _ClassVar[int]
    RESUME_ANSWERS_FIELD_NUMBER: _ClassVar[int]
    BUILD_OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    ANTHROPIC_WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    EFFORT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_CEILING_SECONDS_FIELD_NUMBER: _ClassVar[int]
    workspace_mode: str
    max_calls: int
    max_output_tokens: int
    thinking_json: str
    prompt: str
    command_rules: _containers.RepeatedScalarFieldContainer[str]
    network: bool
    context_window_tokens: float
    fold_fraction: float
    fold_model: str
    stall_timeout_seconds: int
    max_attempts: int
    instructions: str
    billing: str
    resume_branch: str
    resume_workspace_json: str
    resume_session_id: str
    resume_state: bytes
    resume_answers: str
    build_outputs: _containers.RepeatedScalarFieldContainer[str]
    anthropic_workspace_id: str
    effort: str
    attempt_ceiling_seconds: float
    def __init__(self, workspace_mode: _Optional[str] = ..., max_calls: _Optional[int] = ..., max_output_tokens: _Optional[int] = ..., thinking_json: _Optional[str] = ..., prompt: _Optional[str] = ..., command_rules: _Optional[_Iterable[str]] = ..., network: _Optional[bool] = ..., context_window_tokens: _Optional[float] = ..., fold_fraction: _Optional[float] = ..., fold_model: _Optional[str] = ..., stall_timeout_seconds: _Optional[int] = ..., max_attempts: _Optional[int] = ..., instructions: _Optional[str] = ..., billing: _Optional[str] = ..., resume_branch: _Optional[str] = ..., resume_workspace_json: _Optional[str] = ..., resume_session_id: _Optional[str] = ..., resume_state: _Optional[bytes] = ..., resume_answers: _Optional[str] = ..., build_outputs: _Optional[_Iterable[str]] = ..., anthropic_workspace_id: _Optional[str] = ..., effort: _Optional[str] = ..., attempt_ceiling_seconds: _Optional[float] = ...) -> None: ...

class StackedChangeSet(_message.Message):
    __slots__ = ("changeset_id", "task_id", "branch", "commit", "created_at")
    CHANGESET_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    BRANCH_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    changeset_id: str
    task_id: str
    branch: str
    commit: str
    created_at: str
    def __init__(self, changeset_id: _Optional[str] = ..., task_id: _Optional[str] = ..., branch: _Optional[str] = ..., commit: _Optional[str] = ..., created_at: _Optional[str] = ...) -> None: ...

class CommandSpec(_message.Message):
    __slots__ = ("argv", "env", "timeout_seconds", "network", "files", "workdir")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class FilesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ARGV_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    WORKDIR_FIELD_NUMBER: _ClassVar[int]
    argv: _containers.RepeatedScalarFieldContainer[str]
    env: _containers.ScalarMap[str, str]
    timeout_seconds: int
    network: bool
    files: _containers.ScalarMap[str, str]
    workdir: str
    def __init__(self, argv: _Optional[_Iterable[str]] = ..., env: _Optional[_Mapping[str, str]] = ..., timeout_seconds: _Optional[int] = ..., network: _Optional[bool] = ..., files: _Optional[_Mapping[str, str]] = ..., workdir: _Optional[str] = ...) -> None: ...

class WorkspaceSpec(_message.Message):
    __slots__ = ("project", "repo", "branch", "stack", "setup", "setup_network", "env", "git_name", "git_email", "task_branch", "cache_key_files")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    REPO_FIELD_NUMBER: _ClassVar[int]
    BRANCH_FIELD_NUMBER: _ClassVar[int]
    STACK_FIELD_NUMBER: _ClassVar[int]
    SETUP_FIELD_NUMBER: _ClassVar[int]
    SETUP_NETWORK_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    GIT_NAME_FIELD_NUMBER: _ClassVar[int]
    GIT_EMAIL_FIELD_NUMBER: _ClassVar[int]
    TASK_BRANCH_FIELD_NUMBER: _ClassVar[int]
    CACHE_KEY_FILES_FIELD_NUMBER: _ClassVar[int]
    project: str
    repo: str
    branch: str
    stack: _containers.RepeatedCompositeFieldContainer[StackedChangeSet]
    setup: _containers.RepeatedScalarFieldContainer[str]
    setup_network: bool
    env: _containers.ScalarMap[str, str]
    git_name: str
    git_email: str
    task_branch: str
    cache_key_files: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, project: _Optional[str] = ..., repo: _Optional[str] = ..., branch: _Optional[str] = ..., stack: _Optional[_Iterable[_Union[StackedChangeSet, _Mapping]]] = ..., setup: _Optional[_Iterable[str]] = ..., setup_network: _Optional[bool] = ..., env: _Optional[_Mapping[str, str]] = ..., git_name: _Optional[str] = ..., git_email: _Optional[str] = ..., task_branch: _Optional[str] = ..., cache_key_files: _Optional[_Iterable[str]] = ...) -> None: ...

class CancelRun(_message.Message):
    __slots__ = ("run_id", "reason")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    reason: str
    def __init__(self, run_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ("run_id", "seq")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    seq: int
    def __init__(self, run_id: _Optional[str] = ..., seq: _Optional[int] = ...) -> None: ...

class Drain(_message.Message):
    __slots__ = ("undrain",)
    UNDRAIN_FIELD_NUMBER: _ClassVar[int]
    undrain: bool
    def __init__(self, undrain: _Optional[bool] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHE_CREATION_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHE_READ_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int
    def __init__(self, input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., cache_creation_input_tokens: _Optional[int] = ..., cache_read_input_tokens: _Optional[int] = ...) -> None: ...

class ReserveModelCallRequest(_message.Message):
    __slots__ = ("run_id", "key", "model", "purpose", "max_output_tokens", "estimated_input_tokens")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PURPOSE_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    key: str
    model: str
    purpose: str
    max_output_tokens: int
    estimated_input_tokens: int
    def __init__(self, run_id: _Optional[str] = ..., key: _Optional[str] = ..., model: _Optional[str] = ..., purpose: _Optional[str] = ..., max_output_tokens: _Optional[int] = ..., estimated_input_tokens: _Optional[int] = ...) -> None: ...

class ReserveModelCallResponse(_message.Message):
    __slots__ = ("reservation_id", "granted", "refusal", "calls_used", "calls_cap", "estimate_micros")
    RESERVATION_ID_FIELD_NUMBER: _ClassVar[int]
    GRANTED_FIELD_NUMBER: _ClassVar[int]
    REFUSAL_FIELD_NUMBER: _ClassVar[int]
    CALLS_USED_FIELD_NUMBER: _ClassVar[int]
    CALLS_CAP_FIELD_NUMBER: _ClassVar[int]
    ESTIMATE_MICROS_FIELD_NUMBER: _ClassVar[int]
    reservation_id: str
    granted: bool
    refusal: str
    calls_used: int
    calls_cap: int
    estimate_micros: int
    def __init__(self, reservation_id: _Optional[str] = ..., granted: _Optional[bool] = ..., refusal: _Optional[str] = ..., calls_used: _Optional[int] = ..., calls_cap: _Optional[int] = ..., estimate_micros: _Optional[int] = ...) -> None: ...

class SettleModelCallRequest(_message.Message):
    __slots__ = ("reservation_id", "usage", "error")
    RESERVATION_ID_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    reservation_id: str
    usage: Usage
    error: str
    def __init__(self, reservation_id: _Optional[str] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., error: _Optional[str] = ...) -> None: ...

class SettleModelCallResponse(_message.Message):
    __slots__ = ("cost_micros", "run_cost_micros")
    COST_MICROS_FIELD_NUMBER: _ClassVar[int]
    RUN_COST_MICROS_FIELD_NUMBER: _ClassVar[int]
    cost_micros: int
    run_cost_micros: int
    def __init__(self, cost_micros: _Optional[int] = ..., run_cost_micros: _Optional[int] = ...) -> None: ...

class PublishChangeSetRequest(_message.Message):
    __slots__ = ("run_id", "branch", "commit", "base_commit", "start_commit", "stacked_on", "files", "own_files", "patch", "summary", "intent_json", "left_out")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    BRANCH_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    BASE_COMMIT_FIELD_NUMBER: _ClassVar[int]
    START_COMMIT_FIELD_NUMBER: _ClassVar[int]
    STACKED_ON_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    OWN_FILES_FIELD_NUMBER: _ClassVar[int]
    PATCH_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    INTENT_JSON_FIELD_NUMBER: _ClassVar[int]
    LEFT_OUT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    branch: str
    commit: str
    base_commit: str
    start_commit: str
    stacked_on: _containers.RepeatedScalarFieldContainer[str]
    files: _containers.RepeatedScalarFieldContainer[str]
    own_files: _containers.RepeatedScalarFieldContainer[str]
    patch: str
    summary: str
    intent_json: str
    left_out: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, run_id: _Optional[str] = ..., branch: _Optional[str] = ..., commit: _Optional[str] = ..., base_commit: _Optional[str] = ..., start_commit: _Optional[str] = ..., stacked_on: _Optional[_Iterable[str]] = ..., files: _Optional[_Iterable[str]] = ..., own_files: _Optional[_Iterable[str]] = ..., patch: _Optional[str] = ..., summary: _Optional[str] = ..., intent_json: _Optional[str] = ..., left_out: _Optional[_Iterable[str]] = ...) -> None: ...

class ChangeSetRef(_message.Message):
    __slots__ = ("changeset_id", "patch_ref")
    CHANGESET_ID_FIELD_NUMBER: _ClassVar[int]
    PATCH_REF_FIELD_NUMBER: _ClassVar[int]
    changeset_id: str
    patch_ref: str
    def __init__(self, changeset_id: _Optional[str] = ..., patch_ref: _Optional[str] = ...) -> None: ...
