"""The control plane's forge client (issue 28) against drover.testing.fake_github, which githubkit talks to
over real HTTP: from a project's sealed credential, a token or a GitHub App installation, it reads an
issue, comments on it and reads a user's permission; a refused credential or a missing credential is a
ForgeError that does not quote the secret."""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import Iterator

import pytest
from cryptography.fernet import Fernet

from controlplane.services.credentials import Sealer
from controlplane.services.forge_client import ForgeAccess, ForgeClient, ForgeError
from controlplane.store.models import Project
from drover.testing.fake_github import FakeGitHub
from drover.testing.fake_github.records import Comment
from tests.sdk.test_fake_github import _app_key

TOKEN = "github_pat_forge_client_test"


@pytest.fixture
def gh(tmp_path: pathlib.Path) -> Iterator[FakeGitHub]:
    with FakeGitHub(tmp_path / "forge") as forge:
        forge.create_repo("octo/app")
        forge.add_token(TOKEN, "drover-bot")
        forge.set_permission("octo/app", "carol", "write")
        yield forge


def project(gh: FakeGitHub, sealer: Sealer, kind: str, secret: str, app_id: int = 0, installation: int = 0) -> Project:
    return Project(
        name="web",
        forge="github",
        forge_repo="octo/app",
        forge_api_url=gh.base_url.rstrip("/"),
        forge_credential_kind=kind,
        forge_credential_sealed=sealer.seal(secret) if kind else "",
        forge_app_id=app_id,
        forge_installation_id=installation,
    )


async def round_trip(access: ForgeAccess) -> tuple[str, str, int, str]:
    async with ForgeClient(access) as forge:
        issue = await forge.get_issue(1)
        comment = await forge.create_comment(1, "Drover started Change chg_1 for this issue.")
        return issue.title, issue.body, comment, await forge.permission("carol")


def test_a_token_and_an_app_installation_each_read_comment_and_ask_permission(gh: FakeGitHub) -> None:
    sealer = Sealer.from_text(Fernet.generate_key().decode())
    gh.new_issue(gh.repos["octo/app"], "Crash", "on save", "alice")
    with_token = ForgeAccess.of(project(gh, sealer, "token", TOKEN), sealer)
    title, body, first, permission = asyncio.run(round_trip(with_token))
    assert (title, body, permission) == ("Crash", "on save", "write")
    private, public = _app_key()
    gh.add_app(42, public, 7, slug="drover", owner="octo")
    as_app = ForgeAccess.of(project(gh, sealer, "app", private, 42, 7), sealer)
    assert as_app.kind == "app" and (as_app.app_id, as_app.installation_id) == (42, 7)
    assert TOKEN not in repr(with_token) and "PRIVATE KEY" not in repr(as_app)  # a logged access shows no secret
    *_, second, _ = asyncio.run(round_trip(as_app))
    authors = {c.id: c.author for c in gh.comments["octo/app"].values()}
    assert authors == {first: "drover-bot", second: "drover[bot]"}
    assert any(r.token == "jwt:42" for r in gh.recorded())  # the App's JWT was exchanged for its token


def test_no_credential_a_refused_one_and_a_missing_issue_are_forge_errors(gh: FakeGitHub) -> None:
    sealer = Sealer.from_text(Fernet.generate_key().decode())
    with pytest.raises(ForgeError, match="project web has no forge credential"):
        ForgeAccess.of(project(gh, sealer, "", ""), sealer)
    other = Sealer.from_text(Fernet.generate_key().decode())
    with pytest.raises(ForgeError, match="does not open"):
        ForgeAccess.of(project(gh, sealer, "token", TOKEN), other)
    gh.revoke(TOKEN)
    with pytest.raises(ForgeError) as refused:
        asyncio.run(round_trip(ForgeAccess.of(project(gh, sealer, "token", TOKEN), sealer)))
    assert str(refused.value) == "reading issue #1 on octo/app: HTTP 401" and TOKEN not in str(refused.value)
    gh.add_token("ghp_other", "drover-bot")
    with pytest.raises(ForgeError, match="HTTP 404"):
        asyncio.run(round_trip(ForgeAccess.of(project(gh, sealer, "token", "ghp_other"), sealer)))


def test_two_forges_with_the_same_app_ids_each_get_their_own_installation_token(
    gh: FakeGitHub, tmp_path: pathlib.Path
) -> None:
    """githubkit's own cache is one per process, keyed by App id and installation id only: a second forge
    (GitHub Enterprise beside github.com, or a test forge) with an App of the same ids would be sent the
    first one's installation token and refused. Each credential has its own cache, reused across its
    clients: one token exchange per forge, however many clients."""
    sealer = Sealer.from_text(Fernet.generate_key().decode())
    with FakeGitHub(tmp_path / "enterprise") as other:
        other.create_repo("octo/app")
        accesses = []
        for forge, slug in ((gh, "drover"), (other, "drover-enterprise")):
            private, public = _app_key()
            forge.add_app(4343, public, 71, slug=slug, owner="octo")
            forge.new_issue(forge.repos["octo/app"], "Crash", "on save", "alice")
            forge.set_permission("octo/app", "carol", "write")
            accesses.append(ForgeAccess.of(project(forge, sealer, "app", private, 4343, 71), sealer))
        for access in accesses + accesses:  # each forge twice, interleaved
            asyncio.run(round_trip(access))
        for forge, slug in ((gh, "drover"), (other, "drover-enterprise")):
            authors = [c.author for c in forge.comments["octo/app"].values()]
            assert authors == [f"{slug}[bot]"] * 2
            exchanges = [r for r in forge.recorded() if r.path.endswith("/access_tokens")]
            assert [r.status for r in exchanges] == [201]  # one installation token, reused by the second client


async def read_back(access: ForgeAccess, ids: list[int]) -> tuple[list[tuple[int, str, str, str]], bool, bool]:
    async with ForgeClient(access) as forge:
        read = [await forge.get_comment(i) for i in ids]
        issue, pull = await forge.get_issue(1), await forge.get_issue(2)
    return [(c.id, c.body, c.user, c.user_type) for c in read], issue.pull_request, pull.pull_request


def test_a_comment_is_read_back_with_its_author_and_a_pull_request_is_told_from_an_issue(gh: FakeGitHub) -> None:
    sealer = Sealer.from_text(Fernet.generate_key().decode())
    repo = gh.repos["octo/app"]
    gh.new_issue(repo, "Crash", "on save", "alice")
    gh.new_issue(repo, "Fix crash", "Fixes #1", "alice", pull=True)
    stamp = "2026-12-03T10:00:00Z"
    by_app, by_alice = gh.next_id(), gh.next_id()
    gh.comments["octo/app"][by_app] = Comment(by_app, 1, "Drover started Change chg_1.", "drover[bot]", stamp, stamp)
    gh.comments["octo/app"][by_alice] = Comment(by_alice, 1, "/drover", "alice", stamp, stamp)
    with_token = ForgeAccess.of(project(gh, sealer, "token", TOKEN), sealer)
    read, issue_is_pull, pull_is_pull = asyncio.run(read_back(with_token, [by_app, by_alice]))
    assert read == [
        (by_app, "Drover started Change chg_1.", "drover[bot]", "Bot"),
        (by_alice, "/drover", "alice", "User"),
    ]
    assert (issue_is_pull, pull_is_pull) == (False, True)
    with pytest.raises(ForgeError, match=r"reading comment 999999 on octo/app: HTTP 404"):
        asyncio.run(read_back(with_token, [999999]))
