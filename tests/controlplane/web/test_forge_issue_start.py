"""A labelled issue starts a Change (issue 28's third slice), whole-system: a real control plane with its
HTTP listener, project web linked to octo/app on drover.testing.fake_github with a token credential, the
fake's webhook pointed at /hooks/github. Labelling the issue with the project's label gives one Change
with the issue in its goal and one comment on the issue naming it; a redelivery, another label, and the
label removed and added again while the Change runs start nothing more. A project whose forge
credential is missing fails the delivery saying why."""

from __future__ import annotations

import contextlib
import pathlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

from cryptography.fernet import Fernet
from githubkit import GitHub, TokenAuthStrategy

from drover.testing.fake_github import FakeGitHub
from tests.conftest import ControlPlane, Fleet, wait_for
from tests.controlplane.api.test_projects_and_tokens import events
from tests.controlplane.web.test_console_projects_and_tokens import console
from tests.controlplane.web.test_forge_webhooks import rows

ALICE = "ghp_alice"  # the issue's author, who labels it
BOT = "github_pat_drover_bot"  # Drover's credential on the forge


@contextlib.contextmanager
def linked(
    fleet: Fleet, tmp_path: pathlib.Path, credential: bool = True, *args: str
) -> Iterator[tuple[ControlPlane, FakeGitHub]]:
    fleet.plane.extra_env["DROVER_CREDENTIAL_KEY"] = Fernet.generate_key().decode()
    fleet.plane.extra_env["ANTHROPIC_API_KEY"] = "sk-ant-test-not-called"  # a model Task may be submitted
    with FakeGitHub(tmp_path / "forge") as gh:
        gh.create_repo("octo/app")
        gh.add_token(ALICE, "alice")
        gh.add_token(BOT, "drover-bot")
        plane = fleet.start_plane("--http-listen", "127.0.0.1:0", *args)
        with plane.client() as admin:
            admin.projects.create("web", forge="github", forge_repo="octo/app", forge_api_url=gh.base_url)
            if credential:
                admin.projects.set_forge_credential("web", "token", BOT)
            secret = admin.projects.rotate_webhook_secret("web").secret
        gh.set_webhook(console(plane) + "/hooks/github", secret)
        yield plane, gh


def processed(plane: ControlPlane, event: str = "issues") -> list[dict[str, Any]]:
    """Every kept delivery of `event`, once none is left `received` (the forge loop has ended each)."""
    kept = wait_for(
        lambda: (kept := rows(plane)) and all(r["state"] != "received" for r in kept) and kept,
        30,
        what="the forge loop to process every delivery",
    )
    return [r for r in kept if r["event"] == event]


def comments(api: GitHub[Any], number: int) -> list[Any]:
    return list(api.rest.issues.list_comments("octo", "app", number).parsed_data)


def test_a_labelled_issue_starts_one_change_and_comments_once(fleet: Fleet, tmp_path: pathlib.Path) -> None:
    with linked(fleet, tmp_path) as (plane, gh):
        api = GitHub(TokenAuthStrategy(ALICE), base_url=gh.base_url)
        issue = api.rest.issues.create("octo", "app", title="Crash on save", body="Saving twice crashes.").parsed_data
        api.rest.issues.add_labels("octo", "app", issue.number, data={"labels": ["drover"]})
        labeled = gh.deliveries[-1]
        assert labeled.status == 200
        assert [(r["action"], r["state"]) for r in processed(plane)] == [("opened", "done"), ("labeled", "done")]
        with plane.client() as admin:
            (change,) = admin.list_changes("web")
            got = admin.get_change(change.id)
        assert got.goal == f"Crash on save (issue #{issue.number})\n\nSaving twice crashes."
        assert got.submitted_by == "github:alice" and got.status not in ("failed", "cancelled")
        said = wait_for(lambda: comments(api, issue.number), 30, what="Drover's comment")
        assert len(said) == 1 and said[0].user.login == "drover-bot"
        # posted naming the Change, then edited as it moves (controlplane.dispatch.forge_outcomes)
        assert said[0].body.startswith(f"Drover started Change {change.id} for ")
        (started,) = events(plane, "forge.change_started")
        # Drover's own comment, delivered back (and each edit of it): nothing to do
        (own,) = [r for r in processed(plane, "issue_comment") if r["action"] == "created"]
        assert (own["action"], own["state"], own["sender"]) == ("created", "done", "drover-bot")
        assert (started["project"], started["number"], started["delivery_id"]) == ("web", issue.number, labeled.id)

        assert gh.redeliver(labeled.id).status == 200  # the same delivery again: nothing new
        api.rest.issues.add_labels("octo", "app", issue.number, data={"labels": ["bug"]})  # another label
        api.rest.issues.remove_label("octo", "app", issue.number, "drover")
        api.rest.issues.add_labels("octo", "app", issue.number, data={"labels": ["drover"]})  # while it runs
        kept = processed(plane)
        assert [(r["action"], r["label"], r["state"]) for r in kept[2:]] == [
            ("labeled", "bug", "done"), ("unlabeled", "drover", "done"), ("labeled", "drover", "done")
        ]  # fmt: skip
        assert kept[-1]["reason"] == f"the issue already has Change {change.id}"
        assert kept[2]["reason"] == "label 'bug' is not the project's 'drover'"
        with plane.client() as admin:
            assert [c.id for c in admin.list_changes("web")] == [change.id]
        assert len(comments(api, issue.number)) == 1 and len(events(plane, "forge.change_started")) == 1


