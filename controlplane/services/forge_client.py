"""The control plane's client of a project's forge (issue 28): GitHub's REST API through githubkit, at the
project's `forge_api_url`, authenticated with its sealed forge credential (a fine-grained token, or a
GitHub App: a JWT signed with its RSA key exchanged for an installation token, refreshed by githubkit).
githubkit is imported when a client is made, so the control plane's start does not pay for it.

Only what the forge loop uses so far: read an issue or one of its comments, comment on it and edit the
comment, open a pull request or find the open one from a branch, and a user's permission on the
repository. Every failure is a ForgeError saying which call and why, never quoting the credential."""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import hashlib
import threading
from typing import Any

from controlplane.domain.forge_rounds import FAILED_CHECK, FAILED_STATUS, Check, LineComment
from controlplane.services.credentials import Sealer, forge_credential
from controlplane.store.models import Project

TIMEOUT_SECONDS = 20.0
TOKEN_CACHES = 256
"""The most credentials whose installation tokens are kept (the least recently used is dropped)."""


class ForgeError(Exception):
    """A forge call failed: no usable credential, the forge unreachable, or an error answer. `status` is the
    forge's HTTP status, None when it could not be reached, 0 when the forge was not asked."""

    def __init__(self, message: str, status: int | None = 0) -> None:
        super().__init__(message)
        self.status = status


@dataclasses.dataclass(frozen=True)
class ForgeAccess:
    """What a client needs, read from the project's row inside a transaction, used outside it."""

    repo: str  # owner/name
    api_url: str
    kind: str  # token | app
    secret: str = dataclasses.field(repr=False)  # the token, or the App's private key: never printed
    app_id: int = 0
    installation_id: int = 0

    @classmethod
    def of(cls, project: Project, sealer: Sealer) -> ForgeAccess:
        """ForgeError when the project has no forge credential or it does not open."""
        try:
            kind, secret = forge_credential(project, sealer)
        except ValueError as err:
            raise ForgeError(f"project {project.name}: its forge credential does not open: {err}") from None
        if not kind:
            raise ForgeError(f"project {project.name} has no forge credential (SetForgeCredential)")
        return cls(
            project.forge_repo, project.forge_api_url, kind, secret, project.forge_app_id, project.forge_installation_id
        )


@dataclasses.dataclass(frozen=True)
class Issue:
    number: int
    title: str
    body: str
    state: str
    pull_request: bool = False
    """The number is a pull request's (GitHub's issues API answers for pull requests too)."""


@dataclasses.dataclass(frozen=True)
class Comment:
    id: int
    body: str
    user: str  # the author's login
    user_type: str  # User | Bot | Organization


class _TokenCaches:
    """One githubkit cache per credential: githubkit's default cache is one per process and keys an
    installation token by App id and installation id only, so two forges (or a rotated App key) sharing
    those ids would be handed each other's token. Keyed by a digest of everything that identifies the
    credential, so a token is reused across clients of one project and never crosses to another."""

    def __init__(self) -> None:
        self._caches: collections.OrderedDict[str, Any] = collections.OrderedDict()
        self._lock = threading.Lock()

    def of(self, access: ForgeAccess) -> Any:
        from githubkit.cache import MemCacheStrategy

        parts = (access.api_url, access.kind, str(access.app_id), str(access.installation_id), access.secret)
        key = hashlib.sha256("\0".join(parts).encode()).hexdigest()
        with self._lock:
            cache = self._caches.pop(key, None) or MemCacheStrategy()
            self._caches[key] = cache
            while len(self._caches) > TOKEN_CACHES:
                self._caches.popitem(last=False)
            return cache


_token_caches = _TokenCaches()


