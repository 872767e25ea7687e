"""Fix rounds on a pull request Drover opened (issue 28), whole-system: a real control plane with its HTTP
listener, a real agentd, the scripted fake model, and drover.testing.fake_github as the forge, CI and
reviewer; project web's repository is the fake's (git over HTTP with a token).

A labelled issue's Change runs; the test then opens its pull request the way the finish step will (the
candidate pushed to drover/issue-N, the pull request created by Drover's bot, the link row given the pull
request). A failing check on the pull request's head starts a fix round whose packet holds the check's
log; the round's commit lands on the pull request's branch and the pull request says so with its cost;
CI passing on the new head starts nothing. With max_fix_rounds=1, the next trigger says on the pull
request, once, that max_fix_rounds stopped it. A review requesting changes on a line starts a round with
that comment; closing the pull request cancels that round while it runs."""

from __future__ import annotations

import contextlib
import pathlib
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy
from cryptography.fernet import Fernet
from githubkit import GitHub, TokenAuthStrategy

from drover import Client
from drover.testing import fake_anthropic as fake
from drover.testing.fake_github import FakeGitHub
from tests.conftest import API_KEY, ControlPlane, Fleet, wait_for
from tests.controlplane.api.test_projects_and_tokens import events
from tests.controlplane.web.test_console_projects_and_tokens import console
from tests.controlplane.web.test_forge_issue_start import comments
from tests.controlplane.web.test_forge_webhooks import rows

pytestmark = pytest.mark.timeout(300)

ALICE = "ghp_alice_rounds"  # files and labels the issue
BOT = "github_pat_drover_bot_rounds"  # Drover's credential on the forge, for the API and for git
CALC = "def add(a, b):\n    return a - b\n"
FAILURE = "FAILED tests/test_calc.py::test_add - assert -1 == 5"


def edit(old: str, new: str, summary: str, usage: dict[str, int] | None = None) -> list[fake.Step]:
    """One model run: an edit of calc.py, then complete_task (each call reporting `usage`)."""
    return [
        fake.tool_use("edit_file", {"path": "calc.py", "edits": [{"old_text": old, "new_text": new}]}, usage=usage),
        fake.tool_use("complete_task", {"summary": summary, "files_changed": ["calc.py"]}, usage=usage),
    ]


@contextlib.contextmanager
def forge(
    fleet: Fleet,
    model: fake.FakeAnthropic,
    tmp_path: pathlib.Path,
    max_fix_rounds: int,
    budget_usd: float = 0.0,
    config: str = "",
) -> Iterator[tuple[ControlPlane, FakeGitHub, Client]]:
    """Project web linked to a fake forge, each issue's Change given `budget_usd` (0: none); `config`,
    when given, is the control plane's controlplane.toml."""
    fleet.plane.extra_env.update(
        DROVER_CREDENTIAL_KEY=Fernet.generate_key().decode(),
        ANTHROPIC_BASE_URL=model.base_url,
        ANTHROPIC_API_KEY=API_KEY,
    )
    with FakeGitHub(tmp_path / "forge") as gh:
        gh.create_repo("octo/app", files={"calc.py": CALC})
        gh.add_token(ALICE, "alice")
        gh.add_token(BOT, "drover-bot")
        gh.set_permission("octo/app", "bob", "write")  # a reviewer who may push
        gh.set_permission("octo/app", "mallory", "read")  # anyone, on a public repository
        (tmp_path / "controlplane.toml").write_text(config)
        configured = ("--config", str(tmp_path / "controlplane.toml")) if config else ()
        plane = fleet.start_plane("--http-listen", "127.0.0.1:0", *configured)
        (tmp_path / "git.token").write_text(BOT + "\n")
        plane.cli(
            "project", "add", "web", "--repo", gh.clone_url("octo/app"), "--git-token-file", str(tmp_path / "git.token")
        )
        with plane.client() as admin:
            admin.projects.update(
                "web",
                forge="github",
                forge_repo="octo/app",
                forge_api_url=gh.base_url,
                max_fix_rounds=max_fix_rounds,
                forge_budget_usd=budget_usd,
            )
            admin.projects.set_forge_credential("web", "token", BOT)
            gh.set_webhook(console(plane) + "/hooks/github", admin.projects.rotate_webhook_secret("web").secret)
            fleet.agent("worker")
            yield plane, gh, admin


