"""Projects: a repository, its default branch, its pool and how its runs' workspaces are prepared. The
host's `controlplane project` commands and the API's ProjectService both go through these functions, so
a project is checked the same way whichever door it came in by, and every change is an event naming who
made it ("host" for the host's commands)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from controlplane.domain import forge as forge_rules
from controlplane.domain import preparation, scheduling
from controlplane.domain.names import NAME
from controlplane.store.events import add_event
from controlplane.store.models import Change, Project, utcnow
from drover.core.allowlist import policy_from_strings
from drover.core.build_outputs import check_patterns
from drover.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound

HOST = "host"
"""Who made a change through the host's `controlplane` commands (no token)."""


@dataclasses.dataclass(frozen=True)
class ProjectSettings:
    """Everything a project is set to, each default in one place."""

    repo: str = ""
    """Path or URL of the git repository ("": none)."""
    branch: str = "main"
    pool: str = ""
    """Only agents of this pool run its Tasks ("": the default pool)."""
    commands: tuple[str, ...] = ()
    """The harness's command allowlist (empty: the default rules)."""
    network: bool = False
    git_token_file: str = ""
    """The older way to give a git token: a file on the control plane's host, read when a run starts."""
    monthly_budget_usd: float = 0.0
    answer_window_minutes: float = 15.0
    build_outputs: tuple[str, ...] = ()
    setup: tuple[str, ...] = ()
    setup_network: bool = True
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    git_name: str = ""
    git_email: str = ""
    branch_template: str = ""
    cache_key_files: tuple[str, ...] = ()
    forge: str = ""
    """The project's repository on a forge (issue 28): "" (none) or "github"."""
    forge_repo: str = ""
    """owner/name on the forge."""
    forge_api_url: str = ""
    """The forge's REST API ("": https://api.github.com for github)."""
    forge_label: str = forge_rules.DEFAULT_LABEL
    max_fix_rounds: int = forge_rules.DEFAULT_FIX_ROUNDS
    forge_budget_usd: float = 0.0
    """The budget of each Change an issue starts (0: none of its own); a `/drover budget $N` comment wins."""
    forge_branch_template: str = forge_rules.DEFAULT_BRANCH_TEMPLATE
    """The pull request's branch: {number} (the issue's), {change}, {slug}."""
    forge_check_command: str = ""
    """The command an issue's check Task runs after its implement Task ("": no check Task)."""
    max_active_runs_per_change: int = scheduling.DEFAULT_MAX_ACTIVE_RUNS_PER_CHANGE
    """At most this many runs of one Change are active (starting/running); the rest stay queued."""
    weight: int = scheduling.DEFAULT_WEIGHT
    """The project's share of its pool's slots against the pool's other projects (fair sharing)."""
    max_open_sandboxes_per_change: int = scheduling.DEFAULT_OPEN_SANDBOXES_PER_CHANGE
    """At most this many active runs of one Change hold an open sandbox (command runs, and write Tasks of a
    project with a repository); its other runs that would open one stay queued."""


FIELDS = tuple(f.name for f in dataclasses.fields(ProjectSettings))


def settings_of(p: Project) -> ProjectSettings:
    return ProjectSettings(
        repo=p.repo or "",
        branch=p.branch or "main",
        pool=p.pool or "",
        commands=tuple(p.commands or ()),
        network=bool(p.network),
        git_token_file=p.git_token_file or "",
        monthly_budget_usd=p.monthly_budget_usd or 0.0,
        answer_window_minutes=p.answer_window_minutes,
        build_outputs=tuple(p.build_outputs or ()),
        setup=tuple(p.setup or ()),
        setup_network=bool(p.setup_network),
        env=dict(p.env or {}),
        git_name=p.git_name or "",
        git_email=p.git_email or "",
        branch_template=p.branch_template or "",
        cache_key_files=tuple(p.cache_key_files or ()),
        forge=p.forge or "",
        forge_repo=p.forge_repo or "",
        forge_api_url=p.forge_api_url or "",
        forge_label=p.forge_label or forge_rules.DEFAULT_LABEL,
        max_fix_rounds=forge_rules.DEFAULT_FIX_ROUNDS if p.max_fix_rounds is None else p.max_fix_rounds,
        forge_budget_usd=p.forge_budget_usd or 0.0,
        forge_branch_template=p.forge_branch_template or forge_rules.DEFAULT_BRANCH_TEMPLATE,
        forge_check_command=p.forge_check_command or "",
        max_active_runs_per_change=p.max_active_runs_per_change or scheduling.DEFAULT_MAX_ACTIVE_RUNS_PER_CHANGE,
        weight=p.weight or scheduling.DEFAULT_WEIGHT,
        max_open_sandboxes_per_change=p.max_open_sandboxes_per_change or scheduling.DEFAULT_OPEN_SANDBOXES_PER_CHANGE,
    )


