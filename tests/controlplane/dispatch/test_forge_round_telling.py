"""A finished fix round's end told reliably (controlplane.dispatch.forge_rounds.ForgeRounds.finish_rounds),
with a real store, real git and drover.testing.fake_github as the forge: a forge outage while the round's
comment is posted is tried again on later passes, from the comment (the push done is not repeated); a
refusal for good (403, a push that is not a fast-forward) fails the round at once, saying why."""

from __future__ import annotations

import asyncio
import pathlib
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography.fernet import Fernet
from githubkit import GitHub, TokenAuthStrategy
from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.dispatch.forge_rounds import ForgeRounds
from controlplane.domain import graph
from controlplane.services.change_lifecycle import submit_change
from controlplane.services.credentials import Sealer, set_forge_credential, set_git_credential
from controlplane.services.notify import Notifier
from controlplane.services.projects import add_project
from controlplane.store.engine import Store
from controlplane.store.models import Change, Event, ForgeIssueChange, Project, utcnow
from drover.testing.fake_github import FakeGitHub

pytestmark = pytest.mark.timeout(120)

BOT = "github_pat_drover_bot_telling"
READER = "ghp_alice_telling"  # reads the pull request's comments: an outage is only for Drover's bot
BRANCH = "drover/issue-4"
CANDIDATE = "drover/candidate-round-1"


