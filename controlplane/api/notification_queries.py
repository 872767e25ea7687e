"""The outbox's deliveries answered to operators as protobuf (ListNotificationDeliveries), newest first,
scoped like the other queries: a delivery about another project's Change does not exist for the caller."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.api import convert
from controlplane.api.change_queries import offset_of
from controlplane.services import paging
from controlplane.services.tenancy import Scope
from controlplane.store.models import NotificationDelivery
from drover.errors import InvalidArgument
from drover.v1 import operations_pb2

STATES = ("pending", "delivered", "failed")


def list_deliveries(
    s: Session, state: str, target: str, size: int, token: str, scope: Scope
) -> paging.Page[operations_pb2.NotificationDelivery]:
    if state and state not in STATES:
        raise InvalidArgument(f"state {state!r} is not one of {', '.join(STATES)}", field="state")
    size, start = paging.page_size(size, 100, 1000), offset_of(token)
    q = select(NotificationDelivery).order_by(NotificationDelivery.created_at.desc(), NotificationDelivery.id.desc())
    if state:
        q = q.where(NotificationDelivery.state == state)
    if target:
        q = q.where(NotificationDelivery.target == target)
    if scope is not None:
        q = q.where(NotificationDelivery.project.in_(sorted(scope)))
    rows = list(enumerate(s.scalars(q.offset(start).limit(size + 1)), start + 1))
    return paging.take(rows, size, lambda row: delivery(row[1]), lambda d: d.ByteSize(), lambda r: paging.encode(r[0]))


def delivery(row: NotificationDelivery) -> operations_pb2.NotificationDelivery:
    return operations_pb2.NotificationDelivery(
        id=row.id,
        target=row.target,
        event=row.event,
        event_id=row.event_id,
        change_id=row.change_id,
        project=row.project,
        state=row.state,
        attempts=row.attempts,
        last_status=row.last_status,
        last_error=row.last_error,
        created_at=convert.ts(row.created_at),
        next_attempt_at=convert.ts(row.next_attempt_at) if row.state == "pending" else None,
        delivered_at=convert.ts(row.delivered_at),
    )
