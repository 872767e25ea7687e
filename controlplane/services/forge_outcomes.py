"""How an issue's Changes end on the forge (issue 28), the store's part: the issues whose comment or end
is still to tell, each with its rounds as controlplane.domain.forge_report renders them; what pushing a
candidate needs; and each end recorded with its event in one transaction: the pull request opened, the
failure reported, a failed forge call counted (the fifth gives up), the comment's new digest."""

from __future__ import annotations

import dataclasses
import datetime as dt

from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session

from controlplane.domain import forge_report as report
from controlplane.domain import graph
from controlplane.services.credentials import Sealer, git_secret
from controlplane.services.model_calls import change_spent
from controlplane.store.events import add_event
from controlplane.store.models import Change, Event, ForgeIssueChange, ModelCall, Project, Run, Task

BATCH = 50
RETRY_EVENT = "forge.outcome_retry"


@dataclasses.dataclass(frozen=True)
class IssueState:
    """An issue's linked Changes, read in one transaction; round 0's is `first`."""

    project: str
    number: int
    comment_id: int
    digest: str
    rounds: tuple[report.Round, ...]
    goal: str
    criteria: tuple[str, ...]
    failures: int
    """Failed attempts at telling round 0's end since it last ended."""
    last_failure: dt.datetime | None

    @property
    def first(self) -> report.Round:
        return self.rounds[0]


@dataclasses.dataclass(frozen=True)
class PushInputs:
    repo: str
    base: str
    candidate_branch: str
    candidate_commit: str
    template: str
    token: str = dataclasses.field(repr=False)


def due(s: Session) -> list[IssueState]:
    """Issues with a Change whose end is not yet told, or one reported stopped that has gone on since."""
    telling = or_(
        ForgeIssueChange.outcome == "",
        and_(
            ForgeIssueChange.outcome == "reported",
            or_(
                Change.status.not_in(graph.TERMINAL_CHANGE),
                and_(Change.status == "succeeded", Change.candidate_state == "composed"),
            ),
        ),
    )
    rows = s.execute(
        select(ForgeIssueChange.project, ForgeIssueChange.issue_number)
        .join(Change, Change.id == ForgeIssueChange.change_id)
        .where(telling)
        .group_by(ForgeIssueChange.project, ForgeIssueChange.issue_number)
        .order_by(func.min(ForgeIssueChange.created_at))
        .limit(BATCH)
    ).all()
    return [issue_state(s, project, number) for project, number in rows]


def task_lines(s: Session, change_id: str) -> tuple[report.TaskLine, ...]:
    tasks = list(s.scalars(select(Task).where(Task.change_id == change_id).order_by(Task.position)))
    runs = s.execute(select(Run.task_id, Run.tier).where(Run.change_id == change_id).order_by(Run.created_at)).all()
    costs = dict(
        s.execute(
            select(Run.task_id, func.coalesce(func.sum(ModelCall.cost_micros), 0))
            .join(Run, Run.id == ModelCall.run_id)
            .where(Run.change_id == change_id, ModelCall.state == "settled")
            .group_by(Run.task_id)
        ).all()
    )
    attempts: dict[str, int] = {}
    tiers: dict[str, str] = {}
    for task_id, tier in runs:
        attempts[task_id] = attempts.get(task_id, 0) + 1
        tiers[task_id] = tier or tiers.get(task_id, "")
    return tuple(
        report.TaskLine(
            t.key,
            t.status,
            graph.driver(t.command, t.spec or {}),
            tiers.get(t.id, ""),
            attempts.get(t.id, 0),
            int(costs.get(t.id, 0)),
        )
        for t in tasks
    )


def _round(s: Session, link: ForgeIssueChange, change: Change) -> report.Round:
    return report.Round(
        link.round,
        change.id,
        change.status,
        change.reason,
        change.candidate_state,
        change.budget_usd,
        change_spent(s, change.id),
        task_lines(s, change.id),
        link.pr_number,
        link.pr_branch,
        link.outcome,
        link.outcome_reason,
    )


