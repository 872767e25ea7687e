"""drover.testing.fake_github driven by the real githubkit client and real git: every response must parse
with githubkit's models (a missing field fails the parse), every webhook with githubkit's webhook models and
a signature checked here with hmac."""

from __future__ import annotations

import datetime
import hashlib
import hmac
import http.server
import json
import pathlib
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from githubkit import AppAuthStrategy, AppInstallationAuthStrategy, GitHub, TokenAuthStrategy
from githubkit.exception import RequestFailed
from githubkit_schemas.latest.webhooks import WebhookNamespace

from drover.testing.fake_github import FakeGitHub

SECRET = "whsec"
TOKEN = "ghp_alice"


class Receiver(http.server.ThreadingHTTPServer):
    def __init__(self) -> None:
        self.got: list[tuple[dict[str, str], bytes]] = []
        self.answer = 200
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.got.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(outer.answer)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"

    def events(self, name: str) -> list[Any]:
        """The received `name` deliveries whose signature holds, parsed with githubkit's webhook models."""
        out = []
        for headers, body in self.got:
            expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
            if headers["x-github-event"] == name and hmac.compare_digest(
                headers.get("x-hub-signature-256", ""), expected
            ):
                out.append(WebhookNamespace.parse(name, body))  # type: ignore[call-overload]
        return out


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def gh(tmp_path: pathlib.Path, receiver: Receiver) -> Iterator[FakeGitHub]:
    with FakeGitHub(tmp_path / "forge") as fake:
        fake.set_webhook(receiver.url, SECRET)
        fake.create_repo("octo/app")
        fake.add_token(TOKEN, "alice")
        yield fake


KEPT: list[GitHub[Any]] = []


def client(gh: FakeGitHub, token: str = TOKEN) -> GitHub[Any]:
    """A client kept alive: githubkit's `rest` namespaces hold their client only weakly."""
    KEPT.append(GitHub(TokenAuthStrategy(token), base_url=gh.base_url))
    return KEPT[-1]


def run_git(*args: str, cwd: pathlib.Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=60)


def push_branch(gh: FakeGitHub, tmp_path: pathlib.Path, branch: str, token: str = TOKEN) -> str:
    work = tmp_path / f"clone-{branch}"
    done = run_git("clone", "-q", gh.clone_url("octo/app", token), str(work))
    assert done.returncode == 0, done.stderr
    (work / "a.py").write_text("print('hi')\n")
    for args in (("checkout", "-q", "-b", branch), ("add", "a.py"), ("-c", "user.name=a", "-c", "user.email=a@x",
                 "commit", "-q", "-m", "add a.py"), ("push", "-q", "origin", branch)):  # fmt: skip
        done = run_git(*args, cwd=work)
        assert done.returncode == 0, done.stderr
    return run_git("rev-parse", "HEAD", cwd=work).stdout.strip()


def test_ping_on_setup_and_a_label_delivers_a_signed_issues_event(gh: FakeGitHub, receiver: Receiver) -> None:
    assert receiver.events("ping")[0].hook_id == gh.hooks.hook_id
    gh_client = client(gh)
    issue = gh_client.rest.issues.create("octo", "app", title="Crash", body="it crashes").parsed_data
    labels = gh_client.rest.issues.add_labels("octo", "app", issue.number, data={"labels": ["drover"]}).parsed_data
    assert [lab.name for lab in labels] == ["drover"]
    labeled = [e for e in receiver.events("issues") if e.action == "labeled"]
    assert len(labeled) == 1 and labeled[0].label.name == "drover" and labeled[0].issue.number == issue.number
    assert labeled[0].sender.login == "alice" and labeled[0].repository.full_name == "octo/app"
    assert [d.status for d in gh.deliveries] == [200, 200, 200]  # ping, opened, labeled
    fetched = gh_client.rest.issues.get("octo", "app", issue.number).parsed_data
    assert [lab.name for lab in fetched.labels] == ["drover"]  # type: ignore[union-attr]
    gh_client.rest.issues.remove_label("octo", "app", issue.number, "drover")
    assert gh_client.rest.issues.get("octo", "app", issue.number).parsed_data.labels == []


def test_redelivery_keeps_id_and_body_and_forgeries_fail_the_signature(gh: FakeGitHub, receiver: Receiver) -> None:
    client(gh).rest.issues.create("octo", "app", title="t")
    first = gh.deliveries[-1]
    receiver.answer = 500
    again = gh.redeliver(first.id)
    assert again.status == 500 and again.attempts == [200, 500]
    assert receiver.got[-1][0]["x-github-delivery"] == first.id and receiver.got[-1][1] == first.body
    assert len(receiver.events("issues")) == 2
    gh.deliver("issues", json.loads(first.body), sign=False)
    gh.deliver("issues", json.loads(first.body), secret="wrong")
    assert "x-hub-signature-256" not in receiver.got[-2][0]
    assert len(receiver.events("issues")) == 2  # neither forgery verifies


