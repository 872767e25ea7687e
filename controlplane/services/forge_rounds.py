"""Fix rounds on a pull request Drover opened (issue 28), the store's part: a kept delivery's fields; the
pull request as its links in `forge_issue_changes` say (controlplane.domain.forge_rounds decides on it);
a round's Change submitted and linked (round n, the pull request and its branch) with the delivery done
and `forge.round_started`; max_fix_rounds said once (`forge.rounds_exhausted`); the pull request closed
(every unfinished Change of it cancelled, `forge.pull_closed`); and a finished round's end told: its
candidate on the pull request's branch (`forge.round_pushed`), the pull request told (`forge.round_ended`),
a failed try counted (`forge.round_retry`, tried again later) or given up (`forge.round_failed`, outcome
`failed`). Each in one transaction."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from controlplane.domain import forge_rounds as rounds
from controlplane.domain import graph
from controlplane.domain.forge_rounds import Pull, stop_reason
from controlplane.services import credentials
from controlplane.services.change_lifecycle import cancel_change, submit_change
from controlplane.services.credentials import Sealer
from controlplane.services.forge_start import finish, running_change
from controlplane.services.model_calls import change_spent
from controlplane.store.events import add_event
from controlplane.store.models import Change, Event, ForgeDelivery, ForgeIssueChange, Project, Run, utcnow


@dataclasses.dataclass(frozen=True)
class Delivery:
    delivery_id: str
    project: str
    event: str
    action: str
    number: int
    head_sha: str
    conclusion: str
    review_id: int
    sender: str


def delivery(s: Session, delivery_id: str) -> Delivery | None:
    """The delivery while it is still `received`."""
    d = s.get(ForgeDelivery, delivery_id)
    if d is None or d.state != "received":
        return None
    review = d.comment_id if d.event == "pull_request_review" else 0
    return Delivery(d.delivery_id, d.project, d.event, d.action, d.number, d.head_sha, d.conclusion, review, d.sender)


def pull_numbers(s: Session, project: str) -> list[int]:
    """The pull requests Drover opened for the project's issues (open or not: the forge says which)."""
    found = s.scalars(
        select(ForgeIssueChange.pr_number)
        .where(ForgeIssueChange.project == project, ForgeIssueChange.pr_number > 0)
        .distinct()
        .order_by(ForgeIssueChange.pr_number.desc())
    )
    return list(found)


def _links(s: Session, project: str, pr_number: int) -> list[ForgeIssueChange]:
    return list(
        s.scalars(
            select(ForgeIssueChange)
            .where(ForgeIssueChange.project == project, ForgeIssueChange.pr_number == pr_number)
            .order_by(ForgeIssueChange.round, ForgeIssueChange.created_at)
        )
    )


@dataclasses.dataclass(frozen=True)
class PullState:
    pull: Pull
    since: dt.datetime
    """When its newest round (or the pull request's Change) was linked: line comments after it are new."""
    budget_usd: float


def pull_state(s: Session, project: str, pr_number: int) -> PullState | None:
    """The pull request `pr_number` when Drover opened it for one of the project's issues, else None."""
    links = _links(s, project, pr_number) if pr_number else []
    row = s.get(Project, project)
    if not links or row is None:
        return None
    said = s.scalar(
        select(func.count())
        .select_from(Event)
        .where(Event.kind == "forge.rounds_exhausted", Event.change_id.in_([link.change_id for link in links]))
    )
    issue = links[0].issue_number
    first = s.get(Change, links[0].change_id)  # round 0: the issue's Change
    budget = first.budget_usd if first is not None else 0.0
    pull = Pull(
        issue_number=issue,
        pr_number=pr_number,
        pr_branch=next((link.pr_branch for link in links if link.pr_branch), ""),
        rounds_done=sum(1 for link in links if link.round >= 1),
        running_change=running_change(s, project, issue),
        max_fix_rounds=row.max_fix_rounds,
        exhausted_said=bool(said),
        budget_usd=budget,
        spent_usd=sum(change_spent(s, link.change_id) for link in links) / 1_000_000,
    )
    since = max(link.created_at for link in links)
    since = since if since.tzinfo else since.replace(tzinfo=dt.UTC)  # SQLite keeps no zone: stored as UTC
    # the rounds share the issue's budget: each gets what is left of it (none set: the project's per issue)
    return PullState(pull, since, max(budget - pull.spent_usd, 0.01) if budget > 0 else row.forge_budget_usd)


