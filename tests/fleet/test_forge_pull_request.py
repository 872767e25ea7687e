"""A labelled issue ends as a pull request (issue 28's finish), whole-system: a real control plane with its
HTTP listener, a real agentd, the scripted fake Anthropic model, and drover.testing.fake_github holding
the project's repository (cloned and pushed over git's smart HTTP with the project's git token) and its
issues. Labelling the issue gives a Change whose Task writes a file; the candidate is pushed to the
branch the project's template names and a pull request opened whose body holds the Tasks, the spend and
`Fixes #N`; the issue's one comment shows the final state. A Change whose Task gives up twice stops, and
the comment says why and what a raised budget or `/drover retry` would do; no pull request is opened."""

from __future__ import annotations

import contextlib
import itertools
import pathlib
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography.fernet import Fernet
from githubkit import GitHub, TokenAuthStrategy

from drover.testing import fake_anthropic as fake
from drover.testing.fake_github import FakeGitHub
from tests.conftest import API_KEY, ControlPlane, Fleet, wait_for
from tests.controlplane.web.test_console_projects_and_tokens import console

ALICE = "ghp_alice"  # the issue's author, who labels it
BOT = "github_pat_drover_bot"  # Drover's credential on the forge's API
GIT = "github_pat_drover_git"  # the project's git credential, for clone and push
SCRIPT = [
    fake.tool_use("write_file", {"path": "save.py", "content": "def save():\n    return 'once'\n"}),
    fake.tool_use("complete_task", {"summary": "saving twice no longer crashes"}),
]


@contextlib.contextmanager
def linked(
    fleet: Fleet, model: fake.FakeAnthropic, tmp_path: pathlib.Path
) -> Iterator[tuple[ControlPlane, FakeGitHub, GitHub[Any]]]:
    fleet.plane.extra_env["DROVER_CREDENTIAL_KEY"] = Fernet.generate_key().decode()
    fleet.plane.extra_env.update(ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=API_KEY)
    with FakeGitHub(tmp_path / "forge") as gh:
        gh.create_repo("octo/app", {"README.md": "# app\n", "app.py": "print('hello')\n"})
        gh.add_token(ALICE, "alice")
        gh.add_token(BOT, "drover-bot")
        gh.add_token(GIT, "drover-bot")
        plane = fleet.start_plane("--http-listen", "127.0.0.1:0")
        token_file = tmp_path / "git.token"
        token_file.write_text(GIT + "\n")
        repo = ("--repo", gh.clone_url("octo/app"), "--branch", "main", "--git-token-file", str(token_file))
        forge = ("--forge", "github", "--forge-repo", "octo/app", "--forge-api-url", gh.base_url)
        plane.cli("project", "add", "web", *repo, *forge)  # the repository is read with the token
        with plane.client() as admin:
            admin.projects.set_forge_credential("web", "token", BOT)
            secret = admin.projects.rotate_webhook_secret("web").secret
        gh.set_webhook(console(plane) + "/hooks/github", secret)
        fleet.agent("worker")
        yield plane, gh, GitHub(TokenAuthStrategy(ALICE), base_url=gh.base_url)


def label(api: GitHub[Any], title: str, body: str) -> int:
    issue = api.rest.issues.create("octo", "app", title=title, body=body).parsed_data
    api.rest.issues.add_labels("octo", "app", issue.number, data={"labels": ["drover"]})
    return issue.number


def comment(api: GitHub[Any], number: int) -> str:
    """The issue's one comment, Drover's ("" before it is posted)."""
    said = api.rest.issues.list_comments("octo", "app", number).parsed_data
    assert len(said) <= 1 and all(c.user.login == "drover-bot" for c in said)
    return said[0].body or "" if said else ""


def pulls(api: GitHub[Any]) -> list[Any]:
    return list(api.rest.pulls.list("octo", "app", state="all").parsed_data)


def events(plane: ControlPlane, kind: str) -> list[tuple[str, dict[str, Any]]]:
    """Each event of `kind`: its Change and its data."""
    with plane.client() as admin:
        return [(e.change_id, dict(e.data)) for e in admin.list_events(kind=kind, limit=1000) if e.kind == kind]


def git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


def test_a_labelled_issue_ends_as_a_pull_request_and_its_comment_shows_the_end(
    fleet: Fleet, model: fake.FakeAnthropic, tmp_path: pathlib.Path
) -> None:
    model.extend(SCRIPT)
    with linked(fleet, model, tmp_path) as (plane, gh, api):
        number = label(api, "Crash on save", "Saving twice crashes.")
        (pull,) = wait_for(lambda: pulls(api), 120, what="the pull request")
        with plane.client() as admin:
            (change,) = admin.list_changes("web")
            spend = admin.get_spend(change.id)
            final = admin.get_change(change.id)
        assert final.status == "succeeded" and spend.spent_micros > 0
        branch = f"drover/issue-{number}"  # the default forge_branch_template
        assert (pull.title, pull.head.ref, pull.base.ref, pull.user.login) == (
            "Crash on save", branch, "main", "drover-bot"
        )  # fmt: skip
        body = pull.body or ""
        assert body.startswith(f"## Goal\n\nCrash on save (issue #{number})\n\nSaving twice crashes.\n")
        cost = f"${spend.spent_micros / 1_000_000:.4f}"
        assert f"| `implement` | succeeded | harness | sonnet | 1 | {cost} |" in body
        assert f"Spent {cost} (no budget set)." in body and body.endswith(f"\nFixes #{number}\n")

        clone = tmp_path / "clone"
        git("clone", "-q", "-b", branch, gh.clone_url("octo/app", ALICE), str(clone))
        assert (clone / "save.py").read_text() == "def save():\n    return 'once'\n"
        assert git("-C", str(clone), "rev-parse", "HEAD").strip() == final.candidate_commit

        said = wait_for(lambda: "Pull request #" in (text := comment(api, number)) and text, 30, what="the comment")
        assert f"**Change `{change.id}`: succeeded**" in said
        assert f"| `implement` | succeeded | harness | sonnet | 1 | {cost} |" in said
        assert f"Pull request #{pull.number} from branch `{branch}`." in said
        ((changed, opened),) = events(plane, "forge.pull_opened")
        assert (changed, opened["pull"], opened["branch"], opened["number"]) == (change.id, pull.number, branch, number)
        assert events(plane, "forge.outcome_retry") == [] and events(plane, "forge.change_reported") == []


