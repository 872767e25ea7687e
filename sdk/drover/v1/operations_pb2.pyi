import datetime

from drover.v1 import types_pb2 as _types_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ListNotificationDeliveriesRequest(_message.Message):
    __slots__ = ("state", "target", "page_size", "page_token")
    STATE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    state: str
    target: str
    page_size: int
    page_token: str
    def __init__(self, state: _Optional[str] = ..., target: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListNotificationDeliveriesResponse(_message.Message):
    __slots__ = ("deliveries", "next_page_token")
    DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    deliveries: _containers.RepeatedCompositeFieldContainer[NotificationDelivery]
    next_page_token: str
    def __init__(self, deliveries: _Optional[_Iterable[_Union[NotificationDelivery, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class NotificationDelivery(_message.Message):
    __slots__ = ("id", "target", "event", "event_id", "change_id", "project", "state", "attempts", "last_status", "last_error", "created_at", "next_attempt_at", "delivered_at")
    ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    CHANGE_ID_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    LAST_STATUS_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    NEXT_ATTEMPT_AT_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_AT_FIELD_NUMBER: _ClassVar[int]
    id: str
    target: str
    event: str
    event_id: int
    change_id: str
    project: str
    state: str
    attempts: int
    last_status: int
    last_error: str
    created_at: _timestamp_pb2.Timestamp
    next_attempt_at: _timestamp_pb2.Timestamp
    delivered_at: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., target: _Optional[str] = ..., event: _Optional[str] = ..., event_id: _Optional[int] = ..., change_id: _Optional[str] = ..., project: _Optional[str] = ..., state: _Optional[str] = ..., attempts: _Optional[int] = ..., last_status: _Optional[int] = ..., last_error: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., next_attempt_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., delivered_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListQuestionsRequest(_message.Message):
    __slots__ = ("change_id", "run_id", "open_only", "page_size", "page_token")
    CHANGE_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    OPEN_ONLY_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    change_id: str
    run_id: str
    open_only: bool
    page_size: int
    page_token: str
    def __init__(self, change_id: _Optional[str] = ..., run_id: _Optional[str] = ..., open_only: _Optional[bool] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListQuestionsResponse(_message.Message):
    __slots__ = ("questions", "next_page_token")
    QUESTIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    questions: _containers.RepeatedCompositeFieldContainer[_types_pb2.Question]
    next_page_token: str
    def __init__(self, questions: _Optional[_Iterable[_Union[_types_pb2.Question, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class AnswerQuestionRequest(_message.Message):
    __slots__ = ("question_id", "text")
    QUESTION_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    question_id: str
    text: str
    def __init__(self, question_id: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class SendInputRequest(_message.Message):
    __slots__ = ("run_id", "kind", "text")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    kind: str
    text: str
    def __init__(self, run_id: _Optional[str] = ..., kind: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class ListInputsRequest(_message.Message):
    __slots__ = ("run_id", "page_size", "page_token")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    page_size: int
    page_token: str
    def __init__(self, run_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListInputsResponse(_message.Message):
    __slots__ = ("inputs", "next_page_token")
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    inputs: _containers.RepeatedCompositeFieldContainer[_types_pb2.RunInput]
    next_page_token: str
    def __init__(self, inputs: _Optional[_Iterable[_Union[_types_pb2.RunInput, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListAgentsRequest(_message.Message):
    __slots__ = ("connected_only", "page_size", "page_token")
    CONNECTED_ONLY_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    connected_only: bool
    page_size: int
    page_token: str
    def __init__(self, connected_only: _Optional[bool] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListAgentsResponse(_message.Message):
    __slots__ = ("agents", "next_page_token")
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    agents: _containers.RepeatedCompositeFieldContainer[_types_pb2.Agent]
    next_page_token: str
    def __init__(self, agents: _Optional[_Iterable[_Union[_types_pb2.Agent, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DrainAgentRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class UndrainAgentRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListRunsRequest(_message.Message):
    __slots__ = ("change_id", "state", "agent", "limit", "page_size", "page_token")
    CHANGE_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    change_id: str
    state: str
    agent: str
    limit: int
    page_size: int
    page_token: str
    def __init__(self, change_id: _Optional[str] = ..., state: _Optional[str] = ..., agent: _Optional[str] = ..., limit: _Optional[int] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListRunsResponse(_message.Message):
    __slots__ = ("runs", "next_page_token")
    RUNS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[_types_pb2.Run]
    next_page_token: str
    def __init__(self, runs: _Optional[_Iterable[_Union[_types_pb2.Run, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetRunRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class CancelRunRequest(_message.Message):
    __slots__ = ("run_id", "reason")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    reason: str
    def __init__(self, run_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class TailRunLogsRequest(_message.Message):
    __slots__ = ("run_id", "after_seq", "follow")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    after_seq: int
    follow: bool
    def __init__(self, run_id: _Optional[str] = ..., after_seq: _Optional[int] = ..., follow: _Optional[bool] = ...) -> None: ...

class ListEventsRequest(_message.Message):
    __slots__ = ("change_id", "run_id", "kind", "after_id", "limit", "page_size", "page_token", "newest")
    CHANGE_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    AFTER_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    NEWEST_FIELD_NUMBER: _ClassVar[int]
    change_id: str
    run_id: str
    kind: str
    after_id: int
    limit: int
    page_size: int
    page_token: str
    newest: bool
    def __init__(self, change_id: _Optional[str] = ..., run_id: _Optional[str] = ..., kind: _Optional[str] = ..., after_id: _Optional[int] = ..., limit: _Optional[int] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., newest: _Optional[bool] = ...) -> None: ...

class ListEventsResponse(_message.Message):
    __slots__ = ("events", "next_page_token")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[_types_pb2.Event]
    next_page_token: str
    def __init__(self, events: _Optional[_Iterable[_Union[_types_pb2.Event, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetUsageRequest(_message.Message):
    __slots__ = ("prefix", "page_size", "page_token")
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    prefix: str
    page_size: int
    page_token: str
    def __init__(self, prefix: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class GetUsageResponse(_message.Message):
    __slots__ = ("meters", "next_page_token")
    METERS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    meters: _containers.RepeatedCompositeFieldContainer[_types_pb2.MeterUsage]
    next_page_token: str
    def __init__(self, meters: _Optional[_Iterable[_Union[_types_pb2.MeterUsage, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class RaiseMeterRequest(_message.Message):
    __slots__ = ("meter", "name", "limit")
    METER_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    meter: str
    name: str
    limit: float
    def __init__(self, meter: _Optional[str] = ..., name: _Optional[str] = ..., limit: _Optional[float] = ...) -> None: ...

class ListReceiptsRequest(_message.Message):
    __slots__ = ("change_id", "run_id", "page_size", "page_token")
    CHANGE_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    change_id: str
    run_id: str
    page_size: int
    page_token: str
    def __init__(self, change_id: _Optional[str] = ..., run_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListReceiptsResponse(_message.Message):
    __slots__ = ("receipts", "next_page_token")
    RECEIPTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    receipts: _containers.RepeatedCompositeFieldContainer[_types_pb2.DecisionReceipt]
    next_page_token: str
    def __init__(self, receipts: _Optional[_Iterable[_Union[_types_pb2.DecisionReceipt, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListClaimsRequest(_message.Message):
    __slots__ = ("change_id", "include_released", "page_size", "page_token")
    CHANGE_ID_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_RELEASED_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    change_id: str
    include_released: bool
    page_size: int
    page_token: str
    def __init__(self, change_id: _Optional[str] = ..., include_released: _Optional[bool] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListClaimsResponse(_message.Message):
    __slots__ = ("claims", "next_page_token")
    CLAIMS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    claims: _containers.RepeatedCompositeFieldContainer[_types_pb2.Claim]
    next_page_token: str
    def __init__(self, claims: _Optional[_Iterable[_Union[_types_pb2.Claim, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetPacketRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class Packet(_message.Message):
    __slots__ = ("run_id", "context_hash", "json")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_HASH_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    context_hash: str
    json: str
    def __init__(self, run_id: _Optional[str] = ..., context_hash: _Optional[str] = ..., json: _Optional[str] = ...) -> None: ...
