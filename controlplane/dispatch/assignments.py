"""What an agent is sent to run: the command spec, or the harness spec with its stack and secrets."""

from __future__ import annotations

import json
import os

from sqlalchemy.orm import Session

from controlplane.services import changesets
from controlplane.domain import graph, packet
from controlplane.config import HarnessConfig
from controlplane.domain.members import Member
from controlplane.dispatch.quota import credential
from controlplane.store.models import Change, Project, Run, Task
from controlplane.store.objects import DirectoryStore
from controlplane.services.projects import git_token
from drover.v1 import agent_pb2

WRITE_KINDS = frozenset({"implement", "migrate", "test"})


def workspace_mode(kind: str, project: Project) -> str:
    if not project.repo:
        return "none"
    return "write" if kind in WRITE_KINDS else "read"


def render_prompt(change: Change, task: Task) -> str:
    lines = [f"# Change: {change.goal}"]
    if change.criteria:
        lines += ["", "Acceptance criteria:", *(f"- {c}" for c in change.criteria)]
    if change.invariants:
        lines += ["", "Invariants (must stay true):", *(f"- {c}" for c in change.invariants)]
    lines += ["", f"# Your Task: {task.key} ({task.kind})", task.objective]
    files = task.spec.get("files") if task.spec else None
    if files:
        lines += ["", "Declared files:", *(f"- {f}" for f in files)]
    return "\n".join(lines)


def build(s: Session, run: Run, task: Task, project: Project, harness: HarnessConfig,
          objects: DirectoryStore | None = None, output_limit_bytes: int = 0) -> agent_pb2.RunAssignment:
    assignment = agent_pb2.RunAssignment(
        run_id=run.id, change_id=run.change_id, task_id=task.id, task_key=task.key, kind=task.kind,
        driver=run.driver, attempt=run.attempt,
        workspace=agent_pb2.WorkspaceSpec(project=project.name, repo=project.repo, branch=project.branch))
    if output_limit_bytes > 0:  # agentd stops recording a run's output past what the control plane keeps
        assignment.limits["output_bytes"] = output_limit_bytes
    change = s.get(Change, run.change_id)
    assert change is not None
    token = git_token(project)
    if token:
        assignment.secret_env["DROVER_GIT_TOKEN"] = token
    if project.repo and task.depends_on and (run.driver == "command" or workspace_mode(task.kind, project) == "write"):
        assignment.workspace.stack.extend(_stack(s, change, task))
    if run.driver == "command":
        assignment.command.CopyFrom(agent_pb2.CommandSpec(argv=task.command, env=task.env,
                                                          timeout_seconds=task.timeout_seconds,
                                                          network=project.network))
        return assignment
    tier = harness.tiers.get(_model_tier(harness, run.tier)) or harness.tiers[harness.default_tier]
    member = _member(harness, run)
    assignment.tier, assignment.model = run.tier, run.model
    assignment.base_url = (member.base_url if member else "") or harness.base_url
    assignment.command.timeout_seconds = task.timeout_seconds
    key = (credential(member, os.environ) if member else "") or harness.api_key
    if key:
        assignment.secret_env["ANTHROPIC_API_KEY"] = key  # the member's credential, only in secret_env
    spec = assignment.harness
    spec.workspace_mode = workspace_mode(task.kind, project)
    spec.max_calls, spec.max_output_tokens = tier.max_calls, tier.max_output_tokens
    spec.thinking_json = json.dumps(dict(tier.thinking)) if tier.thinking else ""
    if run.context_hash and objects is not None:  # the prompt is rendered from the packet and nothing else
        key = f"context/{project.name}/{change.id}/{task.id}/{run.context_hash}.json"
        spec.prompt = packet.render_prompt(json.loads(objects.get(key)))
        assignment.context_hash = run.context_hash
    else:
        spec.prompt = render_prompt(change, task)
    spec.command_rules.extend(project.commands)
    spec.network = project.network
    spec.context_window_tokens = harness.context_window_tokens
    spec.fold_fraction = harness.fold_fraction
    spec.fold_model = harness.tiers["haiku"].model if "haiku" in harness.tiers else run.model
    spec.stall_timeout_seconds = harness.stall_timeout_seconds
    spec.max_attempts = harness.max_attempts
    return assignment


def _stack(s: Session, change: Change, task: Task) -> list[agent_pb2.StackedChangeSet]:
    tasks = {t.key: t for t in s.query(Task).filter(Task.change_id == change.id)}
    deps = {k: t.depends_on for k, t in tasks.items()}
    latest = changesets.latest_for_tasks(s, [tasks[k].id for k in task.depends_on])
    present = [k for k in task.depends_on if tasks[k].id in latest]
    tie = {k: (latest[tasks[k].id].created_at.isoformat(), tasks[k].id) for k in present}
    return [agent_pb2.StackedChangeSet(changeset_id=cs.id, task_id=cs.task_id, branch=cs.branch, commit=cs.commit,
                                       created_at=cs.created_at.isoformat())
            for cs in (latest[tasks[k].id] for k in graph.stack_order(present, deps, tie))]


def _model_tier(harness: HarnessConfig, tier: str) -> str:
    return "sonnet" if tier == "opus" and not harness.allow_opus else tier


def _member(harness: HarnessConfig, run: Run) -> Member | None:
    cls = harness.tier_class(_model_tier(harness, run.tier))
    return next((m for m in cls.members if m.route_key == run.member and (m.model or run.model) == run.model),
                next((m for m in cls.members if m.route_key == run.member), None))
