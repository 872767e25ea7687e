"""`/drover` comments (issue 28), whole-system: a real control plane with its HTTP listener, project web
linked to octo/app on drover.testing.fake_github (the `linked` fixture of test_forge_issue_start), comments
posted through githubkit by alice (write) and bob (read). A writer's `/drover budget $3` starts a Change
with that budget, the issue's checklist as criteria and the project's check Task; a reader's `/drover`
runs nothing and gets one reply naming the permission needed; `/drover stop` cancels the running Change
saying who; a bad command gets the usage; a redelivered comment and Drover's own replies do nothing."""

from __future__ import annotations

import pathlib
from typing import Any

from githubkit import GitHub, TokenAuthStrategy

from drover.testing.fake_github import FakeGitHub
from tests.conftest import ControlPlane, Fleet, wait_for
from tests.controlplane.api.test_projects_and_tokens import events
from tests.controlplane.web.test_forge_issue_start import ALICE, comments, linked
from tests.controlplane.web.test_forge_webhooks import rows

BOB = "ghp_bob"
BODY = "Saving twice crashes.\n\n- [ ] saving twice keeps the file\n- [x] the error names the file\n"


def settled(plane: ControlPlane, api: GitHub[Any], number: int) -> list[dict[str, Any]]:
    """The issue's comments' creation deliveries, once there is one per comment on it and the loop has
    ended every delivery (Drover's edits of its own comment come back as `edited` deliveries, left out)."""

    def ready() -> list[dict[str, Any]] | None:
        every = rows(plane)
        kept = [
            r for r in every if r["event"] == "issue_comment" and r["number"] == number and r["action"] == "created"
        ]
        done = all(r["state"] != "received" for r in every)
        return kept if done and len(kept) == len(comments(api, number)) else None

    return wait_for(ready, 30, what="the forge loop to process every comment")


def say(api: GitHub[Any], number: int, body: str) -> int:
    return api.rest.issues.create_comment("octo", "app", number, data={"body": body}).parsed_data.id


def people(gh: FakeGitHub) -> tuple[GitHub[Any], GitHub[Any]]:
    gh.add_token(BOB, "bob")
    gh.set_permission("octo/app", "alice", "write")
    gh.set_permission("octo/app", "bob", "read")
    return GitHub(TokenAuthStrategy(ALICE), base_url=gh.base_url), GitHub(TokenAuthStrategy(BOB), base_url=gh.base_url)


def test_a_writers_budget_comment_starts_the_planned_change_once(fleet: Fleet, tmp_path: pathlib.Path) -> None:
    with linked(fleet, tmp_path) as (plane, gh):
        alice, _ = people(gh)
        with plane.client() as admin:
            admin.projects.update("web", forge_check_command="pytest -q", forge_budget_usd=9)
        issue = alice.rest.issues.create("octo", "app", title="Crash on save", body=BODY).parsed_data
        say(alice, issue.number, "/drover budget $3\nthe save path is in app/io.py")
        command = gh.deliveries[-1]
        kept = settled(plane, alice, issue.number)
        with plane.client() as admin:
            (change,) = admin.list_changes("web")
            got = admin.get_change(change.id)
        assert (got.budget_usd, got.submitted_by) == (3.0, "github:alice")
        assert got.criteria == ["saving twice keeps the file", "the error names the file"]
        implement, check = sorted(got.tasks, key=lambda t: t.key != "implement")
        assert (implement.key, implement.command, implement.objective) == ("implement", [], got.goal)
        assert (check.key, check.command, check.depends_on) == ("check", ["sh", "-c", "pytest -q"], ["implement"])
        said = comments(alice, issue.number)
        assert [c.user.login for c in said] == ["alice", "drover-bot"]
        assert said[1].body.startswith(f"Drover started Change {change.id} for")  # then edited as it moves
        assert [(r["sender"], r["state"]) for r in kept] == [("alice", "done"), ("drover-bot", "done")]
        assert kept[1]["reason"] == "not a /drover command"  # Drover's own comment

        assert gh.redeliver(command.id).status == 200  # the same delivery again: nothing new
        say(alice, issue.number, "/drover")  # while it runs: one reply, no second Change
        settled(plane, alice, issue.number)
        with plane.client() as admin:
            assert [c.id for c in admin.list_changes("web")] == [change.id]
        said = comments(alice, issue.number)
        assert len(said) == 4 and said[3].body == (
            f"Drover: this issue already has Change {change.id} running; `/drover stop` cancels it first."
        )
        assert len(events(plane, "forge.change_started")) == 1

        # The label path uses the same plan, with the project's budget.
        other = alice.rest.issues.create("octo", "app", title="Typo", body="- [ ] fixed").parsed_data
        alice.rest.issues.add_labels("octo", "app", other.number, data={"labels": ["drover"]})
        wait_for(lambda: len(events(plane, "forge.change_started")) == 2, 30, what="the labelled issue's Change")
        with plane.client() as admin:
            labelled = next(c for c in admin.list_changes("web") if c.id != change.id)
            got = admin.get_change(labelled.id)
        assert (got.budget_usd, got.criteria) == (9.0, ["fixed"])
        assert sorted(t.key for t in got.tasks) == ["check", "implement"]