def add_project(s: Session, name: str, repo: str, branch: str = "main", pool: str = "", **settings: Any) -> Project:
    """Create a project, or set every setting of an existing one (`controlplane project add`)."""
    by = settings.pop("by", HOST)
    wanted = ProjectSettings(repo=repo, branch=branch, pool=pool, **_tuples(settings))
    project = s.get(Project, name)
    if project is None:
        return create_project(s, name, wanted, by)
    _apply(project, wanted)
    project.updated_at = utcnow()
    add_event(s, "project.updated", project=name, repo=repo, branch=branch, pool=pool, by=by)
    return project


def _tuples(settings: dict[str, Any]) -> dict[str, Any]:
    return {k: tuple(v or ()) if isinstance(v, list) or v is None else v for k, v in settings.items()}


def create_project(s: Session, name: str, settings: ProjectSettings, by: str) -> Project:
    """A new project (ALREADY_EXISTS when the name is taken); nothing is stored if a setting is refused."""
    if not NAME.fullmatch(name):
        raise InvalidArgument(
            f"{name!r} is not a project name: letters, digits, '.', '_', '-', at most 100", field="name"
        )
    if s.get(Project, name) is not None:
        raise AlreadyExists(f"project {name!r} exists (update it instead)", field="name")
    project = Project(name=name)
    _apply(project, settings)
    s.add(project)
    add_event(s, "project.added", project=name, repo=settings.repo, branch=settings.branch, pool=settings.pool, by=by)
    return project


def update_project(s: Session, project: Project, changes: Mapping[str, Any], by: str) -> Project:
    """Set the named settings of `project`, each checked; the others stay."""
    unknown = sorted(set(changes) - set(FIELDS))
    if unknown:
        raise InvalidArgument(f"no setting {unknown[0]!r}", field="update_mask")
    _apply(project, dataclasses.replace(settings_of(project), **_tuples(dict(changes))))
    project.updated_at = utcnow()
    add_event(s, "project.updated", project=project.name, fields=sorted(changes), by=by)
    return project


def put_project(s: Session, name: str, wanted: Mapping[str, Any], by: str = HOST) -> tuple[str, list[str]]:
    """Add project `name` with the settings `wanted` names (the others at their defaults), or set those
    settings of the existing one and leave the rest (`controlplane project apply`). Answers "added",
    "updated" or "unchanged" and the settings that changed (each value compared as it would be stored);
    an unchanged project gets no write and no event."""
    unknown = sorted(set(wanted) - set(FIELDS))
    if unknown:
        raise InvalidArgument(f"no setting {unknown[0]!r}", field=unknown[0])
    project = s.get(Project, name)
    if project is None:
        create_project(s, name, ProjectSettings(**_tuples(dict(wanted))), by)
        return "added", sorted(wanted)
    now = settings_of(project)
    after = checked_settings(dataclasses.replace(now, **_tuples(dict(wanted))), project)
    changed = [f for f in FIELDS if getattr(after, f) != getattr(now, f)]
    if not changed:
        return "unchanged", []
    update_project(s, project, {f: getattr(after, f) for f in changed}, by)
    return "updated", changed


