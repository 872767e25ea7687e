"""What the fake forge holds: plain records, rendered to GitHub's JSON by `shapes`."""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any


@dataclasses.dataclass
class Repo:
    id: int
    owner: str
    name: str
    path: pathlib.Path
    """The bare git repository behind it."""
    default_branch: str = "main"
    permissions: dict[str, str] = dataclasses.field(default_factory=dict)
    """login -> admin, maintain, write, triage or read; anyone else has none."""

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.name}"


@dataclasses.dataclass
class Label:
    id: int
    name: str
    color: str = "ededed"
    description: str | None = None


@dataclasses.dataclass
class Issue:
    """An issue, or a pull request (GitHub numbers both in one sequence; every pull is an issue too)."""

    id: int
    number: int
    title: str
    body: str | None
    author: str
    created_at: str
    updated_at: str
    state: str = "open"
    closed_at: str | None = None
    labels: list[Label] = dataclasses.field(default_factory=list)
    comment_count: int = 0
    pull: bool = False
    head: str = ""
    base: str = ""
    head_sha: str = ""
    base_sha: str = ""
    draft: bool = False
    merged_at: str | None = None
    merged_by: str | None = None
    merge_sha: str | None = None
    review_comments: int = 0


@dataclasses.dataclass
class Comment:
    id: int
    issue: int
    body: str
    author: str
    created_at: str
    updated_at: str


@dataclasses.dataclass
class CheckSuite:
    id: int
    head_sha: str
    head_branch: str | None
    created_at: str
    updated_at: str
    status: str = "queued"
    conclusion: str | None = None
    runs: int = 0


@dataclasses.dataclass
class CheckRun:
    id: int
    suite: int
    head_sha: str
    name: str
    started_at: str
    status: str = "queued"
    conclusion: str | None = None
    completed_at: str | None = None
    title: str | None = None
    summary: str | None = None
    text: str | None = None
    details_url: str | None = None


@dataclasses.dataclass
class Status:
    id: int
    sha: str
    state: str
    context: str
    creator: str
    created_at: str
    description: str | None = None
    target_url: str | None = None


@dataclasses.dataclass
class Review:
    id: int
    pull: int
    author: str
    state: str
    body: str
    commit_id: str
    submitted_at: str


@dataclasses.dataclass
class ReviewComment:
    id: int
    review: int
    pull: int
    path: str
    line: int
    body: str
    author: str
    commit_id: str
    created_at: str


@dataclasses.dataclass
class App:
    id: int
    slug: str
    public_key: Any
    """The RSA public key that verifies the app's JWTs (a `cryptography` key object)."""
    installation_id: int
    owner: str
    token_lifetime: float


@dataclasses.dataclass
class Token:
    login: str
    expires_at: float | None = None
    """time.time() after which it is refused; None: never (a personal access token)."""
    installation: int | None = None


@dataclasses.dataclass(frozen=True)
class Request:
    """One REST request as the fake received it: the token is "" for none, "jwt:APP_ID" for an app's JWT."""

    method: str
    path: str
    token: str
    status: int
    body: Any = None


@dataclasses.dataclass
class Delivery:
    id: str
    event: str
    body: bytes
    headers: dict[str, str]
    status: int | None = None
    """The receiver's answer; None if it could not be reached."""
    attempts: list[int | None] = dataclasses.field(default_factory=list)
