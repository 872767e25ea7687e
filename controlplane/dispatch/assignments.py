"""What an agent is sent to run: the command spec, or the harness spec with its stack and secrets,
as plain data; the api layer puts it on the wire."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping

from sqlalchemy import ColumnElement, func, or_
from sqlalchemy.orm import Session

from controlplane.config import HarnessConfig
from controlplane.dispatch.quota import credential
from controlplane.domain import graph, packet, preparation, reasoning, tiers
from controlplane.domain.members import PAY_PER_API, Member
from controlplane.services import credentials, questions
from controlplane.services.credentials import Sealer
from controlplane.store.changes import latest_changesets, tasks_by_key
from controlplane.store.models import Change, Project, Run, Task
from controlplane.store.objects import ObjectStore, packet_key

WRITE_KINDS = frozenset({"implement", "migrate", "test", "fix"})  # fix: a fix round on a pull request


def workspace_mode(kind: str, project: Project) -> str:
    if not project.repo:
        return "none"
    return "write" if kind in WRITE_KINDS else "read"


def opens_sandbox(driver: str, kind: str, project: Project) -> bool:
    """Whether a run holds an open sandbox while active (its Change's max_open_sandboxes_per_change counts
    it): a command run always runs its command there; a harness run only when its Task writes a workspace."""
    return driver == "command" or workspace_mode(kind, project) == "write"


def opens_sandbox_clause() -> ColumnElement[bool]:
    """opens_sandbox in SQL, for a query that joins a run's Task and Project."""
    return or_(Run.driver == "command", Task.kind.in_(WRITE_KINDS) & (func.coalesce(Project.repo, "") != ""))


@dataclasses.dataclass(frozen=True)
class Stacked:
    """A dependency's ChangeSet, merged into the workspace before the run starts."""

    changeset_id: str
    task_id: str
    branch: str
    commit: str
    created_at: str


@dataclasses.dataclass(frozen=True)
class CommandSpec:
    argv: tuple[str, ...]
    env: Mapping[str, str]
    network: bool
    files: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Written into the workspace (paths relative to the repository) before the command runs."""
    workdir: str = ""


@dataclasses.dataclass(frozen=True)
class Preparation:
    """The project's workspace preparation (seed 003) as this run gets it."""

    setup: tuple[str, ...] = ()
    setup_network: bool = True
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """The project's env plus DROVER_CHANGE_ID, DROVER_TASK_KEY, DROVER_BRANCH and DROVER_RUN_ID."""
    git_name: str = preparation.DEFAULT_GIT_NAME
    git_email: str = preparation.DEFAULT_GIT_EMAIL
    task_branch: str = ""
    cache_key_files: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class HarnessSpec:
    """What the model harness needs beyond the workspace."""

    workspace_mode: str
    max_calls: int
    max_output_tokens: int
    thinking_json: str
    prompt: str
    command_rules: tuple[str, ...]
    network: bool
    context_window_tokens: int
    fold_fraction: float
    fold_model: str
    stall_timeout_seconds: int
    max_attempts: int
    instructions: str = ""
    billing: str = ""
    resume_branch: str = ""
    resume_workspace_json: str = ""
    resume_session_id: str = ""
    resume_state: bytes = b""
    resume_answers: str = ""
    build_outputs: tuple[str, ...] = ()
    anthropic_workspace_id: str = ""
    effort: str = ""
    """output_config.effort: the member's reasoning, else the tier's; "": none."""
    attempt_ceiling_seconds: float = 600.0


@dataclasses.dataclass(frozen=True)
class Assignment:
    """What an agent is sent to run (the api layer puts it on the wire)."""

    run_id: str
    change_id: str
    task_id: str
    task_key: str
    kind: str
    driver: str
    attempt: int
    project: str
    repo: str
    branch: str
    timeout_seconds: int
    stack: tuple[Stacked, ...] = ()
    secret_env: Mapping[str, str] = dataclasses.field(default_factory=dict, repr=False)
    output_limit_bytes: int = 0
    command: CommandSpec | None = None
    harness: HarnessSpec | None = None
    tier: str = ""
    model: str = ""
    base_url: str = ""
    context_hash: str = ""
    resume: bool = False
    preparation: Preparation = Preparation()


def build(
    s: Session,
    run: Run,
    task: Task,
    project: Project,
    harness: HarnessConfig,
    objects: ObjectStore,
    output_limit_bytes: int = 0,
    sealer: Sealer | None = None,
) -> Assignment:
    """FailedPrecondition when the project's stored git credential does not open with `sealer`'s key."""
    change = s.get(Change, run.change_id)
    assert change is not None
    git_env = credentials.secret_env(project, sealer)  # only ever in this run's secret_env
    stack: tuple[Stacked, ...] = ()
    if run.resume_of:
        pass  # the parked run's branch has its stack merged already
    elif (
        project.repo and task.depends_on and (run.driver == "command" or workspace_mode(task.kind, project) == "write")
    ):
        stack = tuple(_stack(s, change, task))
    base = Assignment(
        run_id=run.id,
        change_id=run.change_id,
        task_id=task.id,
        task_key=task.key,
        kind=task.kind,
        driver=run.driver,
        attempt=run.attempt,
        project=project.name,
        repo=project.repo,
        branch=change.base_branch or project.branch,
        timeout_seconds=task.timeout_seconds,
        stack=stack,
        secret_env=git_env,
        output_limit_bytes=output_limit_bytes,
        preparation=prepared(project, change, task, run.id),
    )
    if run.driver == "command":
        spec = task.spec or {}
        command = CommandSpec(
            tuple(task.command),
            dict(task.env),
            project.network,
            dict(spec.get("workspace_files") or {}),
            str(spec.get("workdir") or ""),
        )
        return dataclasses.replace(base, command=command)
    built = _for_harness(base, run, task, project, change, harness, objects)
    if run.resume_of and built.harness is not None:
        built = dataclasses.replace(built, harness=_resumed(s, built.harness, run.resume_of, objects))
    return built


