"""What a run's supervisor reads: the run's spec, written to RUN_DIR/assignment.json from the assignment
the control plane sent, with this agent's settings (workspace, sandbox, timeouts). Its secrets are not
in it: they reach the supervisor on stdin."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from google.protobuf import json_format

from agentd.daemon import run_slots
from agentd.daemon.config import AgentConfig


def run_spec(assignment: Any, config: AgentConfig, slot: int = 0, cgroups: Sequence[str] = ()) -> dict[str, Any]:
    """The spec of a drover.v1.RunAssignment on this agent, run in slot `slot` (agentd/daemon/run_slots.py)
    whose cgroup directories are `cgroups` (none: rlimits alone)."""
    spec = {
        "run_id": assignment.run_id,
        "driver": assignment.driver,
        "change_id": assignment.change_id,
        "task_id": assignment.task_id,
        "task_key": assignment.task_key,
        "kind": assignment.kind,
        "argv": list(assignment.command.argv),
        "env": dict(assignment.command.env),
        "timeout_seconds": assignment.command.timeout_seconds or config.default_timeout_seconds,
        "repo": assignment.workspace.repo,
        "branch": assignment.workspace.branch,
        "stack": [
            json_format.MessageToDict(item, preserving_proto_field_name=True) for item in assignment.workspace.stack
        ],
        "workspace_dir": str((config.work_dir / assignment.run_id).resolve()),
        "keep_workspace": config.keep_workspaces,
        "kill_grace_seconds": config.kill_grace_seconds,
        "session_user": config.session_user,
        "slot": slot,
        "cgroups": list(cgroups),
        "run_memory_bytes": config.run_memory_bytes,
        "run_processes": config.run_processes,
        "run_disk_bytes": 0 if config.keep_workspaces else config.run_disk_bytes,  # a kept workspace stays
        "run_tmp_bytes": config.run_tmp_bytes,
        "network": assignment.command.network,
        # decided once at start (agentd/daemon/isolation.py); a supervisor never falls back from it
        "sandbox": "none" if config.unsafe_no_sandbox else "bubblewrap",
        "bwrap": config.bwrap,
        "seccomp": config.seccomp,
    }
    if run_slots.slotted(config.session_user, os.geteuid()):
        spec["uid"], spec["gid"] = run_slots.ids(config.uid_base, slot)
    if assignment.limits.get("output_bytes", 0) > 0:  # the supervisors stop recording past it
        spec["output_limit_bytes"] = assignment.limits["output_bytes"]
    if assignment.driver != "command":
        spec.update(
            model=assignment.model,
            base_url=assignment.base_url,
            tier=assignment.tier,
            prompt=assignment.harness.prompt,
            harness=json_format.MessageToDict(
                assignment.harness, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
            ),
        )
    if assignment.driver in config.runtime_commands():
        spec["runtime_command"] = config.runtime_commands()[assignment.driver]
    return spec