def test_an_issue_labelled_for_another_label_or_without_a_credential_starts_nothing(
    fleet: Fleet, tmp_path: pathlib.Path
) -> None:
    with linked(fleet, tmp_path, credential=False) as (plane, gh):
        api = GitHub(TokenAuthStrategy(ALICE), base_url=gh.base_url)
        issue = api.rest.issues.create("octo", "app", title="Typo", labels=["docs"]).parsed_data
        api.rest.issues.add_labels("octo", "app", issue.number, data={"labels": ["drover"]})
        kept = processed(plane)
        assert [(r["action"], r["state"]) for r in kept] == [("opened", "done"), ("labeled", "failed")]
        assert kept[1]["reason"] == "project web has no forge credential (SetForgeCredential)"
        with plane.client() as admin:
            assert admin.list_changes("web") == []
        assert comments(api, issue.number) == [] and events(plane, "forge.change_started") == []
        assert [e["delivery_id"] for e in events(plane, "forge.delivery_failed")] == [kept[1]["delivery_id"]]


def test_a_forge_outage_is_tried_again_a_refusal_or_a_malformed_answer_fails_at_once(
    fleet: Fleet, tmp_path: pathlib.Path
) -> None:
    """The forge answering 502 to Drover's reading of the issue leaves the delivery to be tried again five
    seconds later, when the Change starts; a 404 (the issue gone) fails the delivery with no retry."""
    with linked(fleet, tmp_path) as (plane, gh):
        api = GitHub(TokenAuthStrategy(ALICE), base_url=gh.base_url)
        issue = api.rest.issues.create("octo", "app", title="Crash on save").parsed_data
        gh.outage("drover-bot", 1, 502, f"/repos/octo/app/issues/{issue.number}")
        api.rest.issues.add_labels("octo", "app", issue.number, data={"labels": ["drover"]})
        (retrying,) = wait_for(lambda: events(plane, "forge.delivery_retrying"), 30, what="the retry to be planned")
        assert (retrying["attempts"], retrying["reason"]) == (1, f"reading issue #{issue.number} on octo/app: HTTP 502")
        labeled = processed(plane)[-1]
        assert (labeled["state"], labeled["attempts"]) == ("done", 1)  # tried again after 5 s, and started
        with plane.client() as admin:
            (change,) = admin.list_changes("web")
        assert [e["delivery_id"] for e in events(plane, "forge.change_started")] == [labeled["delivery_id"]]

        other = api.rest.issues.create("octo", "app", title="Typo").parsed_data
        gh.outage("drover-bot", 1, 404, f"/repos/octo/app/issues/{other.number}")
        api.rest.issues.add_labels("octo", "app", other.number, data={"labels": ["drover"]})
        failed = processed(plane)[-1]
        assert (failed["state"], failed["attempts"]) == ("failed", 0)
        assert failed["reason"] == f"reading issue #{other.number} on octo/app: HTTP 404"
        third = api.rest.issues.create("octo", "app", title="Slow").parsed_data
        gh.outage("drover-bot", 1, 200, f"/repos/octo/app/issues/{third.number}")  # not an issue: malformed
        api.rest.issues.add_labels("octo", "app", third.number, data={"labels": ["drover"]})
        malformed = processed(plane)[-1]
        assert (malformed["state"], malformed["attempts"]) == ("failed", 0)
        assert malformed["reason"].startswith(
            f"reading issue #{third.number} on octo/app: the forge's answer is malformed"
        )
        with plane.client() as admin:
            assert [c.id for c in admin.list_changes("web")] == [change.id]
        assert len(events(plane, "forge.delivery_retrying")) == 1


def test_the_issue_comment_links_the_change_in_the_console_at_its_public_url(
    fleet: Fleet, tmp_path: pathlib.Path
) -> None:
    """`--console-url` is the console's address as users reach it (behind a proxy, not the listener's)."""
    with linked(fleet, tmp_path, True, "--console-url", "https://drover.example.com/") as (plane, gh):
        api = GitHub(TokenAuthStrategy(ALICE), base_url=gh.base_url)
        issue = api.rest.issues.create("octo", "app", title="Crash on save").parsed_data
        api.rest.issues.add_labels("octo", "app", issue.number, data={"labels": ["drover"]})
        with plane.client() as admin:
            (change,) = wait_for(lambda: admin.list_changes("web"), 30, what="the issue's Change")
        link = f"https://drover.example.com/changes/{change.id}"
        (said,) = wait_for(
            lambda: [c for c in comments(api, issue.number) if link in (c.body or "")], 30, what="the link"
        )
        assert said.user.login == "drover-bot"


def test_a_console_url_that_is_not_a_plain_http_address_stops_the_start(tmp_path: pathlib.Path) -> None:
    for bad, why in [
        ("drover.example.com", "not an http(s) URL with a host"),
        ("https://user:pw@drover.example.com", "no credentials, query or fragment"),
    ]:
        serve = [sys.executable, "-m", "controlplane.cli", "serve", "--data-dir", str(tmp_path / "cp")]
        done = subprocess.run([*serve, "--console-url", bad], capture_output=True, text=True, timeout=60)
        assert done.returncode != 0 and why in done.stderr
        assert "pw" not in done.stderr  # the refused URL's password is not repeated
