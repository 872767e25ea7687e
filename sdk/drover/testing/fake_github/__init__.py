"""A fake GitHub for tests: a real HTTP server on 127.0.0.1 that speaks the REST shapes githubkit parses,
serves each repository over git smart HTTP, authenticates tokens and GitHub App JWTs, and delivers signed
webhooks, with the test playing the CI (check runs) and the reviewer.

In a test::

    with FakeGitHub(tmp_path, webhook_url=receiver, webhook_secret="s") as gh:
        repo = gh.create_repo("octo/app")                    # a bare git repo with a README on main
        gh.add_token("ghp_x", "alice")                       # a PAT; gh.add_app(...) for App auth
        client = GitHub(TokenAuthStrategy("ghp_x"), base_url=gh.base_url)
        # git clone http://x-access-token:ghp_x@127.0.0.1:PORT/octo/app.git
        run = gh.complete_check_run("octo/app", "main", "ci", "failure", summary="1 failed", text="...")
        gh.submit_review("octo/app", 1, "bob", "CHANGES_REQUESTED", "fix", [("a.py", 3, "here")])
        assert gh.deliveries[-1].status == 200
        assert [r.path for r in gh.requests] == [...]

REST lives under `base_url` (http://127.0.0.1:PORT/api/v3/, GitHub Enterprise style); every call needs
`Authorization: token|Bearer T` with a token the fake knows and that has not expired (401 "Bad credentials"
otherwise), app routes an RS256 JWT of an added app. Missing things answer 404 {"message": "Not Found"},
invalid input 422 "Validation Failed" with `errors`, as GitHub does."""

from __future__ import annotations

import pathlib
from typing import Any

from drover.testing.fake_github import git, shapes
from drover.testing.fake_github.forge import Forge
from drover.testing.fake_github.records import App, CheckRun, Delivery, Repo, Request, Review, ReviewComment
from drover.testing.fake_github.server import PREFIX, serve

__all__ = ["App", "CheckRun", "Delivery", "FakeGitHub", "Repo", "Request", "Review"]