class Setup:
    def __init__(self, gh: FakeGitHub, store: Store, sealer: Sealer, clone: pathlib.Path, pr: int, fix: str) -> None:
        self.gh, self.store, self.sealer, self.clone, self.pr, self.fix = gh, store, sealer, clone, pr, fix
        self.api = GitHub(TokenAuthStrategy(READER), base_url=gh.base_url, auto_retry=False)

    def git(self, *args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(self.clone), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout.strip()

    def head(self, branch: str) -> str:
        return self.git("ls-remote", "origin", f"refs/heads/{branch}").split()[0]

    def comments(self) -> list[str]:
        return [c.body or "" for c in self.api.rest.issues.list_comments("octo", "app", self.pr).parsed_data]

    def link(self) -> tuple[str, str]:
        row = self.store.transaction(lambda s: s.get(ForgeIssueChange, self.fix))
        assert row is not None
        return row.outcome, row.outcome_reason

    def events(self, kind: str) -> list[dict[str, Any]]:
        found = self.store.transaction(
            lambda s: list(s.scalars(select(Event).where(Event.kind == kind, Event.change_id == self.fix)))
        )
        return [e.data for e in found]

    def tell(self, tmp: pathlib.Path, passes: int = 1000, deadline: float = 30.0) -> None:
        """Run finish_rounds pass after pass (as the forge loop does) until the round's end is recorded."""
        loop = ForgeRounds(self.store, self.sealer, Notifier(), lambda: None)
        loop.configure(lambda runs, why: None, tmp / "work")

        async def passes_until_told() -> None:
            end = time.monotonic() + deadline
            for _ in range(passes):
                await loop.finish_rounds()
                if self.link()[0] or time.monotonic() > end:
                    return
                await asyncio.sleep(0.2)

        asyncio.run(passes_until_told())


@pytest.fixture
def setup(tmp_path: pathlib.Path) -> Iterator[Setup]:
    """Project web linked to the fake forge; issue #4's pull request from drover/issue-4 (one commit), and fix round 1
    succeeded with its candidate (one commit on top of the pull request's head) on the forge."""
    with FakeGitHub(tmp_path / "forge") as gh:
        gh.create_repo("octo/app", files={"calc.py": "def add(a, b):\n    return a - b\n"})
        gh.add_token(BOT, "drover-bot")
        gh.add_token(READER, "alice")
        clone = tmp_path / "clone"
        subprocess.run(["git", "clone", "-q", gh.clone_url("octo/app", BOT), str(clone)], check=True)
        api = GitHub(TokenAuthStrategy(BOT), base_url=gh.base_url)
        pending = Setup(gh, Store(f"sqlite:///{tmp_path / 't.db'}"), Sealer([Fernet.generate_key()]), clone, 0, "")
        (clone / "calc.py").write_text("def add(a, b):\n    return a - b  # TODO\n")
        pending.git("commit", "-qam", "the issue's Change")
        pending.git("push", "-q", "origin", f"HEAD:refs/heads/{BRANCH}")
        pr = api.rest.pulls.create("octo", "app", data={"title": "add", "head": BRANCH, "base": "main"}).parsed_data
        (clone / "calc.py").write_text("def add(a, b):\n    return a + b\n")
        pending.git("commit", "-qam", "add adds")
        pending.git("push", "-q", "origin", f"HEAD:refs/heads/{CANDIDATE}")
        commit = pending.git("rev-parse", "HEAD")
        store, sealer = pending.store, pending.sealer
        store.migrate()

        def build(s: Session) -> str:
            add_project(s, "web", gh.clone_url("octo/app"))
            project = s.get(Project, "web")
            assert project is not None
            project.forge, project.forge_repo, project.forge_api_url = "github", "octo/app", gh.base_url
            set_forge_credential(s, sealer, "web", "token", BOT, "test")
            set_git_credential(s, sealer, "web", "token", BOT, "test")
            task = graph.TaskSpec(key="fix", kind="fix", objective="fix it", command=("true",))
            ids = [submit_change(s, graph.ChangeSpec("web", f"round {n}", (task,)), "github:alice") for n in (0, 1)]
            for n, change_id in enumerate(ids):
                change = s.get(Change, change_id)
                assert change is not None
                change.status = "succeeded"
                if n == 1:
                    change.candidate_branch, change.candidate_commit = CANDIDATE, commit
                s.add(
                    ForgeIssueChange(
                        change_id=change_id, project="web", issue_number=4, delivery_id=f"d{n}", created_at=utcnow(),
                        round=n, pr_number=pr.number, pr_branch=BRANCH, outcome="pr_opened" if n == 0 else "",
                    )
                )  # fmt: skip
            return ids[1]

        fix = store.transaction(build)
        yield Setup(gh, store, sealer, clone, pr.number, fix)
        store.close()


def test_an_outage_while_the_round_is_told_is_tried_again_from_the_comment(
    setup: Setup, tmp_path: pathlib.Path
) -> None:
    """Commenting answered 502 twice: the candidate is pushed once, the comment posted on the third try;
    a commit a reviewer pushed on top meanwhile stays (the push is not repeated)."""
    commit = setup.head(CANDIDATE)
    setup.gh.outage("drover-bot", 2, 502, f"/repos/octo/app/issues/{setup.pr}/comments")
    setup.tell(tmp_path, passes=1)
    assert setup.link() == ("", "") and setup.head(BRANCH) == commit and setup.comments() == []
    setup.git("checkout", "-q", "-b", "review", commit)  # a reviewer pushes on top before the retry
    (setup.clone / "NOTES").write_text("reviewed\n")
    setup.git("add", "NOTES")
    setup.git("commit", "-qm", "notes")
    setup.git("push", "-q", "origin", f"HEAD:refs/heads/{BRANCH}")
    reviewed = setup.git("rev-parse", "HEAD")

    setup.tell(tmp_path)
    assert setup.link() == ("pushed", "")
    assert setup.head(BRANCH) == reviewed  # not moved back, nor refused as not a fast-forward
    assert setup.comments() == [
        f"Drover's fix round 1 (Change {setup.fix}) pushed {commit[:12]} to this branch; it cost $0.00."
    ]
    assert [e["commit"] for e in setup.events("forge.round_pushed")] == [commit]
    reason = f"commenting on issue #{setup.pr} on octo/app: HTTP 502"
    assert [(e["attempt"], e["reason"]) for e in setup.events("forge.round_retry")] == [(1, reason), (2, reason)]
    assert [e["outcome"] for e in setup.events("forge.round_ended")] == ["pushed"]
    assert setup.events("forge.round_failed") == []


def test_a_refusal_fails_the_round_at_once_saying_why(setup: Setup, tmp_path: pathlib.Path) -> None:
    """A 403 on the comment gives up on the first failure (the push done is said in the event)."""
    commit = setup.head(CANDIDATE)
    setup.gh.outage("drover-bot", 1, 403, f"/repos/octo/app/issues/{setup.pr}/comments")
    setup.tell(tmp_path, passes=1)
    reason = f"commenting on issue #{setup.pr} on octo/app: HTTP 403"
    assert setup.link() == ("failed", reason)
    assert setup.head(BRANCH) == commit and setup.comments() == []
    assert [(e["attempts"], e["pushed"], e["reason"]) for e in setup.events("forge.round_failed")] == [
        (1, True, reason)
    ]
    assert setup.events("forge.round_retry") == [] and setup.events("forge.round_ended") == []
    setup.tell(tmp_path, passes=3)  # a failed round is not tried again
    assert setup.comments() == [] and len(setup.events("forge.round_failed")) == 1


def test_a_push_that_is_not_a_fast_forward_fails_the_round_at_once(setup: Setup, tmp_path: pathlib.Path) -> None:
    """A reviewer pushed a commit the round's candidate does not descend from: no forced update, no retry."""
    base = setup.git("rev-parse", "HEAD~1")
    setup.git("checkout", "-q", "-b", "other", base)
    (setup.clone / "NOTES").write_text("other\n")
    setup.git("add", "NOTES")
    setup.git("commit", "-qm", "other")
    setup.git("push", "-q", "origin", f"HEAD:refs/heads/{BRANCH}")
    theirs = setup.git("rev-parse", "HEAD")
    setup.tell(tmp_path, passes=1)
    outcome, reason = setup.link()
    assert outcome == "failed" and reason.endswith("not a fast-forward")
    assert setup.head(BRANCH) == theirs and setup.comments() == []
    assert setup.events("forge.round_retry") == [] and setup.events("forge.round_pushed") == []