def test_comment_then_edit(gh: FakeGitHub, receiver: Receiver) -> None:
    api = client(gh).rest.issues
    number = api.create("octo", "app", title="t").parsed_data.number
    made = api.create_comment("octo", "app", number, data={"body": "first"}).parsed_data
    edited = api.update_comment("octo", "app", made.id, data={"body": "second"}).parsed_data
    assert edited.id == made.id and edited.body == "second"
    assert [c.body for c in api.list_comments("octo", "app", number).parsed_data] == ["second"]
    assert api.get("octo", "app", number).parsed_data.comments == 1
    created = receiver.events("issue_comment")
    assert [(e.action, e.comment.body) for e in created] == [("created", "first"), ("edited", "second")]
    with pytest.raises(RequestFailed) as err:
        api.update_comment("octo", "app", 999999, data={"body": "x"})
    assert err.value.response.status_code == 404 and err.value.response.json()["message"] == "Not Found"


def test_pull_from_a_pushed_branch_and_422_for_a_missing_one(
    gh: FakeGitHub, tmp_path: pathlib.Path, receiver: Receiver
) -> None:
    sha = push_branch(gh, tmp_path, "feature")
    pulls = client(gh).rest.pulls
    pr = pulls.create(
        "octo", "app", data={"title": "Add a", "head": "feature", "base": "main", "body": "b", "draft": True}
    ).parsed_data
    assert pr.head.sha == sha and pr.head.ref == "feature" and pr.draft is True
    assert [p.number for p in pulls.list("octo", "app").parsed_data] == [pr.number]
    with pytest.raises(RequestFailed) as err:
        pulls.create("octo", "app", data={"title": "x", "head": "nope", "base": "main"})
    assert err.value.response.status_code == 422 and err.value.response.json()["errors"][0]["field"] == "head"
    merged = pulls.merge("octo", "app", pr.number).parsed_data
    assert (
        merged.merged
        and run_git("--git-dir", str(gh.repos["octo/app"].path), "rev-parse", "main").stdout.strip() == merged.sha
    )
    closed = receiver.events("pull_request")[-1]
    assert closed.action == "closed" and closed.pull_request.merged is True
    assert pulls.get("octo", "app", pr.number).parsed_data.merged is True


def test_failing_check_run_with_output_and_statuses(gh: FakeGitHub, tmp_path: pathlib.Path, receiver: Receiver) -> None:
    sha = push_branch(gh, tmp_path, "ci")
    run = gh.complete_check_run(
        "octo/app", "ci", "tests", "failure", title="1 failed", summary="test_x failed", text="E assert 1 == 2"
    )
    checks = client(gh).rest.checks
    runs = checks.list_for_ref("octo", "app", sha).parsed_data
    assert runs.total_count == 1 and runs.check_runs[0].conclusion == "failure"
    got = checks.get("octo", "app", run.id).parsed_data
    assert got.output.text == "E assert 1 == 2" and got.output.summary == "test_x failed" and got.head_sha == sha
    suites = checks.list_suites_for_ref("octo", "app", "ci").parsed_data
    assert suites.check_suites[0].conclusion == "failure"
    assert receiver.events("check_run")[0].check_run.conclusion == "failure"
    assert receiver.events("check_suite")[0].check_suite.conclusion == "failure"
    repos = client(gh).rest.repos
    repos.create_commit_status("octo", "app", sha, data={"state": "success", "context": "lint"})
    repos.create_commit_status("octo", "app", sha, data={"state": "failure", "context": "build", "description": "red"})
    combined = repos.get_combined_status_for_ref("octo", "app", "ci").parsed_data
    assert combined.state == "failure" and combined.total_count == 2
    assert [e.state for e in receiver.events("status")] == ["success", "failure"]


def test_review_with_a_line_comment(gh: FakeGitHub, tmp_path: pathlib.Path, receiver: Receiver) -> None:
    push_branch(gh, tmp_path, "rev")
    pulls = client(gh).rest.pulls
    pr = pulls.create("octo", "app", data={"title": "t", "head": "rev", "base": "main"}).parsed_data
    gh.submit_review("octo/app", pr.number, "bob", "CHANGES_REQUESTED", "please fix", [("a.py", 1, "say bye")])
    reviews = pulls.list_reviews("octo", "app", pr.number).parsed_data
    assert [(r.state, r.body, r.user.login) for r in reviews] == [("CHANGES_REQUESTED", "please fix", "bob")]  # type: ignore[union-attr]
    comments = pulls.list_review_comments("octo", "app", pr.number).parsed_data
    assert [(c.path, c.line, c.body) for c in comments] == [("a.py", 1, "say bye")]
    submitted = receiver.events("pull_request_review")[0]
    assert submitted.action == "submitted" and submitted.review.state == "changes_requested"
    assert receiver.events("pull_request_review_comment")[0].comment.path == "a.py"