def start_round(s: Session, delivery_id: str, spec: graph.ChangeSpec, pull: Pull, number: int) -> str:
    """Submit round `number`'s Change, link it to the pull request and mark the delivery done; "" (the
    delivery done without a Change) when it was processed already or the pull request moved on meanwhile."""
    row = s.get(ForgeDelivery, delivery_id)
    if row is None or row.state != "received":
        return ""
    now = pull_state(s, row.project, pull.pr_number)
    if now is None or now.pull.running_change or now.pull.rounds_done != number - 1:
        row.state, row.reason = "done", "the pull request's rounds moved on meanwhile"
        return ""
    change_id = submit_change(s, spec, f"github:{row.sender}")
    s.add(
        ForgeIssueChange(
            change_id=change_id,
            project=row.project,
            issue_number=pull.issue_number,
            delivery_id=delivery_id,
            comment_id=0,
            created_at=utcnow(),
            round=number,
            pr_number=pull.pr_number,
            pr_branch=pull.pr_branch,
        )
    )
    row.state, row.reason = "done", ""
    add_event(
        s,
        "forge.round_started",
        change_id=change_id,
        project=row.project,
        number=pull.issue_number,
        pr_number=pull.pr_number,
        round=number,
        trigger=row.event,
        delivery_id=delivery_id,
    )
    return change_id


def record_exhausted(s: Session, delivery_id: str, pull: Pull) -> bool:
    """Say max_fix_rounds stopped the pull request's rounds, once: False when said already."""
    row = s.get(ForgeDelivery, delivery_id)
    now = pull_state(s, row.project, pull.pr_number) if row is not None and row.state == "received" else None
    if row is None or now is None or now.pull.exhausted_said:
        finish(s, delivery_id, "done", "max_fix_rounds reached; said already")
        return False
    newest = _links(s, row.project, pull.pr_number)[-1]
    row.state, row.reason = "done", stop_reason(now.pull) or f"max_fix_rounds ({pull.max_fix_rounds}) reached"
    add_event(
        s,
        "forge.rounds_exhausted",
        change_id=newest.change_id,
        project=row.project,
        number=pull.issue_number,
        pr_number=pull.pr_number,
        max_fix_rounds=pull.max_fix_rounds,
        budget_usd=now.pull.budget_usd,
        spent_usd=now.pull.spent_usd,
        delivery_id=delivery_id,
    )
    return True


def close_pull(s: Session, delivery_id: str, pr_number: int) -> list[tuple[str, str]]:
    """Cancel every unfinished Change linked to the closed pull request (the cancel service releases their
    claims); answers the (run, agent) pairs whose agents must be told."""
    row = s.get(ForgeDelivery, delivery_id)
    if row is None or row.state != "received":
        return []
    reason = f"pull request #{pr_number} closed"
    cancelled: list[str] = []
    runs: list[Run] = []
    for link in _links(s, row.project, pr_number):
        change = s.get(Change, link.change_id)
        if change is not None and change.status not in graph.TERMINAL_CHANGE:
            runs += cancel_change(s, change.id, reason, by="forge")
            cancelled.append(change.id)
    row.state, row.reason = "done", reason
    add_event(s, "forge.pull_closed", project=row.project, pr_number=pr_number, cancelled=cancelled)
    return [(r.id, r.agent) for r in runs]


@dataclasses.dataclass(frozen=True)
class Finished:
    """A fix round whose Change has ended and whose end is not told yet."""

    change_id: str
    project: str
    round: int
    pr_number: int
    pr_branch: str
    status: str
    reason: str
    candidate_branch: str
    candidate_commit: str
    cost_micros: int
    failures: int = 0
    """Failed tries at telling its end so far (`forge.round_retry`), the last one at `last_failure`."""
    last_failure: dt.datetime | None = None
    pushed: bool = False
    """Its candidate is on the pull request's branch already (`forge.round_pushed`): only the comment is left."""