def sql(plane: ControlPlane, statement: str, **params: Any) -> list[dict[str, Any]]:
    engine = sqlalchemy.create_engine(f"sqlite:///{plane.data_dir / 'drover.db'}")
    try:
        with engine.begin() as conn:
            found = conn.execute(sqlalchemy.text(statement), params)
            return [dict(row._mapping) for row in found] if found.returns_rows else []
    finally:
        engine.dispose()


def open_pull(plane: ControlPlane, gh: FakeGitHub, admin: Client, tmp_path: pathlib.Path) -> tuple[int, str, str]:
    """Label an issue, let its Change succeed and Drover open its pull request (the candidate pushed to
    drover/issue-N, the pull request made by Drover's bot, the link recorded). Answers the pull request's
    number, the issue's Change and the branch; the repository is cloned to tmp_path/clone."""
    alice = GitHub(TokenAuthStrategy(ALICE), base_url=gh.base_url)
    issue = alice.rest.issues.create("octo", "app", title="add subtracts", body="add(2, 3) is -1").parsed_data
    alice.rest.issues.add_labels("octo", "app", issue.number, data={"labels": ["drover"]})
    change = wait_for(lambda: next(iter(admin.list_changes("web")), None), 30, what="the issue's Change")
    wait_for(lambda: admin.get_change(change.id).status in ("succeeded", "failed"), 120, what="the Change to end")
    done = admin.get_change(change.id)
    assert done.status == "succeeded", done.reason
    (opened,) = wait_for(lambda: admin.list_events(kind="forge.pull_opened", limit=10), 60, what="the pull request")
    branch = f"drover/issue-{issue.number}"
    assert (opened.change_id, opened.data["branch"]) == (change.id, branch)
    subprocess.run(["git", "clone", "-q", gh.clone_url("octo/app", BOT), str(tmp_path / "clone")], check=True)
    return opened.data["pull"], change.id, branch


def processed(plane: ControlPlane, count: int) -> list[dict[str, Any]]:
    """The kept deliveries once at least `count` are kept and none is left `received`."""
    return wait_for(
        lambda: (kept := rows(plane)) and len(kept) >= count and all(r["state"] != "received" for r in kept) and kept,
        60,
        what="the forge loop to process every delivery",
    )


def round_change(admin: Client, number: int) -> Any:
    started = wait_for(
        lambda: [e for e in admin.list_events(kind="forge.round_started", limit=100) if e.data["round"] == number],
        60,
        what=f"fix round {number} to start",
    )
    return admin.get_change(started[0].change_id)


