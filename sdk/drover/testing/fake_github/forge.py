"""The fake forge's state and what a test does to it: repositories, users and their permissions, tokens and
apps, and the parts a test plays itself (the CI that completes check runs, the reviewer)."""

from __future__ import annotations

import itertools
import pathlib
import secrets
import threading
import time
from typing import Any

from cryptography.hazmat.primitives import serialization

from drover.testing.fake_github import git, shapes
from drover.testing.fake_github.records import (
    App,
    CheckRun,
    CheckSuite,
    Comment,
    Delivery,
    Issue,
    Label,
    Repo,
    Request,
    Review,
    ReviewComment,
    Status,
    Token,
)
from drover.testing.fake_github.webhooks import Hooks


class Forge:
    """Everything the fake holds. Each collection is keyed by the repository's full name."""

    def __init__(self, root: pathlib.Path) -> None:
        self.root = root
        self.site = shapes.Site("http://127.0.0.1:0/api/v3", "http://127.0.0.1:0")
        self.lock = threading.RLock()
        self._ids = itertools.count(1001)
        self.users: dict[str, int] = {}
        self.tokens: dict[str, Token] = {}
        self.apps: dict[int, App] = {}
        self.repos: dict[str, Repo] = {}
        self.labels: dict[str, dict[str, Label]] = {}
        self.issues: dict[str, dict[int, Issue]] = {}
        self.comments: dict[str, dict[int, Comment]] = {}
        self.suites: dict[str, dict[int, CheckSuite]] = {}
        self.runs: dict[str, dict[int, CheckRun]] = {}
        self.statuses: dict[str, list[Status]] = {}
        self.reviews: dict[str, dict[int, Review]] = {}
        self.review_comments: dict[str, dict[int, ReviewComment]] = {}
        self.requests: list[Request] = []
        self.failing: list[tuple[str, int, str]] = []  # (login, status, path): the next REST requests fail
        self.hooks = Hooks()
        self.outbox: list[Delivery] = []

    def outage(self, login: str, count: int, status: int = 502, path: str = "") -> None:
        """The next `count` REST requests made as `login` (to `path` below the API root, when given) are
        answered `status` (502: GitHub's "Server Error")."""
        with self.lock:
            self.failing.extend([(login, status, path)] * count)

    def failure_for(self, login: str, path: str) -> int | None:
        """The status to answer `login`'s request to `path` with, when an outage is under way for it."""
        with self.lock:
            for i, (who, status, only) in enumerate(self.failing):
                if who == login and only in ("", path):
                    del self.failing[i]
                    return status
        return None

    def next_id(self) -> int:
        return next(self._ids)

    # -- identities ---------------------------------------------------------------------------------------

    def user(self, login: str) -> dict[str, Any]:
        with self.lock:
            ident = self.users.setdefault(login, self.next_id())
        return shapes.user(self.site, login, ident, "Bot" if login.endswith("[bot]") else "User")

    def add_token(self, token: str, login: str, *, expires_in: float | None = None) -> str:
        """Accept `token` (a personal access or fine-grained token) as `login`, for `expires_in` seconds."""
        self.user(login)
        self.tokens[token] = Token(login, None if expires_in is None else time.time() + expires_in)
        return token

    def revoke(self, token: str) -> None:
        self.tokens.pop(token, None)

    def add_app(
        self,
        app_id: int,
        public_key: bytes | Any,
        installation_id: int,
        *,
        slug: str = "drover",
        owner: str = "octo",
        token_lifetime: float = 3600.0,
    ) -> App:
        """Install GitHub App `app_id` (its JWTs checked with `public_key`, PEM or a key object) as
        `installation_id` on `owner`'s repositories. Its installation tokens live `token_lifetime` seconds."""
        key = serialization.load_pem_public_key(public_key) if isinstance(public_key, bytes) else public_key
        self.apps[app_id] = App(app_id, slug, key, installation_id, owner, token_lifetime)
        self.user(f"{slug}[bot]")
        return self.apps[app_id]

    def issue_installation_token(self, app: App) -> tuple[str, float]:
        token = "ghs_" + secrets.token_hex(18)
        expires = time.time() + app.token_lifetime
        self.tokens[token] = Token(f"{app.slug}[bot]", expires, installation=app.installation_id)
        return token, expires

    def login_of(self, token: str) -> str | None:
        """Who a token is, None when it is unknown or expired."""
        found = self.tokens.get(token)
        if found is None or (found.expires_at is not None and found.expires_at <= time.time()):
            return None
        return found.login

    # -- repositories -------------------------------------------------------------------------------------

    def create_repo(self, full_name: str, files: dict[str, str] | None = None, default_branch: str = "main") -> Repo:
        """A repository backed by a bare git repository whose default branch holds one commit of `files`
        (a README when not given; {} for an empty repository)."""
        owner, name = full_name.split("/")
        path = self.root / owner / f"{name}.git"
        git.init(path, default_branch, {"README.md": f"# {name}\n"} if files is None else files)
        repo = Repo(self.next_id(), owner, name, path, default_branch)
        with self.lock:
            self.repos[full_name] = repo
            for table in (self.labels, self.issues, self.comments, self.suites, self.runs, self.reviews):
                table[full_name] = {}
            self.review_comments[full_name], self.statuses[full_name] = {}, []
        self.user(owner)
        return repo

    def set_permission(self, full_name: str, login: str, permission: str) -> None:
        """admin, maintain, write, triage, read or none: what the collaborator permission lookup answers."""
        self.user(login)
        self.repos[full_name].permissions[login] = permission

    def repo_json(self, repo: Repo) -> dict[str, Any]:
        return shapes.repository(self.site, repo, self.user(repo.owner))

    def app_json(self) -> dict[str, Any]:
        """The app that owns check suites: the added one, or a stand-in CI app when none was added."""
        app = next(iter(self.apps.values()), None) or App(1, "fake-ci", None, 0, "github", 0.0)
        return shapes.app(self.site, app, self.user(app.owner))

    def event(self, event: str, repo: Repo, sender: str, **body: Any) -> None:
        """Send webhook `event` about `repo` by `sender` (with the installation, when there is an app)."""
        payload = body | {"repository": self.repo_json(repo), "sender": self.user(sender)}
        app = next(iter(self.apps.values()), None)
        if app is not None:
            payload["installation"] = {"id": app.installation_id, "node_id": shapes.node_id("MDIn", app.id)}
        with self.lock:
            self.outbox.append(self.hooks.make(event, payload))

    def flush(self) -> None:
        """Deliver the events made so far, outside the lock (a receiver may call the API back)."""
        with self.lock:
            ready, self.outbox[:] = list(self.outbox), []
        for delivery in ready:
            self.hooks.send(delivery)

    # -- issues and pulls ---------------------------------------------------------------------------------

    def new_issue(self, repo: Repo, title: str, body: str | None, author: str, **pull: Any) -> Issue:
        with self.lock:
            table = self.issues[repo.full_name]
            stamp = shapes.now()
            item = Issue(self.next_id(), len(table) + 1, title, body, author, stamp, stamp, **pull)
            table[item.number] = item
        return item

    def label(self, repo: Repo, name: str, color: str = "ededed", description: str | None = None) -> Label:
        with self.lock:
            return self.labels[repo.full_name].setdefault(name, Label(self.next_id(), name, color, description))

    def issue_json(self, repo: Repo, item: Issue) -> dict[str, Any]:
        return shapes.issue(self.site, repo, item, self.user)

    def comment_json(self, repo: Repo, item: Comment) -> dict[str, Any]:
        return shapes.comment(self.site, repo, item, self.user)

    def pull_json(self, repo: Repo, item: Issue) -> dict[str, Any]:
        return shapes.pull(self.site, repo, item, self.user, self.repo_json(repo))

    # -- the fake CI --------------------------------------------------------------------------------------

    def suite_for(self, repo: Repo, sha: str, branch: str | None) -> CheckSuite:
        with self.lock:
            for suite in self.suites[repo.full_name].values():
                if suite.head_sha == sha:
                    return suite
            stamp = shapes.now()
            suite = CheckSuite(self.next_id(), sha, branch, stamp, stamp)
            self.suites[repo.full_name][suite.id] = suite
            return suite

    def suite_json(self, repo: Repo, suite: CheckSuite) -> dict[str, Any]:
        commit = git.commit(repo.path, suite.head_sha)
        return shapes.check_suite(self.site, repo, suite, self.repo_json(repo), self.app_json(), commit)

    def run_json(self, repo: Repo, run: CheckRun) -> dict[str, Any]:
        suite = self.suites[repo.full_name][run.suite]
        return shapes.check_run(self.site, repo, run, {"id": suite.id}, self.app_json())

    def status_json(self, repo: Repo, item: Status) -> dict[str, Any]:
        return shapes.status(self.site, repo, item, self.user(item.creator))

    def review_json(self, repo: Repo, pr: Issue, item: Review) -> dict[str, Any]:
        return shapes.review(self.site, repo, pr, item, self.user)

    def review_comment_json(self, repo: Repo, pr: Issue, item: ReviewComment) -> dict[str, Any]:
        return shapes.review_comment(self.site, repo, pr, item, self.user)