RETRY_EVENT = "forge.round_retry"


def _told(s: Session, change_id: str) -> tuple[int, dt.datetime | None, bool]:
    """The round's failed tries, when the last one was, and whether its push is done."""
    failures, last = s.execute(
        select(func.count(), func.max(Event.created_at)).where(Event.change_id == change_id, Event.kind == RETRY_EVENT)
    ).one()
    pushed = s.scalar(
        select(func.count()).select_from(Event).where(Event.change_id == change_id, Event.kind == "forge.round_pushed")
    )
    return int(failures or 0), last, bool(pushed)


def finished_rounds(s: Session) -> list[Finished]:
    rows = s.execute(
        select(ForgeIssueChange, Change)
        .join(Change, Change.id == ForgeIssueChange.change_id)
        .where(ForgeIssueChange.round >= 1, ForgeIssueChange.outcome == "")
        .where(Change.status.in_(graph.TERMINAL_CHANGE))
        .order_by(ForgeIssueChange.created_at)
        .limit(20)
    ).all()
    return [
        Finished(
            link.change_id,
            link.project,
            link.round,
            link.pr_number,
            link.pr_branch,
            change.status,
            change.reason,
            change.candidate_branch,
            change.candidate_commit,
            change_spent(s, change.id),
            *_told(s, change.id),
        )
        for link, change in rows
    ]


def push_inputs(s: Session, project: str, sealer: Sealer) -> tuple[str, str]:
    """The project's repository and git secret (FailedPrecondition when the credential does not open)."""
    row = s.get(Project, project)
    assert row is not None
    return row.repo, credentials.git_secret(row, sealer)[1]


def record_push(s: Session, change_id: str, commit: str) -> None:
    """The round's candidate is on the pull request's branch (its comment may still fail): a retry only
    posts the comment."""
    link = s.get(ForgeIssueChange, change_id)
    if link is None or link.outcome or _told(s, change_id)[2]:
        return
    add_event(
        s,
        "forge.round_pushed",
        change_id=change_id,
        project=link.project,
        number=link.issue_number,
        pr_number=link.pr_number,
        round=link.round,
        commit=commit,
    )


def record_end(s: Session, change_id: str, outcome: str, reason: str = "", commit: str = "") -> None:
    """A round's end told on the pull request: pushed (its candidate is on the branch) or reported (why not)."""
    link = s.get(ForgeIssueChange, change_id)
    if link is None or link.outcome:
        return
    link.outcome, link.outcome_reason = outcome, reason[:2000]
    add_event(
        s,
        "forge.round_ended",
        change_id=change_id,
        project=link.project,
        number=link.issue_number,
        pr_number=link.pr_number,
        round=link.round,
        outcome=outcome,
        commit=commit,
        reason=link.outcome_reason,
    )


def record_failure(s: Session, change_id: str, reason: str, passing: bool) -> str:
    """A try at telling the round's end failed: counted (`forge.round_retry`, tried again after
    forge_report.retry_after), or, on a refusal for good or the MAX_TELL_ATTEMPTS-th failure, given up with
    outcome `failed` and why (`forge.round_failed`). Answers forge_rounds.RETRY or GIVE_UP."""
    link = s.get(ForgeIssueChange, change_id)
    if link is None or link.outcome:
        return rounds.GIVE_UP
    failures, _, pushed = _told(s, change_id)
    attempt, reason = failures + 1, reason[:2000]
    step = rounds.after_failure(passing, attempt)
    where: dict[str, Any] = {
        "project": link.project,
        "number": link.issue_number,
        "pr_number": link.pr_number,
        "round": link.round,
    }
    if step == rounds.RETRY:
        add_event(s, RETRY_EVENT, change_id=change_id, **where, attempt=attempt, reason=reason)
        return step
    link.outcome, link.outcome_reason = "failed", reason
    add_event(s, "forge.round_failed", change_id=change_id, **where, attempts=attempt, pushed=pushed, reason=reason)
    return step
