"""A project's link to its repository on a forge (issue 28), the columns of `projects` that hold it: mixed
into `controlplane.store.models.Project`."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import BigInteger, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column


class ForgeLink:
    """Which repository on which forge, and the secrets Drover uses there, sealed like the git credential."""

    # the repository on a forge (issue 28): issues in, pull requests out
    forge: Mapped[str] = mapped_column(String(16), default="")  # "" | github
    forge_repo: Mapped[str] = mapped_column(String(200), default="")  # owner/name
    forge_api_url: Mapped[str] = mapped_column(String(500), default="")
    forge_label: Mapped[str] = mapped_column(String(100), default="drover")
    max_fix_rounds: Mapped[int] = mapped_column(Integer, default=3)
    # what an issue's Change is made of and where its pull request goes
    forge_budget_usd: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")  # 0: no Change budget
    forge_branch_template: Mapped[str] = mapped_column(
        String(300), default="drover/issue-{number}", server_default="drover/issue-{number}"
    )  # the pull request's branch: {number}, {change}, {slug}
    forge_check_command: Mapped[str] = mapped_column(Text, default="", server_default="")  # "": no check Task
    # the forge credential: sealed like the git credential, never returned
    forge_credential_kind: Mapped[str] = mapped_column(String(16), default="")  # token | app; "": none
    forge_credential_sealed: Mapped[str] = mapped_column(Text, default="")
    forge_credential_fingerprint: Mapped[str] = mapped_column(String(16), default="")
    forge_app_id: Mapped[int] = mapped_column(BigInteger, default=0)
    forge_installation_id: Mapped[int] = mapped_column(BigInteger, default=0)
    forge_credential_set_at: Mapped[dt.datetime | None] = mapped_column(nullable=True)
    forge_credential_set_by: Mapped[str] = mapped_column(String(200), default="")
    # the forge's webhook secret: sealed, answered once by RotateWebhookSecret
    webhook_secret_sealed: Mapped[str] = mapped_column(Text, default="")
    webhook_secret_set_at: Mapped[dt.datetime | None] = mapped_column(nullable=True)
    webhook_secret_set_by: Mapped[str] = mapped_column(String(200), default="")


class ChangeBase:
    """A Change's base branch (`changes.base_branch`): mixed into `controlplane.store.models.Change`."""

    base_branch: Mapped[str] = mapped_column(String(300), default="", server_default="")
    """The branch its Tasks start from and its candidate is composed on ("": the project's branch); a fix
    round's is its pull request's branch, so the round's candidate fast-forwards it."""


class DeliveryColumns:
    """One webhook delivery kept for the forge loop (`forge_deliveries`), once per X-GitHub-Delivery: the
    few fields the loop reads, never the body or anything secret."""

    __tablename__ = "forge_deliveries"

    delivery_id: Mapped[str] = mapped_column(String(100), primary_key=True)  # X-GitHub-Delivery
    project: Mapped[str] = mapped_column(String(200), index=True)
    event: Mapped[str] = mapped_column(String(64))  # X-GitHub-Event
    action: Mapped[str] = mapped_column(String(40), default="")
    number: Mapped[int] = mapped_column(BigInteger, default=0)  # issue or pull request; 0: none
    label: Mapped[str] = mapped_column(String(100), default="")
    sender: Mapped[str] = mapped_column(String(200), default="")
    head_sha: Mapped[str] = mapped_column(String(64), default="")
    conclusion: Mapped[str] = mapped_column(String(40), default="")  # a check's conclusion, a status's state
    comment_id: Mapped[int] = mapped_column(BigInteger, default=0)
    state: Mapped[str] = mapped_column(String(16), default="received")  # received | done | failed
    reason: Mapped[str] = mapped_column(Text, default="", server_default="")  # why it failed
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")  # tries that failed passing
    next_attempt_at: Mapped[dt.datetime | None] = mapped_column(nullable=True)  # None: at once
    received_at: Mapped[dt.datetime] = mapped_column()


class IssueChangeColumns:
    """The Change an issue on the forge started (`forge_issue_changes`): while one is not finished, the
    issue starts no other; with the delivery that started it and Drover's comment on the issue (0: not
    posted yet)."""

    __tablename__ = "forge_issue_changes"
    __table_args__ = (
        Index("ix_forge_issue_changes_issue", "project", "issue_number"),
        Index("ix_forge_issue_changes_pr", "project", "pr_number"),
    )
    change_id: Mapped[str] = mapped_column(String(40), ForeignKey("changes.id"), primary_key=True)
    project: Mapped[str] = mapped_column(String(200))
    issue_number: Mapped[int] = mapped_column(BigInteger)
    delivery_id: Mapped[str] = mapped_column(String(100))
    comment_id: Mapped[int] = mapped_column(BigInteger, default=0)
    created_at: Mapped[dt.datetime] = mapped_column()
    # the Change's place in the issue's loop: round 0 starts the pull request, rounds 1.. fix it
    round: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    pr_number: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")  # 0: none opened yet
    pr_branch: Mapped[str] = mapped_column(String(300), default="", server_default="")
    outcome: Mapped[str] = mapped_column(String(24), default="", server_default="")
    """"": the Change is running or its end is not yet told to the forge; pr_opened | pushed (a fix round's
    commits on the pull request's branch) | reported (its failure said on the issue) | failed (telling failed)."""
    outcome_reason: Mapped[str] = mapped_column(Text, default="", server_default="")
    comment_digest: Mapped[str] = mapped_column(String(64), default="", server_default="")
    """sha256 of the issue comment's last posted text: an unchanged comment is not edited again."""
