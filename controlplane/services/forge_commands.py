"""`/drover` comments (issue 28), the store's part: what deciding a command needs of the issue's Changes,
the project's plan for an issue's Change (its budget and check command), and `/drover stop`: the issue's
running Change cancelled through the same function as CancelChange, the delivery marked done and
`forge.change_stopped` said naming who, all in one transaction."""

from __future__ import annotations

import dataclasses

from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.domain import graph
from controlplane.services.change_lifecycle import cancel_change
from controlplane.services.forge_start import running_change
from controlplane.store.events import add_event
from controlplane.store.models import Change, ForgeDelivery, ForgeIssueChange, Project, Run


@dataclasses.dataclass(frozen=True)
class IssueState:
    running: str
    """The issue's Change that has not finished ("": none)."""
    last: tuple[str, str]
    """Its newest Change and that Change's status (("", ""): none yet)."""


@dataclasses.dataclass(frozen=True)
class Plan:
    budget_usd: float
    check_command: str


def issue_state(s: Session, project: str, number: int) -> IssueState:
    last = s.execute(
        select(Change.id, Change.status)
        .join(ForgeIssueChange, ForgeIssueChange.change_id == Change.id)
        .where(ForgeIssueChange.project == project, ForgeIssueChange.issue_number == number)
        .order_by(ForgeIssueChange.created_at.desc(), Change.id.desc())
        .limit(1)
    ).first()
    return IssueState(running_change(s, project, number), (last[0], last[1]) if last else ("", ""))


def plan_of(s: Session, project: str) -> Plan:
    """The project's budget for each issue's Change (0: none) and its check command ("": no check Task)."""
    row = s.get(Project, project)
    assert row is not None
    return Plan(row.forge_budget_usd or 0.0, row.forge_check_command or "")


def stop(s: Session, delivery_id: str, change_id: str, login: str) -> list[Run]:
    """Cancel the issue's Change on `login`'s `/drover stop` and mark the delivery done; the active runs
    whose agents must be told. Nothing when the delivery was already processed."""
    row = s.get(ForgeDelivery, delivery_id)
    if row is None or row.state != "received":
        return []
    change = s.get(Change, change_id)
    if change is None or change.status in graph.TERMINAL_CHANGE:  # it finished since the comment was read
        row.state, row.reason = "done", f"/drover stop: Change {change_id} had already finished"
        return []
    by = f"github:{login}"
    runs = cancel_change(s, change_id, f"cancelled by {by} (/drover stop)", by=by)
    row.state, row.reason = "done", f"/drover stop: cancelled Change {change_id}"
    add_event(
        s,
        "forge.change_stopped",
        change_id=change_id,
        project=row.project,
        number=row.number,
        delivery_id=delivery_id,
        by=by,
    )
    return runs
