from drover.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SubmitChangeRequest(_message.Message):
    __slots__ = ("project", "goal", "criteria", "invariants", "budget_usd", "tasks")
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    GOAL_FIELD_NUMBER: _ClassVar[int]
    CRITERIA_FIELD_NUMBER: _ClassVar[int]
    INVARIANTS_FIELD_NUMBER: _ClassVar[int]
    BUDGET_USD_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    project: str
    goal: str
    criteria: _containers.RepeatedScalarFieldContainer[str]
    invariants: _containers.RepeatedScalarFieldContainer[str]
    budget_usd: float
    tasks: _containers.RepeatedCompositeFieldContainer[_types_pb2.Task]
    def __init__(self, project: _Optional[str] = ..., goal: _Optional[str] = ..., criteria: _Optional[_Iterable[str]] = ..., invariants: _Optional[_Iterable[str]] = ..., budget_usd: _Optional[float] = ..., tasks: _Optional[_Iterable[_Union[_types_pb2.Task, _Mapping]]] = ...) -> None: ...

class GetChangeRequest(_message.Message):
    __slots__ = ("change_id",)
    CHANGE_ID_FIELD_NUMBER: _ClassVar[int]
    change_id: str
    def __init__(self, change_id: _Optional[str] = ...) -> None: ...

class ListChangesRequest(_message.Message):
    __slots__ = ("project", "limit", "page_size", "page_token", "status", "submitted_by")
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_BY_FIELD_NUMBER: _ClassVar[int]
    project: str
    limit: int
    page_size: int
    page_token: str
    status: str
    submitted_by: str
    def __init__(self, project: _Optional[str] = ..., limit: _Optional[int] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., status: _Optional[str] = ..., submitted_by: _Optional[str] = ...) -> None: ...

class ListChangesResponse(_message.Message):
    __slots__ = ("changes", "next_page_token")
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    changes: _containers.RepeatedCompositeFieldContainer[_types_pb2.Change]
    next_page_token: str
    def __init__(self, changes: _Optional[_Iterable[_Union[_types_pb2.Change, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class WatchChangeRequest(_message.Message):
    __slots__ = ("change_id", "after_event_id")
    CHANGE_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    change_id: str
    after_event_id: int
    def __init__(self, change_id: _Optional[str] = ..., after_event_id: _Optional[int] = ...) -> None: ...

class CancelChangeRequest(_message.Message):
    __slots__ = ("change_id",)
    CHANGE_ID_FIELD_NUMBER: _ClassVar[int]
    change_id: str
    def __init__(self, change_id: _Optional[str] = ...) -> None: ...

class ListChangeSetsRequest(_message.Message):
    __slots__ = ("change_id", "page_size", "page_token")
    CHANGE_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    change_id: str
    page_size: int
    page_token: str
    def __init__(self, change_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListChangeSetsResponse(_message.Message):
    __slots__ = ("changesets", "next_page_token")
    CHANGESETS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    changesets: _containers.RepeatedCompositeFieldContainer[_types_pb2.ChangeSet]
    next_page_token: str
    def __init__(self, changesets: _Optional[_Iterable[_Union[_types_pb2.ChangeSet, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetPatchRequest(_message.Message):
    __slots__ = ("changeset_id",)
    CHANGESET_ID_FIELD_NUMBER: _ClassVar[int]
    changeset_id: str
    def __init__(self, changeset_id: _Optional[str] = ...) -> None: ...

class Patch(_message.Message):
    __slots__ = ("changeset_id", "text")
    CHANGESET_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    changeset_id: str
    text: str
    def __init__(self, changeset_id: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class RaiseBudgetRequest(_message.Message):
    __slots__ = ("change_id", "budget_usd")
    CHANGE_ID_FIELD_NUMBER: _ClassVar[int]
    BUDGET_USD_FIELD_NUMBER: _ClassVar[int]
    change_id: str
    budget_usd: float
    def __init__(self, change_id: _Optional[str] = ..., budget_usd: _Optional[float] = ...) -> None: ...

class RetryTaskRequest(_message.Message):
    __slots__ = ("task_id", "tier")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    tier: str
    def __init__(self, task_id: _Optional[str] = ..., tier: _Optional[str] = ...) -> None: ...

class AmendChangeRequest(_message.Message):
    __slots__ = ("change_id", "tasks", "edges")
    CHANGE_ID_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    EDGES_FIELD_NUMBER: _ClassVar[int]
    change_id: str
    tasks: _containers.RepeatedCompositeFieldContainer[_types_pb2.Task]
    edges: _containers.RepeatedCompositeFieldContainer[TaskEdge]
    def __init__(self, change_id: _Optional[str] = ..., tasks: _Optional[_Iterable[_Union[_types_pb2.Task, _Mapping]]] = ..., edges: _Optional[_Iterable[_Union[TaskEdge, _Mapping]]] = ...) -> None: ...

class TaskEdge(_message.Message):
    __slots__ = ("task", "depends_on")
    TASK_FIELD_NUMBER: _ClassVar[int]
    DEPENDS_ON_FIELD_NUMBER: _ClassVar[int]
    task: str
    depends_on: str
    def __init__(self, task: _Optional[str] = ..., depends_on: _Optional[str] = ...) -> None: ...

class GetSpendRequest(_message.Message):
    __slots__ = ("change_id",)
    CHANGE_ID_FIELD_NUMBER: _ClassVar[int]
    change_id: str
    def __init__(self, change_id: _Optional[str] = ...) -> None: ...

class SpendLine(_message.Message):
    __slots__ = ("tier", "member", "model", "calls", "cost_micros")
    TIER_FIELD_NUMBER: _ClassVar[int]
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    CALLS_FIELD_NUMBER: _ClassVar[int]
    COST_MICROS_FIELD_NUMBER: _ClassVar[int]
    tier: str
    member: str
    model: str
    calls: int
    cost_micros: int
    def __init__(self, tier: _Optional[str] = ..., member: _Optional[str] = ..., model: _Optional[str] = ..., calls: _Optional[int] = ..., cost_micros: _Optional[int] = ...) -> None: ...

class Spend(_message.Message):
    __slots__ = ("change_id", "budget_micros", "spent_micros", "lines", "receipts")
    CHANGE_ID_FIELD_NUMBER: _ClassVar[int]
    BUDGET_MICROS_FIELD_NUMBER: _ClassVar[int]
    SPENT_MICROS_FIELD_NUMBER: _ClassVar[int]
    LINES_FIELD_NUMBER: _ClassVar[int]
    RECEIPTS_FIELD_NUMBER: _ClassVar[int]
    change_id: str
    budget_micros: int
    spent_micros: int
    lines: _containers.RepeatedCompositeFieldContainer[SpendLine]
    receipts: _containers.RepeatedCompositeFieldContainer[_types_pb2.DecisionReceipt]
    def __init__(self, change_id: _Optional[str] = ..., budget_micros: _Optional[int] = ..., spent_micros: _Optional[int] = ..., lines: _Optional[_Iterable[_Union[SpendLine, _Mapping]]] = ..., receipts: _Optional[_Iterable[_Union[_types_pb2.DecisionReceipt, _Mapping]]] = ...) -> None: ...