def test_permissions(gh: FakeGitHub) -> None:
    gh.set_permission("octo/app", "bob", "write")
    gh.set_permission("octo/app", "carol", "read")
    gh.add_token("ghp_dan", "dan")
    repos = client(gh).rest.repos
    got = {
        u: repos.get_collaborator_permission_level("octo", "app", u).parsed_data.permission
        for u in ("bob", "carol", "dan")
    }
    assert got == {"bob": "write", "carol": "read", "dan": "none"}
    with pytest.raises(RequestFailed) as err:
        repos.get_collaborator_permission_level("octo", "nope", "bob")
    assert err.value.response.status_code == 404


def test_unknown_and_expired_tokens_get_401_for_rest_and_git(gh: FakeGitHub, tmp_path: pathlib.Path) -> None:
    gh.add_token("ghp_short", "alice", expires_in=0.5)
    assert client(gh, "ghp_short").rest.issues.list_for_repo("octo", "app").status_code == 200
    time.sleep(0.6)
    for token in ("ghp_short", "ghp_unknown"):
        with pytest.raises(RequestFailed) as err:
            client(gh, token).rest.issues.list_for_repo("octo", "app")
        assert err.value.response.status_code == 401 and err.value.response.json()["message"] == "Bad credentials"
    done = run_git(
        "-c", "credential.helper=", "clone", "-q", gh.clone_url("octo/app", "ghp_unknown"), str(tmp_path / "x")
    )
    assert done.returncode != 0
    assert [(r.path, r.status) for r in gh.requests][-2:] == [("/repos/octo/app/issues", 401)] * 2


def _app_key() -> tuple[str, bytes]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return private.decode(), public


LIFETIME = 4.0
"""The installation tokens' life in the expiry test."""


def test_app_installation_tokens_clone_expire_and_refresh(gh: FakeGitHub, tmp_path: pathlib.Path) -> None:
    private, public = _app_key()
    # ids of its own: githubkit caches installation tokens process-wide by app and installation, and
    # tests/controlplane/services/test_forge_client.py's app 42 / installation 7 token is unknown here
    # long enough that a loaded machine still uses a token before it ends (1 s did not, on CI)
    gh.add_app(4242, public, 77, slug="drover", owner="octo", token_lifetime=LIFETIME)
    app = GitHub(AppAuthStrategy(4242, private), base_url=gh.base_url)
    assert app.rest.apps.get_repo_installation("octo", "app").parsed_data.id == 77
    installation = GitHub(AppInstallationAuthStrategy(4242, private, 77), base_url=gh.base_url)
    assert installation.rest.issues.create("octo", "app", title="by the app").parsed_data.user.login == "drover[bot]"  # type: ignore[union-attr]
    minted_at = time.time()
    token = app.rest.apps.create_installation_access_token(77).parsed_data
    assert datetime.datetime.strptime(token.expires_at, "%Y-%m-%dT%H:%M:%SZ").year >= 2026
    assert run_git("clone", "-q", gh.clone_url("octo/app", token.token), str(tmp_path / "c")).returncode == 0
    time.sleep(max(0.0, minted_at + LIFETIME + 0.2 - time.time()))
    with pytest.raises(RequestFailed) as err:
        client(gh, token.token).rest.issues.list_for_repo("octo", "app")
    assert err.value.response.status_code == 401
    assert (
        run_git(
            "-c", "credential.helper=", "clone", "-q", gh.clone_url("octo/app", token.token), str(tmp_path / "d")
        ).returncode
        != 0
    )
    assert installation.rest.issues.list_for_repo("octo", "app").status_code == 200  # githubkit fetched a new one
    minted = [r for r in gh.requests if r.path == "/app/installations/77/access_tokens" and r.status == 201]
    assert len(minted) >= 3 and all(r.token == "jwt:4242" for r in minted)


def test_bad_jwts_get_401(gh: FakeGitHub) -> None:
    private, public = _app_key()
    other, _ = _app_key()
    gh.add_app(42, public, 7)
    for strategy in (AppAuthStrategy(42, other), AppAuthStrategy(43, private)):
        with pytest.raises(RequestFailed) as err:
            as_app = GitHub(strategy, base_url=gh.base_url)
            as_app.rest.apps.create_installation_access_token(7)
        assert err.value.response.status_code == 401
    with pytest.raises(RequestFailed) as err:  # a token is not a JWT
        client(gh).rest.apps.create_installation_access_token(7)
    assert err.value.response.status_code == 401
    assert not [r for r in gh.requests if r.status == 201]