def issue_state(s: Session, project: str, number: int) -> IssueState:
    rows = s.execute(
        select(ForgeIssueChange, Change)
        .join(Change, Change.id == ForgeIssueChange.change_id)
        .where(ForgeIssueChange.project == project, ForgeIssueChange.issue_number == number)
        .order_by(ForgeIssueChange.round, ForgeIssueChange.created_at)
    ).all()
    # the issue's latest attempt (a `/drover retry` starts a new round 0) and the fix rounds after it
    latest = max((link for link, _ in rows if link.round == 0), key=lambda link: link.created_at, default=rows[0][0])
    kept = [(link, change) for link, change in rows if link is latest or link.created_at > latest.created_at]
    first = kept[0][1]
    # a budget raise starts a new count: failures older than the Change's last end do not count
    since = first.finished_at or first.created_at
    failures = s.execute(
        select(func.count(), func.max(Event.created_at)).where(
            Event.change_id == first.id, Event.kind == RETRY_EVENT, Event.created_at >= since
        )
    ).one()
    comment_id = next((link.comment_id for link, _ in kept if link.comment_id), 0)
    return IssueState(
        project,
        number,
        comment_id,
        next((link.comment_digest for link, _ in kept if link.comment_id == comment_id), ""),
        tuple(_round(s, link, change) for link, change in kept),
        first.goal,
        tuple(str(c) for c in first.criteria or ()),
        int(failures[0] or 0),
        failures[1],
    )


def push_inputs(s: Session, change_id: str, sealer: Sealer | None) -> PushInputs:
    change = s.get(Change, change_id)
    assert change is not None
    project = s.get(Project, change.project)
    assert project is not None
    return PushInputs(
        project.repo,
        project.branch,
        change.candidate_branch,
        change.candidate_commit,
        project.forge_branch_template,
        git_secret(project, sealer)[1],
    )


def _links(s: Session, change_id: str) -> tuple[ForgeIssueChange, list[ForgeIssueChange]]:
    """The Change's link and every link of its issue."""
    link = s.get(ForgeIssueChange, change_id)
    assert link is not None
    issue = (ForgeIssueChange.project == link.project, ForgeIssueChange.issue_number == link.issue_number)
    return link, list(s.scalars(select(ForgeIssueChange).where(*issue)))


def _said(links: list[ForgeIssueChange], comment_id: int, digest: str) -> None:
    for other in links:
        if not other.comment_id or other.comment_id == comment_id:
            other.comment_id, other.comment_digest = comment_id, digest


def record_pull(s: Session, change_id: str, pr_number: int, branch: str, comment_id: int, digest: str) -> None:
    link, links = _links(s, change_id)
    link.pr_number, link.pr_branch, link.outcome, link.outcome_reason = pr_number, branch, "pr_opened", ""
    _said(links, comment_id, digest)
    add_event(
        s, "forge.pull_opened", change_id=change_id, project=link.project, number=link.issue_number,
        pull=pr_number, branch=branch,
    )  # fmt: skip


def record_reported(s: Session, change_id: str, status: str, comment_id: int, digest: str) -> None:
    link, links = _links(s, change_id)
    link.outcome, link.outcome_reason = "reported", status
    _said(links, comment_id, digest)
    add_event(
        s, "forge.change_reported", change_id=change_id, project=link.project, number=link.issue_number,
        status=status,
    )  # fmt: skip


def record_comment(s: Session, change_id: str, comment_id: int, digest: str) -> None:
    """The issue comment now says what `digest` hashes."""
    link, links = _links(s, change_id)
    _said(links, comment_id, digest)
    add_event(s, "forge.comment_edited", change_id=change_id, number=link.issue_number, comment_id=comment_id)


def reopen(s: Session, change_id: str) -> None:
    """A Change reported stopped has gone on (its budget raised): its end is to tell again."""
    link, _ = _links(s, change_id)
    if link.outcome == "reported":
        link.outcome, link.outcome_reason = "", ""
        add_event(s, "forge.change_resumed", change_id=change_id, number=link.issue_number)


def record_failure(s: Session, change_id: str, reason: str, failures: int) -> None:
    """A forge call telling the Change's end failed (the `failures`-th time): tried again later, or, at
    forge_report.MAX_ATTEMPTS, given up with outcome `failed` and why."""
    link, _ = _links(s, change_id)
    reason = reason[:2000]
    add_event(s, RETRY_EVENT, change_id=change_id, number=link.issue_number, attempt=failures, reason=reason)
    if failures >= report.MAX_ATTEMPTS:
        link.outcome, link.outcome_reason = "failed", reason
        add_event(s, "forge.outcome_failed", change_id=change_id, number=link.issue_number, reason=reason)