def checked_settings(w: ProjectSettings, project: Project) -> ProjectSettings:
    """`w` with every setting checked (InvalidArgument naming it) and put as the row would store it.
    `project` is the row it is for: while it holds a forge credential its forge_api_url stays."""
    if w.pool and not NAME.fullmatch(w.pool):
        raise InvalidArgument(f"{w.pool!r} is not a pool name", field="pool")
    if not w.branch.strip() or "\x00" in w.branch or len(w.branch) > 200:
        raise InvalidArgument("must be a branch name", field="branch")
    try:
        policy_from_strings(list(w.commands))
    except ValueError as err:
        raise InvalidArgument(str(err), field="commands") from None
    if not w.monthly_budget_usd >= 0:
        raise InvalidArgument("must not be negative", field="monthly_budget_usd")
    if not 0 <= w.answer_window_minutes <= 7 * 24 * 60:
        raise InvalidArgument("must be 0 (never park) to 10080 minutes", field="answer_window_minutes")
    try:
        build_outputs = check_patterns(list(w.build_outputs))
    except ValueError as err:
        raise InvalidArgument(str(err), field="build_outputs") from None
    setup = tuple(preparation.check_setup(list(w.setup)))
    env = preparation.check_env(dict(w.env))
    git_name, git_email = preparation.check_identity(w.git_name, w.git_email)
    branch_template = preparation.check_branch_template(w.branch_template)
    cache_key_files = tuple(preparation.check_cache_key_files(list(w.cache_key_files)))
    forge = forge_rules.check_forge(w.forge)
    forge_repo = forge_rules.check_repo(w.forge, w.forge_repo)
    api_url = forge_rules.check_api_url(w.forge, w.forge_api_url)
    if project.forge_credential_kind and api_url != project.forge_api_url:
        raise FailedPrecondition(  # the credential goes to the forge's API: it would be sent elsewhere
            "the project has a forge credential, which would be sent to the new API URL; delete it first",
            field="forge" if not api_url else "forge_api_url",
        )
    return dataclasses.replace(
        w,
        commands=tuple(w.commands),
        build_outputs=tuple(build_outputs),
        setup=setup,
        env=env,
        git_name=git_name,
        git_email=git_email,
        branch_template=branch_template,
        cache_key_files=cache_key_files,
        forge=forge,
        forge_repo=forge_repo,
        forge_api_url=api_url,
        forge_label=forge_rules.check_label(w.forge_label),
        max_fix_rounds=forge_rules.check_fix_rounds(w.max_fix_rounds),
        forge_budget_usd=forge_rules.check_budget(w.forge_budget_usd),
        forge_branch_template=forge_rules.check_branch_template(w.forge_branch_template),
        forge_check_command=forge_rules.check_check_command(w.forge_check_command),
        max_active_runs_per_change=scheduling.check_change_cap(w.max_active_runs_per_change),
        weight=scheduling.check_weight(w.weight),
        max_open_sandboxes_per_change=scheduling.check_change_cap(
            w.max_open_sandboxes_per_change, field="max_open_sandboxes_per_change"
        ),
    )


def _apply(project: Project, w: ProjectSettings) -> None:
    """Check every setting (InvalidArgument naming it) and set it on the row."""
    checked = checked_settings(w, project)
    for name in FIELDS:
        value = getattr(checked, name)
        setattr(project, name, list(value) if isinstance(value, tuple) else dict(value) if name == "env" else value)


def list_projects(s: Session, scope: frozenset[str] | None = None, after: str = "", limit: int = 0) -> list[Project]:
    """Projects by name: those in `scope` (None: all), after the name `after`, at most `limit` (0: all)."""
    q = select(Project).where(Project.name > after).order_by(Project.name)
    if scope is not None:
        q = q.where(Project.name.in_(sorted(scope)))
    return list(s.scalars(q.limit(limit) if limit else q))


def remove_project(s: Session, name: str, by: str = HOST) -> None:
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
    add_event(s, "project.removed", project=name, by=by)
