"""Notifications sent to `[[notify]]` targets, through the API (`client.notifications`, role run.manage):
what was sent where, and how its delivery went."""

from __future__ import annotations

import dataclasses
import datetime as dt

import grpc

from drover.admin import Metadata, _call
from drover.models import from_proto
from drover.v1 import operations_pb2, operations_pb2_grpc


@dataclasses.dataclass(frozen=True)
class NotificationDelivery:
    """One notification for one target. `id` is its X-Drover-Delivery header, the same on every attempt."""

    id: str
    target: str
    event: str  # change.finished | question.asked | budget.stopped | run.failed | round.started
    event_id: int
    change_id: str
    project: str
    state: str  # pending | delivered | failed
    attempts: int
    last_status: int  # the last attempt's HTTP status; 0: nothing answered
    last_error: str
    created_at: dt.datetime | None
    next_attempt_at: dt.datetime | None  # pending only
    delivered_at: dt.datetime | None


DeliveryList = list[NotificationDelivery]  # named here: inside the class `list` is its method


class Notifications:
    """ListNotificationDeliveries: `client.notifications.list(state="failed")`."""

    def __init__(self, channel: grpc.Channel, metadata: Metadata) -> None:
        self._stub = operations_pb2_grpc.OperationsServiceStub(channel)
        self._metadata = metadata

    def list(self, state: str = "", target: str = "", limit: int = 0) -> DeliveryList:
        """Deliveries newest first, of one state and one target ("": all); `limit` 0: every one."""
        found: DeliveryList = []
        token = ""
        while True:
            request = operations_pb2.ListNotificationDeliveriesRequest(
                state=state, target=target, page_token=token, page_size=min(limit, 1000) if limit else 0
            )
            answer = _call(self._stub.ListNotificationDeliveries, request, self._metadata)
            found += [from_proto(d, NotificationDelivery) for d in answer.deliveries]
            token = answer.next_page_token
            if not token or (limit and len(found) >= limit):
                return found[:limit] if limit else found
