from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AgentMessage(_message.Message):
    __slots__ = ("hello", "run")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    hello: Hello
    run: RunMessage
    def __init__(self, hello: _Optional[_Union[Hello, _Mapping]] = ..., run: _Optional[_Union[RunMessage, _Mapping]] = ...) -> None: ...

class Hello(_message.Message):
    __slots__ = ("name", "labels", "capacity", "drivers", "version", "active_runs", "undelivered_runs", "draining")
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
    name: str
    labels: _containers.ScalarMap[str, str]
    capacity: int
    drivers: _containers.RepeatedScalarFieldContainer[str]
    version: str
    active_runs: _containers.RepeatedScalarFieldContainer[str]
    undelivered_runs: _containers.RepeatedScalarFieldContainer[str]
    draining: bool
    def __init__(self, name: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., capacity: _Optional[int] = ..., drivers: _Optional[_Iterable[str]] = ..., version: _Optional[str] = ..., active_runs: _Optional[_Iterable[str]] = ..., undelivered_runs: _Optional[_Iterable[str]] = ..., draining: _Optional[bool] = ...) -> None: ...

class RunMessage(_message.Message):
    __slots__ = ("run_id", "seq", "refused", "started", "log", "finished")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    LOG_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    seq: int
    refused: RunRefused
    started: RunStarted
    log: LogBatch
    finished: RunFinished
    def __init__(self, run_id: _Optional[str] = ..., seq: _Optional[int] = ..., refused: _Optional[_Union[RunRefused, _Mapping]] = ..., started: _Optional[_Union[RunStarted, _Mapping]] = ..., log: _Optional[_Union[LogBatch, _Mapping]] = ..., finished: _Optional[_Union[RunFinished, _Mapping]] = ...) -> None: ...

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
    __slots__ = ("status", "exit_code", "reason", "error")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    status: str
    exit_code: int
    reason: str
    error: str
    def __init__(self, status: _Optional[str] = ..., exit_code: _Optional[int] = ..., reason: _Optional[str] = ..., error: _Optional[str] = ...) -> None: ...

class ControlMessage(_message.Message):
    __slots__ = ("welcome", "assign", "cancel", "ack", "drain")
    WELCOME_FIELD_NUMBER: _ClassVar[int]
    ASSIGN_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    DRAIN_FIELD_NUMBER: _ClassVar[int]
    welcome: Welcome
    assign: RunAssignment
    cancel: CancelRun
    ack: Ack
    drain: Drain
    def __init__(self, welcome: _Optional[_Union[Welcome, _Mapping]] = ..., assign: _Optional[_Union[RunAssignment, _Mapping]] = ..., cancel: _Optional[_Union[CancelRun, _Mapping]] = ..., ack: _Optional[_Union[Ack, _Mapping]] = ..., drain: _Optional[_Union[Drain, _Mapping]] = ...) -> None: ...

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
    __slots__ = ("run_id", "change_id", "task_id", "task_key", "kind", "driver", "command", "workspace", "secret_env", "attempt", "tier", "model", "base_url", "context_hash", "packet", "tools", "limits")
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
    PACKET_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
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
    packet: bytes
    tools: _containers.RepeatedScalarFieldContainer[str]
    limits: _containers.ScalarMap[str, int]
    def __init__(self, run_id: _Optional[str] = ..., change_id: _Optional[str] = ..., task_id: _Optional[str] = ..., task_key: _Optional[str] = ..., kind: _Optional[str] = ..., driver: _Optional[str] = ..., command: _Optional[_Union[CommandSpec, _Mapping]] = ..., workspace: _Optional[_Union[WorkspaceSpec, _Mapping]] = ..., secret_env: _Optional[_Mapping[str, str]] = ..., attempt: _Optional[int] = ..., tier: _Optional[str] = ..., model: _Optional[str] = ..., base_url: _Optional[str] = ..., context_hash: _Optional[str] = ..., packet: _Optional[bytes] = ..., tools: _Optional[_Iterable[str]] = ..., limits: _Optional[_Mapping[str, int]] = ...) -> None: ...

class CommandSpec(_message.Message):
    __slots__ = ("argv", "env", "timeout_seconds")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ARGV_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    argv: _containers.RepeatedScalarFieldContainer[str]
    env: _containers.ScalarMap[str, str]
    timeout_seconds: int
    def __init__(self, argv: _Optional[_Iterable[str]] = ..., env: _Optional[_Mapping[str, str]] = ..., timeout_seconds: _Optional[int] = ...) -> None: ...

class WorkspaceSpec(_message.Message):
    __slots__ = ("project", "repo", "branch")
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    REPO_FIELD_NUMBER: _ClassVar[int]
    BRANCH_FIELD_NUMBER: _ClassVar[int]
    project: str
    repo: str
    branch: str
    def __init__(self, project: _Optional[str] = ..., repo: _Optional[str] = ..., branch: _Optional[str] = ...) -> None: ...

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
    __slots__ = ()
    def __init__(self) -> None: ...
