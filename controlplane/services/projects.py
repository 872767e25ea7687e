"""Projects: a repository, its default branch and its pool."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from controlplane.domain import preparation
from controlplane.domain.names import NAME
from controlplane.store.events import add_event
from controlplane.store.models import Change, Project, utcnow
from drover.core.allowlist import policy_from_strings
from drover.core.build_outputs import check_patterns
from drover.errors import FailedPrecondition, InvalidArgument, NotFound


def add_project(
    s: Session,
    name: str,
    repo: str,
    branch: str = "main",
    pool: str = "",
    commands: list[str] | None = None,
    network: bool = False,
    git_token_file: str = "",
    monthly_budget_usd: float = 0.0,
    answer_window_minutes: float = 15.0,
    build_outputs: list[str] | None = None,
    *,
    setup: list[str] | None = None,
    setup_network: bool = True,
    env: dict[str, str] | None = None,
    git_name: str = "",
    git_email: str = "",
    branch_template: str = "",
    cache_key_files: list[str] | None = None,
) -> Project:
    """Create a project, or update the repository, branch and pool of an existing one."""
    if not NAME.fullmatch(name):
        raise InvalidArgument(
            f"{name!r} is not a project name: letters, digits, '.', '_', '-', at most 100", field="name"
        )
    if pool and not NAME.fullmatch(pool):
        raise InvalidArgument(f"{pool!r} is not a pool name", field="pool")
    if not branch.strip() or "\x00" in branch or len(branch) > 200:
        raise InvalidArgument("must be a branch name", field="branch")
    project = s.get(Project, name)
    created = project is None
    if project is None:
        project = Project(name=name)
        s.add(project)
    try:
        policy_from_strings(commands or [])
    except ValueError as err:
        raise InvalidArgument(str(err), field="commands") from None
    project.repo, project.branch, project.pool = repo, branch, pool
    project.commands, project.network = list(commands or []), network
    project.git_token_file = git_token_file
    if monthly_budget_usd < 0:
        raise InvalidArgument("must not be negative", field="monthly_budget_usd")
    project.monthly_budget_usd = monthly_budget_usd
    if not 0 <= answer_window_minutes <= 7 * 24 * 60:
        raise InvalidArgument("must be 0 (never park) to 10080 minutes", field="answer_window_minutes")
    project.answer_window_minutes = answer_window_minutes
    try:
        project.build_outputs = check_patterns(build_outputs or [])
    except ValueError as err:
        raise InvalidArgument(str(err), field="build_outputs") from None
    prepare_workspaces(project, setup, setup_network, env, (git_name, git_email), branch_template, cache_key_files)
    if not created:
        project.updated_at = utcnow()
    add_event(s, "project.added" if created else "project.updated", project=name, repo=repo, branch=branch, pool=pool)
    return project


def prepare_workspaces(
    project: Project,
    setup: list[str] | None,
    setup_network: bool,
    env: dict[str, str] | None,
    identity: tuple[str, str],
    branch_template: str,
    cache_key_files: list[str] | None,
) -> None:
    """Set how each run's workspace is prepared, each setting checked (InvalidArgument naming it)."""
    project.setup = preparation.check_setup(setup or [])
    project.setup_network = setup_network
    project.env = preparation.check_env(env or {})
    project.git_name, project.git_email = preparation.check_identity(*identity)
    project.branch_template = preparation.check_branch_template(branch_template)
    project.cache_key_files = preparation.check_cache_key_files(cache_key_files or [])


def list_projects(s: Session) -> list[Project]:
    return list(s.scalars(select(Project).order_by(Project.name)))


def remove_project(s: Session, name: str) -> None:
    """Remove a project; one with Changes stays (its history needs it): FailedPrecondition."""
    project = s.get(Project, name)
    if project is None:
        raise NotFound(f"no project {name!r}", field="name")
    changes = s.scalar(select(func.count()).select_from(Change).where(Change.project == name)) or 0
    if changes:
        raise FailedPrecondition(
            f"project {name!r} has {changes} Change{'s' if changes != 1 else ''}; it stays for their history",
            field="name",
        )
    s.delete(project)
    add_event(s, "project.removed", project=name)