def test_a_change_that_stops_says_why_on_the_issue_and_opens_no_pull_request(
    fleet: Fleet, model: fake.FakeAnthropic, tmp_path: pathlib.Path
) -> None:
    model.extend(
        [
            fake.tool_use("fail_task", {"reason": "cannot reproduce the crash"}),
            fake.tool_use("fail_task", {"reason": "still cannot reproduce it"}),
        ]
    )
    with linked(fleet, model, tmp_path) as (plane, _gh, api):
        number = label(api, "Crash on load", "Loading crashes sometimes.")
        said = wait_for(lambda: "Stopped at a limit" in (text := comment(api, number)) and text, 120, what="the end")
        with plane.client() as admin:
            (change,) = admin.list_changes("web")
            final = admin.get_change(change.id)
        assert final.status == "budget_blocked"
        assert f"**Change `{change.id}`: budget_blocked**" in said
        assert "| `implement` | blocked | harness | sonnet | 2 |" in said
        assert "Stopped at a limit: max_attempts_per_tier." in said
        assert f"`drover raise-budget {change.id} <usd>`" in said and "`/drover retry`" in said
        assert pulls(api) == [] and events(plane, "forge.pull_opened") == []
        ((changed, reported),) = events(plane, "forge.change_reported")
        assert (changed, reported["number"], reported["status"]) == (change.id, number, "budget_blocked")


def test_a_pull_request_already_open_from_the_branch_is_recorded_not_doubled(
    fleet: Fleet, model: fake.FakeAnthropic, tmp_path: pathlib.Path
) -> None:
    """As after a crash between opening the pull request and recording it: the forge answers 422."""
    model.extend(SCRIPT)
    with linked(fleet, model, tmp_path) as (plane, gh, api):
        number = api.rest.issues.create("octo", "app", title="Crash on save").parsed_data.number
        branch, work = f"drover/issue-{number}", tmp_path / "alice"
        git("clone", "-q", gh.clone_url("octo/app", ALICE), str(work))
        (work / "draft.txt").write_text("a first try\n")
        git("-C", str(work), "checkout", "-q", "-b", branch)
        git("-C", str(work), "add", ".")
        git("-C", str(work), "-c", "user.name=a", "-c", "user.email=a@x", "commit", "-q", "-m", "draft")
        git("-C", str(work), "push", "-q", "origin", branch)
        data = {"title": "Draft", "head": branch, "base": "main"}
        early = api.rest.pulls.create("octo", "app", data=data).parsed_data
        api.rest.issues.add_labels("octo", "app", number, data={"labels": ["drover"]})

        ((changed, opened),) = wait_for(lambda: events(plane, "forge.pull_opened"), 120, what="the pull request")
        with plane.client() as admin:
            final = admin.get_change(changed)
        assert (opened["pull"], opened["branch"]) == (early.number, branch)
        assert [p.number for p in pulls(api)] == [early.number]  # found, not a second one
        assert final.status == "succeeded"
        clone = tmp_path / "clone"
        git("clone", "-q", "-b", branch, gh.clone_url("octo/app", ALICE), str(clone))
        assert git("-C", str(clone), "rev-parse", "HEAD").strip() == final.candidate_commit  # the candidate, pushed
        said = wait_for(lambda: "Pull request #" in (text := comment(api, number)) and text, 30, what="the comment")
        assert f"Pull request #{early.number} from branch `{branch}`." in said


@pytest.mark.timeout(240)  # the Change, then five tries 2, 4, 8 and 16 s apart
def test_a_forge_that_keeps_refusing_is_tried_five_times_then_given_up(
    fleet: Fleet, model: fake.FakeAnthropic, tmp_path: pathlib.Path
) -> None:
    model.extend(SCRIPT)
    with linked(fleet, model, tmp_path) as (plane, gh, api):
        number = label(api, "Crash on save", "Saving twice crashes.")
        wait_for(lambda: comment(api, number), 30, what="the first comment")
        gh.revoke(BOT)  # the forge's API refuses Drover from now on; git still takes the project's token
        ((changed, failed),) = wait_for(lambda: events(plane, "forge.outcome_failed"), 120, what="giving up")
        with plane.client() as admin:
            retries = list(admin.list_events(kind="forge.outcome_retry", limit=100))
        assert failed["reason"] == f"reading issue #{number} on octo/app: HTTP 401" and failed["number"] == number
        assert [(e.change_id, e.data["attempt"], e.data["reason"]) for e in retries] == [
            (changed, n, failed["reason"]) for n in range(1, 6)
        ]
        gaps = [(b.created_at - a.created_at).total_seconds() for a, b in itertools.pairwise(retries)]
        assert all(gap >= wait - 0.5 for gap, wait in zip(gaps, (2, 4, 8, 16), strict=True)), gaps
        assert pulls(api) == [] and events(plane, "forge.pull_opened") == []
        assert BOT not in str([e.data for e in retries]) and GIT not in str(failed)