class FakeGitHub(Forge):
    """The fake forge and its server. Use as a context manager, or call start() and stop()."""

    def __init__(
        self,
        root: pathlib.Path,
        *,
        webhook_url: str | None = None,
        webhook_secret: str = "",
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        super().__init__(pathlib.Path(root))
        self.hooks.url, self.hooks.secret = webhook_url, webhook_secret
        self._address = (host, port)
        self._server: Any = None

    def start(self) -> FakeGitHub:
        self._server, _ = serve(self, *self._address)
        host, port = self._server.server_address[:2]
        self.site = shapes.Site(f"http://{host}:{port}{PREFIX}", f"http://{host}:{port}")
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeGitHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        """The REST root for githubkit's `base_url` (with its trailing slash)."""
        return self.site.api + "/"

    def clone_url(self, full_name: str, token: str | None = None) -> str:
        """The repository's git URL, with `token` as the Basic password (user x-access-token) when given."""
        creds = f"x-access-token:{token}@" if token else ""
        return f"{self.site.web.replace('http://', 'http://' + creds)}/{full_name}.git"

    # -- the webhook --------------------------------------------------------------------------------------

    def set_webhook(self, url: str, secret: str) -> Delivery:
        """Point the webhook at `url`, signed with `secret`, and ping it as GitHub does on creation."""
        self.hooks.url, self.hooks.secret = url, secret
        hook = {"type": "App", "id": self.hooks.hook_id, "name": "web", "active": True, "events": ["*"]}
        hook |= {"created_at": shapes.now(), "updated_at": shapes.now()}
        hook["config"] = {"content_type": "json", "insecure_ssl": "0", "url": url}
        payload = {"zen": "Keep it logically awesome.", "hook_id": self.hooks.hook_id, "hook": hook}
        return self.hooks.send(self.hooks.make("ping", payload))

    def deliver(self, event: str, payload: dict[str, Any], *, sign: bool = True, secret: str | None = None) -> Delivery:
        """Send any payload as `event`: unsigned with sign=False, or signed with a wrong `secret` (forgeries)."""
        return self.hooks.send(self.hooks.make(event, payload, sign=sign, secret=secret))

    def redeliver(self, delivery_id: str) -> Delivery:
        """Send a recorded delivery again: the same X-GitHub-Delivery and body (GitHub's "Redeliver")."""
        return self.hooks.send(self.hooks.find(delivery_id))

    @property
    def deliveries(self) -> list[Delivery]:
        """Every webhook delivery so far, in order, each with the receiver's last status code."""
        return list(self.hooks.deliveries)

    def recorded(self) -> list[Request]:
        """Every REST request so far (method, path below the API root, token or jwt:APP, status, body)."""
        return list(self.requests)

    # -- the test as CI and as reviewer -------------------------------------------------------------------

    def complete_check_run(
        self,
        full_name: str,
        ref: str,
        name: str,
        conclusion: str = "success",
        *,
        title: str | None = None,
        summary: str | None = None,
        text: str | None = None,
    ) -> CheckRun:
        """Create (or complete again) check run `name` on the commit `ref` names, with `conclusion` and output;
        sends check_run completed, and check_suite completed once no run of the suite is still going."""
        repo = self.repos[full_name]
        sha = git.sha(repo.path, ref)
        if sha is None:
            raise LookupError(f"{full_name} has no commit {ref}")
        stamp = shapes.now()
        with self.lock:
            suite = self.suite_for(repo, sha, ref if git.branch(repo.path, ref) else None)
            runs = self.runs[full_name]
            run = next((r for r in runs.values() if r.head_sha == sha and r.name == name), None)
            if run is None:
                run = CheckRun(self.next_id(), suite.id, sha, name, stamp)
                runs[run.id] = run
                suite.runs += 1
            run.status, run.conclusion, run.completed_at = "completed", conclusion, stamp
            run.title, run.summary, run.text = title, summary, text
            self._settle(suite, [r for r in runs.values() if r.suite == suite.id])
            sender = next(iter(self.apps.values())).slug + "[bot]" if self.apps else repo.owner
            self.event("check_run", repo, sender, action="completed", check_run=self.run_json(repo, run))
            if suite.status == "completed":
                self.event("check_suite", repo, sender, action="completed", check_suite=self.suite_json(repo, suite))
        self.flush()
        return run

    @staticmethod
    def _settle(suite: Any, runs: list[CheckRun]) -> None:
        order = ["action_required", "cancelled", "timed_out", "failure", "neutral", "skipped", "success"]
        suite.updated_at = shapes.now()
        if all(r.status == "completed" for r in runs):
            suite.status = "completed"
            suite.conclusion = min((r.conclusion or "success" for r in runs), key=order.index)

    def submit_review(
        self, full_name: str, number: int, author: str, state: str, body: str = "",
        comments: list[tuple[str, int, str]] = (),  # type: ignore[assignment]
    ) -> Review:  # fmt: skip
        """`author` reviews pull `number` (state APPROVED, CHANGES_REQUESTED or COMMENTED) with line comments
        (path, line, body); sends pull_request_review submitted and one pull_request_review_comment each."""
        repo, stamp = self.repos[full_name], shapes.now()
        with self.lock:
            pr = self.issues[full_name][number]
            made = Review(self.next_id(), number, author, state.upper(), body, pr.head_sha, stamp)
            self.reviews[full_name][made.id] = made
            pull = self.pull_json(repo, pr)
            for path, line, text in comments:
                item = ReviewComment(self.next_id(), made.id, number, path, line, text, author, pr.head_sha, stamp)
                self.review_comments[full_name][item.id] = item
                pr.review_comments += 1
                shape = self.review_comment_json(repo, pr, item)
                self.event(
                    "pull_request_review_comment", repo, author, action="created", comment=shape, pull_request=pull
                )
            review = self.review_json(repo, pr, made)
            review["state"] = made.state.lower()  # webhooks say changes_requested where REST says CHANGES_REQUESTED
            self.event("pull_request_review", repo, author, action="submitted", review=review, pull_request=pull)
        self.flush()
        return made