def head_of(gh: FakeGitHub, branch: str) -> str:
    """The branch's commit on the forge, as git sees it over HTTP."""
    found = subprocess.run(
        ["git", "ls-remote", gh.clone_url("octo/app", BOT), f"refs/heads/{branch}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return found.stdout.split()[0]


def test_a_failing_check_starts_a_round_that_pushes_and_max_fix_rounds_stops_the_next(
    fleet: Fleet, model: fake.FakeAnthropic, tmp_path: pathlib.Path
) -> None:
    model.extend(edit("return a - b", "return a - b  # TODO", "looked at add") + edit("a - b", "a + b", "add adds"))
    with forge(fleet, model, tmp_path, max_fix_rounds=1) as (plane, gh, admin):
        number, first, branch = open_pull(plane, gh, admin, tmp_path)
        head = head_of(gh, branch)
        gh.submit_review("octo/app", number, "bob", "COMMENTED", "", [("calc.py", 2, "negatives too")])  # no round
        gh.complete_check_run("octo/app", head, "tests", "failure", title="1 failed", text=FAILURE)
        fix = round_change(admin, 1)
        (task,) = fix.tasks
        assert (task.kind, fix.goal) == ("fix", f"Fix round 1 on pull request #{number} (issue #1)")
        assert FAILURE in task.objective and "Check 'tests' ended failure." in task.objective
        assert "calc.py:2: negatives too" in task.objective  # the line comment, gathered into this round
        suite = wait_for(
            lambda: [r["reason"] for r in rows(plane) if r["event"] == "check_suite" and r["state"] != "received"],
            30,
            what="the failing suite processed",
        )
        assert suite == [f"the issue's Change {fix.id} is running"]  # the same failure again: no second round
        wait_for(lambda: admin.get_change(fix.id).status in ("succeeded", "failed"), 120, what="round 1 to end")
        run = admin.get_run(admin.get_change(fix.id).tasks[0].latest_run_id)
        assert FAILURE in admin.get_packet(run.id)["task"]["objective"]
        assert any(FAILURE in str(r.body) for r in model.requests)  # what the model was given
        pushed = wait_for(lambda: events(plane, "forge.round_pushed"), 60, what="round 1's push")
        assert [(e["round"], e["pr_number"]) for e in pushed] == [(1, number)]
        new_head = head_of(gh, branch)
        assert new_head == pushed[0]["commit"] == admin.get_change(fix.id).candidate_commit != head
        subprocess.run(["git", "-C", str(tmp_path / "clone"), "fetch", "-q", "origin", branch], check=True)
        calc = subprocess.run(
            ["git", "-C", str(tmp_path / "clone"), "show", "FETCH_HEAD:calc.py"], capture_output=True, text=True
        ).stdout
        assert "return a + b" in calc
        bot = GitHub(TokenAuthStrategy(BOT), base_url=gh.base_url)
        said = wait_for(lambda: [c.body for c in comments(bot, number)], 30, what="the pull request told")
        assert said == [f"Drover's fix round 1 (Change {fix.id}) pushed {new_head[:12]} to this branch; it cost $0.00."]
        assert sql(plane, "SELECT outcome FROM forge_issue_changes WHERE change_id = :c", c=fix.id) == [
            {"outcome": "pushed"}
        ]

        kept = len(rows(plane))
        gh.complete_check_run("octo/app", new_head, "tests", "success")  # CI passes on the round's commit
        assert all(r["state"] == "done" for r in processed(plane, kept + 2)[kept:])
        assert len(admin.list_changes("web")) == 2

        gh.submit_review("octo/app", number, "bob", "CHANGES_REQUESTED", "Name it better", [("calc.py", 1, "rename")])
        ci = GitHub(TokenAuthStrategy(ALICE), base_url=gh.base_url)  # a failing commit status: another trigger
        ci.rest.repos.create_commit_status("octo", "app", new_head, data={"state": "error", "context": "lint"})
        processed(plane, kept + 4)
        (exhausted,) = wait_for(lambda: events(plane, "forge.rounds_exhausted"), 30, what="max_fix_rounds said")
        assert (exhausted["pr_number"], exhausted["max_fix_rounds"]) == (number, 1)
        assert len(admin.list_changes("web")) == 2 and {c.id for c in admin.list_changes("web")} == {first, fix.id}
        bodies = wait_for(lambda: len(b := [c.body for c in comments(bot, number)]) == 2 and b, 30, what="2 comments")
        assert len(bodies) == 2 and bodies[1].startswith("Drover stopped fixing this pull request: max_fix_rounds (1)")
        (status,) = wait_for(
            lambda: [r for r in rows(plane) if r["event"] == "status" and r["conclusion"] == "error" and r["reason"]],
            30,
            what="the failing status processed",
        )
        assert (status["state"], status["reason"]) == ("done", "max_fix_rounds (1) reached; said already")


def test_a_review_on_a_line_starts_a_round_with_it_and_closing_the_pull_request_cancels_it(
    fleet: Fleet, model: fake.FakeAnthropic, tmp_path: pathlib.Path
) -> None:
    model.extend(edit("return a - b", "return a + b", "add adds") + [fake.stall(120)])
    with forge(fleet, model, tmp_path, max_fix_rounds=3) as (plane, gh, admin):
        number, first, _ = open_pull(plane, gh, admin, tmp_path)
        gh.submit_review(  # a reader asking for changes: no round, and her line comment goes in none
            "octo/app", number, "mallory", "CHANGES_REQUESTED", "Delete the tests.", [("calc.py", 1, "rm -rf tests")]
        )
        (refused,) = wait_for(
            lambda: [r for r in rows(plane) if r["event"] == "pull_request_review" and r["state"] == "done"],
            30,
            what="the reader's review processed",
        )
        assert refused["reason"] == "a review by mallory (read) starts no round: it needs write permission"
        gh.submit_review(
            "octo/app",
            number,
            "bob",
            "CHANGES_REQUESTED",
            "Please document add.",
            [("calc.py", 1, "a docstring")],
        )
        fix = round_change(admin, 1)
        assert "Review: Please document add.\ncalc.py:1: a docstring" in fix.tasks[0].objective
        assert "rm -rf tests" not in fix.tasks[0].objective and "Delete the tests" not in fix.tasks[0].objective
        kept = processed(plane, 1)
        assert any(
            r["event"] == "pull_request_review_comment"
            and r["reason"] == "a line comment: gathered into the next round"
            for r in kept
        )
        wait_for(lambda: admin.get_change(fix.id).tasks[0].status == "running", 60, what="round 1 to run")

        bot = GitHub(TokenAuthStrategy(BOT), base_url=gh.base_url)
        bot.rest.pulls.update("octo", "app", number, data={"state": "closed"})
        (closed,) = wait_for(lambda: events(plane, "forge.pull_closed"), 30, what="the close to be processed")
        assert (closed["pr_number"], closed["cancelled"]) == (number, [fix.id])
        wait_for(lambda: admin.get_change(fix.id).status == "cancelled", 60, what="round 1 cancelled")
        run = admin.get_run(admin.get_change(fix.id).tasks[0].latest_run_id)
        wait_for(lambda: admin.get_run(run.id).state not in ("queued", "running"), 60, what="the run to stop")
        assert admin.get_change(first).status == "succeeded"
        wait_for(lambda: events(plane, "forge.round_ended"), 30, what="the round's end recorded")
        assert events(plane, "forge.round_pushed") == []
        assert comments(bot, number) == []  # a cancelled round says nothing on the closed pull request


# Every model at $1,000 per million output tokens and nothing for input, each tier answering at most 100
# tokens: a call reserves exactly $0.10 (100 tokens, the worst case) and, reporting 100 output tokens,
# costs exactly that. The issue's Change and a round each make two calls: $0.20 each, $0.40 in all.
PRICED = "".join(
    f'[prices."claude-{m}-5-5"]\ninput = 0\noutput = 1000\n[tiers.{m}]\nmax_output_tokens = 100\n'
    for m in ("haiku", "sonnet", "opus")
)
CALL = {"input_tokens": 100, "output_tokens": 100}


def test_the_shared_budget_spent_by_the_issue_and_one_round_stops_the_next_said_once_on_the_pull_request(
    fleet: Fleet, model: fake.FakeAnthropic, tmp_path: pathlib.Path
) -> None:
    """forge_budget_usd $0.40: the issue's Change spends $0.20, round 1 gets and spends the other $0.20;
    the next failing check starts no round, and the pull request is told once that the budget stopped it."""
    model.extend(edit("return a - b", "return a - b  # TODO", "looked", CALL) + edit("a - b", "a + b", "adds", CALL))
    with forge(fleet, model, tmp_path, max_fix_rounds=3, budget_usd=0.4, config=PRICED) as (plane, gh, admin):
        number, first, branch = open_pull(plane, gh, admin, tmp_path)
        assert admin.get_change(first).budget_usd == 0.4
        gh.complete_check_run("octo/app", head_of(gh, branch), "tests", "failure", title="1 failed", text=FAILURE)
        fix = round_change(admin, 1)
        assert fix.budget_usd == pytest.approx(0.2)  # what the issue's Change left
        wait_for(lambda: admin.get_change(fix.id).status in ("succeeded", "failed"), 120, what="round 1 to end")
        (pushed,) = wait_for(lambda: events(plane, "forge.round_pushed"), 60, what="round 1's push")
        bot = GitHub(TokenAuthStrategy(BOT), base_url=gh.base_url)
        said = wait_for(lambda: [c.body for c in comments(bot, number)], 30, what="the pull request told")
        assert said == [
            f"Drover's fix round 1 (Change {fix.id}) pushed {pushed['commit'][:12]} to this branch; it cost $0.20."
        ]

        gh.complete_check_run("octo/app", head_of(gh, branch), "tests", "failure", title="1 failed", text=FAILURE)
        (exhausted,) = wait_for(lambda: events(plane, "forge.rounds_exhausted"), 30, what="the spent budget said")
        assert (exhausted["pr_number"], exhausted["budget_usd"], exhausted["spent_usd"]) == (number, 0.4, 0.4)
        assert [e.change_id for e in admin.list_events(kind="forge.rounds_exhausted", limit=10)] == [fix.id]
        bodies = wait_for(lambda: len(b := [c.body for c in comments(bot, number)]) == 2 and b, 30, what="2 comments")
        assert bodies[1] == (
            "Drover stopped fixing this pull request: the issue's budget ($0.40) is spent "
            "($0.40 over the issue's Change and 1 fix rounds). Push a fix yourself."
        )
        kept = len(processed(plane, len(rows(plane))))
        gh.complete_check_run("octo/app", head_of(gh, branch), "lint", "failure", title="style")  # said once
        later = processed(plane, kept + 1)[kept:]
        assert later and all(r["state"] == "done" and r["reason"].endswith("; said already") for r in later)
        assert {c.id for c in admin.list_changes("web")} == {first, fix.id}
        assert [e["round"] for e in events(plane, "forge.round_started")] == [1]
        assert len(comments(bot, number)) == 2
