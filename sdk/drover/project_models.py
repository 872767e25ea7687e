"""What the SDK returns about projects (`client.projects`): a project's settings, which git and forge
credentials it has and whether it has a webhook secret, never the secrets themselves. Re-exported by
`drover.models`."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class GitCredential:
    """What git credential a project has (never the secret): kind "" when none is set."""

    kind: str  # token, ssh_key or ""
    set_at: str  # RFC 3339
    set_by: str  # the token that set it
    fingerprint: str  # first 12 hex digits of its SHA-256


@dataclasses.dataclass(frozen=True)
class ForgeCredential:
    """What forge credential a project has (never the secret): kind "" when none is set."""

    kind: str  # token, app or ""
    app_id: int  # kind app: the GitHub App's id
    installation_id: int  # kind app: its installation
    set_at: str  # RFC 3339
    set_by: str
    fingerprint: str  # first 12 hex digits of its SHA-256


@dataclasses.dataclass(frozen=True)
class WebhookSecret:
    """Whether the project has a webhook secret and when it was set (never the secret)."""

    set: bool
    set_at: str  # RFC 3339
    set_by: str


@dataclasses.dataclass(frozen=True)
class WebhookSecretRotated:
    """RotateWebhookSecret's answer: the only time the new secret is shown."""

    project: Project
    secret: str


@dataclasses.dataclass(frozen=True)
class Project:
    """A repository, the branch runs start from, its pool and how its workspaces are prepared."""

    name: str
    repo: str
    branch: str
    pool: str
    commands: list[str]
    network: bool
    monthly_budget_usd: float
    answer_window_minutes: float
    build_outputs: list[str]
    git_token_file: str
    git_credential: GitCredential
    setup: list[str]
    setup_network: bool
    env: dict[str, str]
    git_name: str
    git_email: str
    branch_template: str
    cache_key_files: list[str]
    created_at: str  # RFC 3339
    updated_at: str
    forge: str  # "" or github
    forge_repo: str  # owner/name
    forge_api_url: str
    forge_label: str  # the label that hands an issue to Drover
    max_fix_rounds: int
    forge_credential: ForgeCredential
    webhook_secret: WebhookSecret
    forge_budget_usd: float  # each issue's Change budget (0: none)
    forge_branch_template: str  # the pull request's branch: {number}, {change}, {slug}
    forge_check_command: str  # the check Task's command ("": no check Task)
    max_active_runs_per_change: int  # at most this many runs of one Change active at once (default 8)
    weight: int  # the project's share of its pool's slots against the pool's other projects (default 1)
    max_open_sandboxes_per_change: int  # at most this many of them holding an open sandbox (default 4)