def test_a_reader_is_answered_once_and_nothing_runs(fleet: Fleet, tmp_path: pathlib.Path) -> None:
    with linked(fleet, tmp_path) as (plane, gh):
        alice, bob = people(gh)
        issue = alice.rest.issues.create("octo", "app", title="Crash on save", body=BODY).parsed_data
        say(bob, issue.number, "/drover budget $50")
        asked = gh.deliveries[-1]
        kept = settled(plane, alice, issue.number)
        assert gh.redeliver(asked.id).status == 200  # the same delivery again: no second reply
        settled(plane, alice, issue.number)
        with plane.client() as admin:
            assert admin.list_changes("web") == []
        said = comments(alice, issue.number)
        assert [c.user.login for c in said] == ["bob", "drover-bot"]
        assert said[1].body == (
            "Drover: @bob, `/drover` commands need write permission on this repository (you have read); "
            "nothing was run."
        )
        assert kept[0]["state"] == "done" and kept[0]["reason"].startswith("replied: Drover: @bob")
        assert events(plane, "forge.change_started") == []
        assert [r.path.removeprefix("/api/v3") for r in gh.recorded() if "permission" in r.path] == [
            "/repos/octo/app/collaborators/bob/permission"
        ]  # asked of the forge once, for bob; Drover's own reply asked nothing


def test_a_writers_stop_cancels_and_a_bad_command_gets_the_usage(fleet: Fleet, tmp_path: pathlib.Path) -> None:
    with linked(fleet, tmp_path) as (plane, gh):
        alice, bob = people(gh)
        issue = alice.rest.issues.create("octo", "app", title="Crash on save", body=BODY).parsed_data
        say(alice, issue.number, "/drover")
        settled(plane, alice, issue.number)
        with plane.client() as admin:
            (change,) = admin.list_changes("web")
        say(bob, issue.number, "/drover stop")  # a reader cannot stop it
        say(alice, issue.number, "/drover stop please")
        settled(plane, alice, issue.number)
        with plane.client() as admin:
            assert admin.get_change(change.id).status not in ("cancelled", "failed")
        said = [c.body for c in comments(alice, issue.number) if c.user.login == "drover-bot"]
        assert len(said) == 3 and said[1].startswith("Drover: @bob, `/drover` commands need write permission")
        assert said[2] == (
            "Drover: `/drover stop please` is not a Drover command. Drover understands, as a comment's first "
            "line: `/drover` (start a Change for this issue), `/drover budget $N` (start one with a budget of "
            "N USD, e.g. `$5` or `$2.50`), `/drover stop` (cancel the running Change) and `/drover retry` "
            "(start again after a failed or cancelled Change)."
        )

        say(alice, issue.number, "/drover stop")
        stop = gh.deliveries[-1]
        settled(plane, alice, issue.number)
        with plane.client() as admin:
            wait_for(lambda: admin.get_change(change.id).status == "cancelled", 30, what="the Change cancelled")
        with plane.client() as admin:
            (stopped,) = admin.list_events(kind="forge.change_stopped")
        assert (stopped.change_id, stopped.data["by"], stopped.data["delivery_id"]) == (
            change.id,
            "github:alice",
            stop.id,
        )
        (requested,) = events(plane, "change.cancel_requested")
        assert requested["reason"] == "cancelled by github:alice (/drover stop)"
        assert len(comments(alice, issue.number)) == 7  # the stop itself is not answered

        assert gh.redeliver(stop.id).status == 200
        say(alice, issue.number, "/drover retry")  # after a cancelled Change: a new one
        settled(plane, alice, issue.number)
        with plane.client() as admin:
            changes = admin.list_changes("web")
        assert len(changes) == 2 and len(events(plane, "forge.change_stopped")) == 1
        retried = next(c for c in changes if c.id != change.id)
        assert comments(alice, issue.number)[-1].body.startswith(f"Drover started Change {retried.id} for")