def prepared(project: Project, change: Change, task: Task, run_id: str) -> Preparation:
    """The project's preparation for one run: its Task branch rendered from the project's template
    ({change}, {task}: the Task's id, {slug}: of the Change's goal) and the run's DROVER_* variables."""
    branch = preparation.task_branch(project.branch_template, change.id, task.id, change.goal)
    env = {
        **dict(project.env or {}),
        "DROVER_CHANGE_ID": change.id,
        "DROVER_TASK_KEY": task.key,
        "DROVER_BRANCH": branch,
        "DROVER_RUN_ID": run_id,
    }
    return Preparation(
        setup=tuple(project.setup or ()),
        setup_network=project.setup_network,
        env=env,
        git_name=project.git_name or preparation.DEFAULT_GIT_NAME,
        git_email=project.git_email or preparation.DEFAULT_GIT_EMAIL,
        task_branch=branch,
        cache_key_files=tuple(project.cache_key_files or ()),
    )


def _resumed(s: Session, spec: HarnessSpec, parked_run_id: str, objects: ObjectStore) -> HarnessSpec:
    """What a run that resumes a parked session needs: its branch, workspace, session and the answers."""
    parked = s.get(Run, parked_run_id)
    assert parked is not None
    kept = dict(parked.parked or {})
    state = b""
    if kept.get("state_key") and objects.exists(kept["state_key"]):
        state = objects.get(kept["state_key"])
    return dataclasses.replace(
        spec,
        resume_branch=str(kept.get("branch", "")),
        resume_workspace_json=json.dumps(kept.get("workspace") or {}),
        resume_session_id=str(kept.get("session_id", "")),
        resume_state=state,
        resume_answers=questions.answers_of(s, parked.id),
    )


def _for_harness(
    base: Assignment,
    run: Run,
    task: Task,
    project: Project,
    change: Change,
    harness: HarnessConfig,
    objects: ObjectStore,
) -> Assignment:
    """A runtime's part: its tier's caps, its member's endpoint and credential, the prompt (and an
    external runtime's standing instructions)."""
    tier = harness.tiers.get(tiers.model_tier(run.tier, harness.allow_opus)) or harness.tiers[harness.default_tier]
    member = _member(harness, run)
    secrets = dict(base.secret_env)
    key = (credential(member, os.environ) if member else "") or harness.api_key
    if key:
        secrets["ANTHROPIC_API_KEY"] = key  # the member's credential, only in secret_env
    # The prompt is rendered from the run's Context Packet and nothing else (dispatch waits for it).
    compiled = json.loads(objects.get(packet_key(project.name, change.id, task.id, run.context_hash)))
    prompt = packet.render_prompt(compiled)
    spec = HarnessSpec(
        workspace_mode=workspace_mode(task.kind, project),
        max_calls=tier.max_calls,
        max_output_tokens=tier.max_output_tokens,
        thinking_json=json.dumps(dict(tier.thinking)) if tier.thinking else "",
        prompt=prompt,
        command_rules=tuple(project.commands),
        build_outputs=tuple(project.build_outputs or ()),
        network=project.network,
        context_window_tokens=harness.context_window_tokens,
        fold_fraction=harness.fold_fraction,
        fold_model=harness.tiers["haiku"].model if "haiku" in harness.tiers else run.model,
        stall_timeout_seconds=harness.stall_timeout_seconds,
        max_attempts=harness.max_attempts,
        instructions="" if run.driver == "harness" else packet.render_instructions(compiled),
        billing=member.billing if member else "PayPerApi",
        # the workspace is the harness key's: a Subscription member's OAuth token has none
        anthropic_workspace_id=harness.workspace_id if not member or member.billing == PAY_PER_API else "",
        effort=reasoning.effort(tier.effort, member.reasoning if member else ""),
        attempt_ceiling_seconds=harness.attempt_ceiling_seconds,
    )
    return dataclasses.replace(
        base,
        secret_env=secrets,
        harness=spec,
        tier=run.tier,
        model=run.model,
        base_url=(member.base_url if member else "") or harness.base_url,
        context_hash=run.context_hash,
    )


def _stack(s: Session, change: Change, task: Task) -> list[Stacked]:
    tasks = tasks_by_key(s, change.id)
    deps = {k: t.depends_on for k, t in tasks.items()}
    latest = latest_changesets(s, [tasks[k].id for k in task.depends_on])
    present = [k for k in task.depends_on if tasks[k].id in latest]
    tie = {k: (latest[tasks[k].id].created_at.isoformat(), tasks[k].id) for k in present}
    return [
        Stacked(cs.id, cs.task_id, cs.branch, cs.commit, cs.created_at.isoformat())
        for cs in (latest[tasks[k].id] for k in graph.stack_order(present, deps, tie))
    ]


def _member(harness: HarnessConfig, run: Run) -> Member | None:
    cls = harness.tier_class(tiers.model_tier(run.tier, harness.allow_opus))
    return next(
        (m for m in cls.members if m.route_key == run.member and (m.model or run.model) == run.model),
        next((m for m in cls.members if m.route_key == run.member), None),
    )
