"""How an issue's Changes end on the forge (issue 28), the pure part: the one issue comment Drover keeps
current (each round's status, Tasks, spend, pull request, console link, and why a Change ended without
one), the pull request's branch, title and body, what a finished Change asks for next, and how long a
failed forge call waits before it is tried again."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence

from controlplane.domain import forge, graph
from controlplane.domain.preparation import legal_branch

PROGRESS, OPEN_PULL, REPORT = "progress", "open_pull", "report"
MAX_ATTEMPTS = 5
"""Failed forge calls after which a Change's end is given up on (outcome `failed`)."""
MAX_REASON = 500
MAX_GOAL = 20_000
"""The most of the goal put in a pull request's body (GitHub allows 65536 characters)."""


@dataclasses.dataclass(frozen=True)
class TaskLine:
    key: str
    status: str
    runtime: str
    tier: str  # the latest run's tier; "" before any ran
    attempts: int
    cost_micros: int


@dataclasses.dataclass(frozen=True)
class Round:
    """One Change linked to the issue: round 0 opens the pull request, rounds 1.. fix it."""

    number: int
    change_id: str
    status: str
    reason: str
    candidate_state: str
    budget_usd: float
    spent_micros: int
    tasks: tuple[TaskLine, ...]
    pr_number: int = 0
    pr_branch: str = ""
    outcome: str = ""
    outcome_reason: str = ""


def next_step(status: str, candidate_state: str, outcome: str) -> str:
    """What a round-0 Change asks for: OPEN_PULL once it succeeded with a composed candidate and no pull
    request is recorded, REPORT once it ended any other way and that is not yet said, else PROGRESS (keep
    the comment current). A Change reported stopped on its budget and then raised may still succeed."""
    if outcome == "" or (outcome == "reported" and status == "succeeded"):
        if status == "succeeded" and candidate_state == "composed":
            return OPEN_PULL
        if status in graph.TERMINAL_CHANGE and outcome == "":
            return REPORT
    return PROGRESS


def retry_after(failures: int) -> float:
    """Seconds to wait after the `failures`-th failed forge call: 2, 4, 8, 16, then at most 60."""
    return float(min(2 ** max(failures, 1), 60))


def may_try(failures: int, last_failure: dt.datetime | None, now: dt.datetime) -> bool:
    """Whether the wait after the last failed call is over (a naive time is UTC, as the store keeps it)."""
    if last_failure is None or failures < 1:
        return True
    last = last_failure if last_failure.tzinfo is not None else last_failure.replace(tzinfo=dt.UTC)
    return (now - last).total_seconds() >= retry_after(failures)


def branch_name(template: str, number: int, change_id: str, title: str) -> str:
    """The pull request's branch from the project's template ({number}, {change}, {slug}: rendered as
    controlplane.domain.forge renders it); ValueError naming the template when it gives no branch name."""
    try:
        name = forge.issue_branch(template, number, change_id, title)
    except (KeyError, IndexError, ValueError):
        name = template
    if "{" in name or "}" in name or not legal_branch(name):
        raise ValueError(f"forge_branch_template {template!r} gives {name!r}, which is not a git branch name")
    return name


def money(micros: int) -> str:
    return f"${micros / 1_000_000:.4f}"


def _budget(r: Round) -> str:
    spent = f"Spent {money(r.spent_micros)}"
    return spent + (f" of a ${r.budget_usd:.2f} budget." if r.budget_usd > 0 else " (no budget set).")


def task_table(tasks: Sequence[TaskLine]) -> list[str]:
    lines = ["| Task | Status | Runtime | Tier | Attempts | Cost |", "| --- | --- | --- | --- | --- | --- |"]
    for t in tasks:
        tier = t.tier or "-"
        lines.append(f"| `{t.key}` | {t.status} | {t.runtime} | {tier} | {t.attempts} | {money(t.cost_micros)} |")
    return lines


def ending(r: Round) -> str:
    """Why a Change ended without a pull request, and what would go on from there."""
    reason = (r.reason or r.outcome_reason or "no reason recorded")[:MAX_REASON]
    retry = "Comment `/drover retry` to start this issue again as a new Change."
    if r.status == "budget_blocked":
        return (
            f"Stopped at a limit: {reason}. Raising its budget above ${r.budget_usd:.2f} (`drover raise-budget "
            f"{r.change_id} <usd>`, the API's RaiseBudget) gives the stopped Tasks fresh attempts and lets Change "
            f"{r.change_id} go on from where it stopped; or comment `/drover retry` to start this issue again as "
            "a new Change."
        )
    if r.status == "cancelled":
        return f"Cancelled: {reason}. {retry}"
    if r.status == "succeeded":
        return f"Succeeded without changes to the repository, so there is no pull request to open. {retry}"
    return f"Failed: {reason}. {retry}"


def round_section(r: Round, console_url: str = "") -> list[str]:
    head = "Change" if r.number == 0 else f"Fix round {r.number}: Change"
    lines = [f"**{head} `{r.change_id}`: {r.status}**", "", *task_table(r.tasks), "", _budget(r)]
    if r.pr_number:
        lines.append(f"Pull request #{r.pr_number} from branch `{r.pr_branch}`.")
    elif r.outcome == "failed":
        lines.append(f"Opening the pull request failed: {r.outcome_reason[:MAX_REASON]}")
    elif r.status in graph.TERMINAL_CHANGE and not (r.status == "succeeded" and r.candidate_state == "composed"):
        lines.append(ending(r))
    if console_url:
        lines.append(f"Follow it at {console_url.rstrip('/')}/changes/{r.change_id}")
    return lines


def comment(number: int, rounds: Sequence[Round], console_url: str = "") -> str:
    """The issue's one Drover comment: a section per round, oldest first."""
    ordered = sorted(rounds, key=lambda r: r.number)
    lines = [f"Drover started Change {ordered[0].change_id} for issue #{number}."]
    for r in ordered:
        lines += ["", *round_section(r, console_url)]
    return "\n".join(lines) + "\n"


def pull_title(title: str, number: int) -> str:
    return f"{title.strip() or f'Issue #{number}'}"[:250]


def pull_body(goal: str, criteria: Sequence[str], r: Round, number: int) -> str:
    """The pull request's body: the goal, the Tasks with their runtime, tier, attempts and cost, the total
    spend, the acceptance criteria, and the line that closes the issue when it merges."""
    lines = ["## Goal", "", goal.strip()[:MAX_GOAL], "", "## Tasks", "", *task_table(r.tasks), "", _budget(r)]
    if criteria:
        lines += ["", "## Acceptance criteria", "", *(f"- [ ] {c}" for c in criteria)]
    lines += ["", f"Opened by Drover for Change `{r.change_id}`.", "", f"Fixes #{number}"]
    return "\n".join(lines) + "\n"
