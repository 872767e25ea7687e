"""How an issue's Changes end on the forge (issue 28), the pure part: the issue comment, the pull
request's branch, title and body, what a Change asks for next, and the wait after a failed call."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pygit2
import pytest

from controlplane.domain import forge_report as report
from controlplane.domain.preparation import legal_branch, slug

TASKS = (
    report.TaskLine("implement", "succeeded", "harness", "sonnet", 2, 12_345),
    report.TaskLine("check", "succeeded", "command", "", 1, 0),
)
ROUND = report.Round(0, "chg_1", "succeeded", "", "composed", 5.0, 12_345, TASKS)


@pytest.mark.parametrize(
    ("status", "candidate", "outcome", "step"),
    [
        ("running", "", "", report.PROGRESS),
        ("open", "", "", report.PROGRESS),
        ("running", "pending", "", report.PROGRESS),  # composing: not ended yet
        ("succeeded", "composed", "", report.OPEN_PULL),
        ("succeeded", "composed", "reported", report.OPEN_PULL),  # stopped on its budget, raised, then done
        ("succeeded", "", "", report.REPORT),  # no ChangeSet: nothing to open a pull request for
        ("failed", "failed", "", report.REPORT),  # a candidate conflict
        ("failed", "", "", report.REPORT),
        ("cancelled", "", "", report.REPORT),
        ("budget_blocked", "", "", report.REPORT),
        ("budget_blocked", "", "reported", report.PROGRESS),  # said once
        ("succeeded", "composed", "pr_opened", report.PROGRESS),
        ("succeeded", "composed", "failed", report.PROGRESS),  # given up: nothing more is tried
    ],
)
def test_what_a_change_asks_for_next(status: str, candidate: str, outcome: str, step: str) -> None:
    assert report.next_step(status, candidate, outcome) == step


def test_a_failed_call_waits_longer_each_time_and_at_most_a_minute() -> None:
    assert [report.retry_after(n) for n in (1, 2, 3, 4, 5, 9)] == [2, 4, 8, 16, 32, 60]


def test_a_failed_call_is_tried_again_once_its_wait_is_over_naive_times_being_utc() -> None:
    now = dt.datetime(2026, 12, 3, 12, 0, 10, tzinfo=dt.UTC)
    assert report.may_try(0, None, now)
    assert not report.may_try(3, dt.datetime(2026, 12, 3, 12, 0, 3), now)  # 7 s of 8, naive as SQLite gives it
    assert report.may_try(3, dt.datetime(2026, 12, 3, 12, 0, 2), now)
    assert not report.may_try(1, now - dt.timedelta(seconds=1), now) and report.may_try(
        1, now - dt.timedelta(seconds=2), now
    )


@pytest.mark.parametrize(
    ("template", "branch"),
    [
        ("drover/issue-{number}", "drover/issue-7"),
        ("", "drover/issue-7"),  # none set: the default
        ("drover/{change}", "drover/chg_1"),
        ("fix/{number}-{slug}", "fix/7-crash-on-save-when-the-disk-is-full"),
        ("bot/{slug}", "bot/crash-on-save-when-the-disk-is-full"),
    ],
)
def test_the_branch_comes_from_the_template(template: str, branch: str) -> None:
    got = report.branch_name(template, 7, "chg_1", "Crash on save: when the disk is FULL!")
    assert got == branch and pygit2.reference_is_valid_name(f"refs/heads/{got}")


@pytest.mark.parametrize(
    "template", ["drover/{number}/", "a..b-{number}", "x/{nope}", "{number}.lock", "a b{number}", "x/.{slug}"]
)
def test_a_template_that_gives_no_branch_name_is_refused_naming_it(template: str) -> None:
    with pytest.raises(ValueError, match="forge_branch_template"):
        report.branch_name(template, 7, "chg_1", "Crash")


@pytest.mark.parametrize(
    "name", ["a", "drover/issue-1", "a/b.c", "x@y", "a..b", "a/", ".a", "a/.b", "a.lock", "a b", "a~1", "a^", "a:b",
             "a?", "a*", "a[b", "a\\b", "a//b", "a@{1}", "a.", "/a", "a\x7f", "é/ok"],
)  # fmt: skip
def test_branch_names_are_checked_as_git_checks_them(name: str) -> None:
    assert legal_branch(name) == pygit2.reference_is_valid_name(f"refs/heads/{name}")


def test_a_lone_at_sign_is_no_branch_name() -> None:
    assert not legal_branch("@")  # git check-ref-format --branch refuses it: it means HEAD


def test_a_slug_is_short_lower_case_and_never_empty() -> None:
    assert slug("Crash on save (2x)") == "crash-on-save-2x"
    assert slug("!!!") == "change"
    assert len(slug("word " * 40)) <= 40 and not slug("word " * 40).endswith("-")


def test_the_comment_shows_each_task_the_spend_the_pull_request_and_a_console_link() -> None:
    opened = dataclasses.replace(ROUND, pr_number=12, pr_branch="drover/issue-7", outcome="pr_opened")
    text = report.comment(7, [opened], "https://drover.example/")
    assert text == (
        "Drover started Change chg_1 for issue #7.\n\n"
        "**Change `chg_1`: succeeded**\n\n"
        "| Task | Status | Runtime | Tier | Attempts | Cost |\n"
        "| --- | --- | --- | --- | --- | --- |\n"
        "| `implement` | succeeded | harness | sonnet | 2 | $0.0123 |\n"
        "| `check` | succeeded | command | - | 1 | $0.0000 |\n\n"
        "Spent $0.0123 of a $5.00 budget.\n"
        "Pull request #12 from branch `drover/issue-7`.\n"
        "Follow it at https://drover.example/changes/chg_1\n"
    )
    assert "Follow it" not in report.comment(7, [opened])  # no console URL: no link


def test_the_comment_shows_each_round_oldest_first() -> None:
    fix = report.Round(1, "chg_2", "running", "", "", 2.0, 0, (report.TaskLine("fix", "running", "harness", "", 1, 0),))
    text = report.comment(7, [fix, dataclasses.replace(ROUND, pr_number=12, pr_branch="b", outcome="pr_opened")])
    assert text.index("**Change `chg_1`: succeeded**") < text.index("**Fix round 1: Change `chg_2`: running**")
    assert "| `fix` | running | harness | - | 1 | $0.0000 |" in text


def test_a_running_change_says_only_its_progress() -> None:
    running = dataclasses.replace(ROUND, status="running", candidate_state="", budget_usd=0.0)
    text = report.comment(7, [running])
    assert "**Change `chg_1`: running**" in text and "Spent $0.0123 (no budget set)." in text
    assert "retry" not in text and "Pull request" not in text


@pytest.mark.parametrize(
    ("status", "reason", "says"),
    [
        ("failed", "task implement failed: run_failed", "Failed: task implement failed: run_failed. Comment "),
        ("failed", "candidate_conflict: a.py (cs_1)", "Failed: candidate_conflict: a.py (cs_1)."),
        ("cancelled", "cancelled by user", "Cancelled: cancelled by user. Comment `/drover retry` to start"),
        ("succeeded", "", "Succeeded without changes to the repository, so there is no pull request to open."),
    ],
)
def test_a_change_that_ends_without_a_pull_request_says_why_and_what_a_retry_does(
    status: str, reason: str, says: str
) -> None:
    ended = dataclasses.replace(ROUND, status=status, reason=reason, candidate_state="", outcome="reported")
    text = report.comment(7, [ended])
    assert says in text and "`/drover retry` to start this issue again as a new Change." in text


def test_a_budget_stop_says_how_raising_the_budget_goes_on() -> None:
    stopped = dataclasses.replace(ROUND, status="budget_blocked", reason="change_budget", outcome="")
    text = report.comment(7, [stopped])
    assert "Stopped at a limit: change_budget. Raising its budget above $5.00" in text
    assert "(`drover raise-budget chg_1 <usd>`, the API's RaiseBudget)" in text
    assert "gives the stopped Tasks fresh attempts and lets Change chg_1 go on from where it stopped" in text
    assert "`/drover retry` to start this issue again as a new Change." in text


def test_opening_the_pull_request_given_up_says_why() -> None:
    given_up = dataclasses.replace(ROUND, outcome="failed", outcome_reason="opening a pull request: HTTP 403")
    assert "Opening the pull request failed: opening a pull request: HTTP 403" in report.comment(7, [given_up])


def test_the_pull_request_body_holds_the_goal_tasks_spend_criteria_and_closes_the_issue() -> None:
    body = report.pull_body("Crash on save (issue #7)\n\nSaving twice crashes.", ["saves twice", "no crash"], ROUND, 7)
    assert body.startswith("## Goal\n\nCrash on save (issue #7)\n\nSaving twice crashes.\n\n## Tasks\n")
    assert "| `implement` | succeeded | harness | sonnet | 2 | $0.0123 |" in body
    assert "Spent $0.0123 of a $5.00 budget." in body
    assert "## Acceptance criteria\n\n- [ ] saves twice\n- [ ] no crash\n" in body
    assert body.endswith("\nFixes #7\n")
    assert "Acceptance criteria" not in report.pull_body("g", [], ROUND, 7)
    assert len(report.pull_body("x" * 70_000, [], ROUND, 7)) < 65_536


def test_the_pull_request_title_is_the_issues() -> None:
    assert report.pull_title("  Crash on save ", 7) == "Crash on save"
    assert report.pull_title("", 7) == "Issue #7"
