"""agentd's edge for runs: a drover.v1.RunAssignment decoded once into a RunSpec (agentd/run/spec.py)
with every default applied, its secrets and whether it resumes; then placed on this agent (workspace,
sandbox, slot, cgroups). Nothing past here sees protobuf."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

from agentd.daemon import run_slots
from agentd.daemon.config import AgentConfig
from agentd.run.spec import DEFAULT_OUTPUT_LIMIT, HarnessSpec, Preparation, RunSpec, StackedChangeSet

DEFAULT_HARNESS = HarnessSpec()


@dataclasses.dataclass(frozen=True)
class Assignment:
    spec: RunSpec
    secret_env: dict[str, str] = dataclasses.field(repr=False, default_factory=dict)
    """Never logged, never written: handed to the run's supervisor on stdin."""
    resume: bool = False
    """Sent again so a harness run can resume."""

    @property
    def run_id(self) -> str:
        return self.spec.run_id


def decode(message: Any) -> Assignment:
    """The Assignment of a drover.v1.RunAssignment (0 and "" take the spec's defaults)."""
    h = message.harness
    harness = HarnessSpec(
        workspace_mode=h.workspace_mode or DEFAULT_HARNESS.workspace_mode,
        max_calls=h.max_calls,
        max_output_tokens=h.max_output_tokens,
        thinking_json=h.thinking_json,
        prompt=h.prompt,
        command_rules=tuple(h.command_rules),
        network=h.network,
        context_window_tokens=int(h.context_window_tokens) or DEFAULT_HARNESS.context_window_tokens,
        fold_fraction=h.fold_fraction or DEFAULT_HARNESS.fold_fraction,
        fold_model=h.fold_model,
        stall_timeout_seconds=float(h.stall_timeout_seconds or DEFAULT_HARNESS.stall_timeout_seconds),
        max_attempts=h.max_attempts or DEFAULT_HARNESS.max_attempts,
        instructions=h.instructions,
        billing=h.billing or DEFAULT_HARNESS.billing,
        resume_branch=h.resume_branch,
        resume_workspace_json=h.resume_workspace_json,
        resume_session_id=h.resume_session_id,
        resume_state=bytes(h.resume_state),
        resume_answers=h.resume_answers,
        build_outputs=tuple(h.build_outputs),
        anthropic_workspace_id=h.anthropic_workspace_id,
        effort=h.effort,
        attempt_ceiling_seconds=h.attempt_ceiling_seconds or DEFAULT_HARNESS.attempt_ceiling_seconds,
    )
    output_limit = int(message.limits.get("output_bytes", 0))
    spec = RunSpec(
        run_id=message.run_id,
        driver=message.driver or "command",
        change_id=message.change_id,
        task_id=message.task_id,
        task_key=message.task_key,
        kind=message.kind,
        argv=tuple(message.command.argv),
        env=dict(message.command.env),
        timeout_seconds=message.command.timeout_seconds,
        network=message.command.network,
        files=dict(message.command.files),
        workdir=message.command.workdir,
        project=message.workspace.project,
        repo=message.workspace.repo,
        branch=message.workspace.branch,
        stack=tuple(
            StackedChangeSet(s.changeset_id, s.task_id, s.branch, s.commit, s.created_at)
            for s in message.workspace.stack
        ),
        preparation=preparation(message.workspace),
        model=message.model,
        base_url=message.base_url,
        tier=message.tier,
        prompt=h.prompt,
        harness=harness,
        output_limit_bytes=output_limit if output_limit > 0 else DEFAULT_OUTPUT_LIMIT,
    )
    return Assignment(spec, dict(message.secret_env), bool(message.resume))


def preparation(w: Any) -> Preparation:
    """A drover.v1.WorkspaceSpec's preparation (seed 003)."""
    return Preparation(
        setup=tuple(w.setup),
        setup_network=w.setup_network,
        env=dict(w.env),
        git_name=w.git_name,
        git_email=w.git_email,
        task_branch=w.task_branch,
        cache_key_files=tuple(w.cache_key_files),
    )


def place(spec: RunSpec, config: AgentConfig, slot: int = 0, cgroups: Sequence[str] = ()) -> RunSpec:
    """The spec as this agent runs it, in slot `slot` (agentd/daemon/run_slots.py) whose cgroup
    directories are `cgroups` (none: rlimits alone)."""
    uid, gid = -1, -1
    if run_slots.slotted(config.session_user, os.geteuid()):
        uid, gid = run_slots.ids(config.uid_base, slot)
    return dataclasses.replace(
        spec,
        timeout_seconds=spec.timeout_seconds or config.default_timeout_seconds,
        workspace_dir=str((config.work_dir / spec.run_id).resolve()),
        keep_workspace=config.keep_workspaces,
        kill_grace_seconds=config.kill_grace_seconds,
        session_user=config.session_user,
        slot=slot,
        cgroups=tuple(cgroups),
        uid=uid,
        gid=gid,
        run_memory_bytes=config.run_memory_bytes,
        run_processes=config.run_processes,
        run_disk_bytes=0 if config.keep_workspaces else config.run_disk_bytes,  # a kept workspace stays
        run_tmp_bytes=config.run_tmp_bytes,
        # decided once at start (agentd/daemon/isolation.py); a supervisor never falls back from it
        sandbox="none" if config.unsafe_no_sandbox else "bubblewrap",
        bwrap=config.bwrap,
        seccomp=config.seccomp,
        runtime_command=config.runtime_commands().get(spec.driver, ""),
        prepared_cache_dir=str(config.prepared_cache) if config.prepared_cache_max_bytes > 0 else "",
        prepared_cache_max_bytes=config.prepared_cache_max_bytes,
        mirror_dir=str(config.mirrors) if config.repository_mirrors else "",
    )