class ForgeClient:
    """One project's repository on GitHub; use as `async with ForgeClient(access) as forge:`."""

    def __init__(self, access: ForgeAccess) -> None:
        from githubkit import AppInstallationAuthStrategy, GitHub, TokenAuthStrategy

        auth: Any = (
            TokenAuthStrategy(access.secret)
            if access.kind == "token"
            else AppInstallationAuthStrategy(access.app_id, access.secret, access.installation_id)
        )
        self.owner, _, self.name = access.repo.partition("/")
        self.github: Any = GitHub(
            auth,
            base_url=access.api_url.rstrip("/") + "/",
            timeout=TIMEOUT_SECONDS,
            auto_retry=False,
            cache_strategy=_token_caches.of(access),
            http_cache=False,  # GitHub's `max-age=60` would hand the loop a minute-old pull request or check
        )

    async def __aenter__(self) -> ForgeClient:
        await self.github.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.github.__aexit__(*exc)

    async def _call(self, what: str, method: Any, *args: Any, **kwargs: Any) -> Any:
        from githubkit.exception import GitHubException, RequestFailed
        from pydantic import ValidationError

        try:
            return (await method(self.owner, self.name, *args, **kwargs)).parsed_data
        except ValidationError as err:  # an answer not of GitHub's shape: a refusal, not a passing failure
            why = f"{err.error_count()} fields not as GitHub's API describes them"
            raise ForgeError(f"{what} on {self.owner}/{self.name}: the forge's answer is malformed ({why})") from None
        except RequestFailed as err:
            status = err.response.status_code
            raise ForgeError(f"{what} on {self.owner}/{self.name}: HTTP {status}", status) from None
        except GitHubException as err:
            raise ForgeError(f"{what} on {self.owner}/{self.name}: {type(err).__name__}: {err}", None) from None

    async def get_issue(self, number: int) -> Issue:
        found = await self._call(f"reading issue #{number}", self.github.rest.issues.async_get, number)
        return Issue(found.number, found.title or "", found.body or "", found.state or "", bool(found.pull_request))

    async def get_comment(self, comment_id: int) -> Comment:
        """An issue comment (a webhook delivery keeps its id, never its body)."""
        method = self.github.rest.issues.async_get_comment
        found = await self._call(f"reading comment {comment_id}", method, comment_id)
        user = found.user
        return Comment(int(found.id), found.body or "", user.login if user else "", user.type if user else "")

    async def create_comment(self, number: int, body: str) -> int:
        """The new comment's id."""
        method = self.github.rest.issues.async_create_comment
        made = await self._call(f"commenting on issue #{number}", method, number, data={"body": body})
        return int(made.id)

    async def update_comment(self, comment_id: int, body: str) -> None:
        method = self.github.rest.issues.async_update_comment
        await self._call(f"editing comment {comment_id}", method, comment_id, data={"body": body})

    async def create_pull(self, title: str, body: str, head: str, base: str) -> int:
        """The new pull request's number; a ForgeError with status 422 when one from `head` exists already."""
        method = self.github.rest.pulls.async_create
        data = {"title": title, "body": body, "head": head, "base": base}
        made = await self._call(f"opening a pull request from {head}", method, data=data)
        return int(made.number)

    async def find_pull(self, head: str, base: str) -> int:
        """The open pull request from branch `head` into `base` (0: none)."""
        method = self.github.rest.pulls.async_list
        found = await self._call(
            f"listing pull requests from {head}", method, state="open", head=f"{self.owner}:{head}", base=base
        )
        return next((int(p.number) for p in found if p.head.ref == head and p.base.ref == base), 0)

    async def permission(self, login: str) -> str:
        """admin, write, read or none (GitHub's legacy names: maintain counts as write, triage as read); none
        for a login the forge does not know."""
        method = self.github.rest.repos.async_get_collaborator_permission_level
        try:
            found = await self._call(f"reading {login}'s permission", method, login)
        except ForgeError as err:
            if err.status == 404:
                return "none"
            raise
        return str(found.permission)

    # -- fix rounds on a pull request (controlplane.dispatch.forge_rounds) -----------------------------------

    async def get_pull(self, number: int) -> PullHead:
        found = await self._call(f"reading pull request #{number}", self.github.rest.pulls.async_get, number)
        return PullHead(int(found.number), str(found.state), str(found.head.sha), str(found.head.ref))

    async def failing_checks(self, ref: str) -> list[Check]:
        """The check runs on `ref` that ended failure or timed_out, and its commit statuses whose newest
        state (per context) is failure or error, each with its output as the forge gives it."""
        method = self.github.rest.checks.async_list_for_ref
        runs = await self._call(f"reading the check runs of {ref[:12]}", method, ref, per_page=100)
        found = [
            Check(r.name, str(r.conclusion), r.output.title or "", r.output.summary or "", r.output.text or "")
            for r in runs.check_runs
            if r.conclusion in FAILED_CHECK
        ]
        method = self.github.rest.repos.async_list_commit_statuses_for_ref
        seen: set[str] = set()
        for status in await self._call(f"reading the statuses of {ref[:12]}", method, ref, per_page=100):
            if status.context in seen:
                continue  # newest first: an older state of the same context is stale
            seen.add(status.context)
            if status.state in FAILED_STATUS:
                found.append(
                    Check(status.context, status.state, summary=status.description or "", url=status.target_url or "")
                )
        return found

    async def review_body(self, number: int, review_id: int) -> str:
        method = self.github.rest.pulls.async_list_reviews
        reviews = await self._call(f"reading the reviews of pull request #{number}", method, number, per_page=100)
        return next((r.body or "" for r in reviews if r.id == review_id), "")

    async def line_comments(self, number: int, review_id: int, since: dt.datetime) -> list[LineComment]:
        """The pull request's line comments of review `review_id`, and any made after `since`."""
        method = self.github.rest.pulls.async_list_review_comments
        found = await self._call(f"reading the line comments of pull request #{number}", method, number, per_page=100)
        return [
            LineComment(c.path, int(c.line or c.original_line or 0), c.body, c.user.login if c.user else "")
            for c in found
            if (review_id and c.pull_request_review_id == review_id) or c.created_at >= since
        ]


@dataclasses.dataclass(frozen=True)
class PullHead:
    number: int
    state: str  # open | closed
    head_sha: str
    head_ref: str
