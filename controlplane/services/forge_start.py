"""Starting Changes from kept forge deliveries (issue 28), the store's part: the deliveries still to
process, each with what deciding needs; a labelled issue's Change submitted through the same function
as SubmitChange, linked to its issue, the delivery marked done and `forge.change_started` said, all in
one transaction; and a delivery ended (done or failed, with why)."""

from __future__ import annotations

import dataclasses

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from controlplane.domain import forge_retry, graph
from controlplane.services.change_lifecycle import submit_change
from controlplane.services.credentials import Sealer
from controlplane.services.forge_client import ForgeAccess
from controlplane.store.events import add_event
from controlplane.store.models import Change, ForgeDelivery, ForgeIssueChange, Project, utcnow

BATCH = 50


@dataclasses.dataclass(frozen=True)
class Pending:
    delivery_id: str
    project: str
    event: str
    action: str
    number: int
    label: str
    sender: str
    forge_label: str
    running_change: str
    """The issue's Change that has not finished ("": none)."""
    comment_id: int = 0
    """issue_comment: the comment, read from the forge (the delivery keeps no body)."""


def running_change(s: Session, project: str, number: int) -> str:
    """The issue's Change that has not finished yet ("": none), the newest first."""
    found = s.scalar(
        select(Change.id)
        .join(ForgeIssueChange, ForgeIssueChange.change_id == Change.id)
        .where(ForgeIssueChange.project == project, ForgeIssueChange.issue_number == number)
        .where(Change.status.not_in(graph.TERMINAL_CHANGE))
        .order_by(ForgeIssueChange.created_at.desc())
        .limit(1)
    )
    return found or ""


def pending(s: Session) -> list[Pending]:
    """The oldest deliveries still `received` and due (not waiting to be tried again), at most BATCH."""
    rows = s.execute(
        select(ForgeDelivery, Project.forge_label)
        .join(Project, Project.name == ForgeDelivery.project)
        .where(ForgeDelivery.state == "received")
        .where(or_(ForgeDelivery.next_attempt_at.is_(None), ForgeDelivery.next_attempt_at <= utcnow()))
        .order_by(ForgeDelivery.received_at, ForgeDelivery.delivery_id)
        .limit(BATCH)
    ).all()
    return [
        Pending(
            d.delivery_id,
            d.project,
            d.event,
            d.action,
            d.number,
            d.label,
            d.sender,
            label,
            running_change(s, d.project, d.number) if d.event == "issues" and d.number else "",
            d.comment_id,
        )
        for d, label in rows
    ]


def forge_access(s: Session, project: str, sealer: Sealer) -> ForgeAccess:
    """ForgeError when the project has no forge credential, or it does not open."""
    row = s.get(Project, project)
    assert row is not None
    return ForgeAccess.of(row, sealer)


def finish(s: Session, delivery_id: str, state: str, reason: str = "") -> None:
    """End a delivery still `received`: done (nothing more to do) or failed (reason says why)."""
    row = s.get(ForgeDelivery, delivery_id)
    if row is None or row.state != "received":
        return
    row.state, row.reason = state, reason[:2000]
    if state == "failed":
        add_event(s, "forge.delivery_failed", project=row.project, delivery_id=delivery_id, reason=row.reason)


def try_again(s: Session, delivery_id: str, reason: str) -> bool:
    """A passing forge error stopped the delivery: keep it `received` to be tried again after a wait
    (event `forge.delivery_retrying`), or fail it once the waits are used up. True: it will be tried again."""
    row = s.get(ForgeDelivery, delivery_id)
    if row is None or row.state != "received":
        return False
    row.attempts += 1
    when = forge_retry.next_attempt(row.attempts, utcnow())
    if when is None:
        finish(s, delivery_id, "failed", f"{reason} (after {row.attempts} tries)")
        return False
    row.next_attempt_at, row.reason = when, reason[:2000]
    add_event(
        s,
        "forge.delivery_retrying",
        project=row.project,
        delivery_id=delivery_id,
        attempts=row.attempts,
        next_attempt_at=when.isoformat(),
        reason=row.reason,
    )
    return True


def start_change(s: Session, delivery_id: str, spec: graph.ChangeSpec, number: int) -> str:
    """Submit the issue's Change, link it to the issue and mark the delivery done; "" (the delivery done
    without a Change) when the delivery was already processed or the issue has a Change running."""
    row = s.get(ForgeDelivery, delivery_id)
    if row is None or row.state != "received":
        return ""
    running = running_change(s, row.project, number)
    if running:
        row.state, row.reason = "done", f"the issue already has Change {running}"
        return ""
    change_id = submit_change(s, spec, f"github:{row.sender}")
    s.add(
        ForgeIssueChange(
            change_id=change_id,
            project=row.project,
            issue_number=number,
            delivery_id=delivery_id,
            comment_id=0,
            created_at=utcnow(),
        )
    )
    row.state, row.reason = "done", ""
    add_event(
        s,
        "forge.change_started",
        change_id=change_id,
        project=row.project,
        number=number,
        delivery_id=delivery_id,
        sender=row.sender,
    )
    return change_id


def record_comment(s: Session, change_id: str, comment_id: int) -> None:
    link = s.get(ForgeIssueChange, change_id)
    if link is not None:
        link.comment_id = comment_id
        add_event(s, "forge.issue_commented", change_id=change_id, number=link.issue_number, comment_id=comment_id)
