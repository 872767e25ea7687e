"""A run's spec: what its supervisor is told, decoded once from the control plane's RunAssignment at
agentd's edge (agentd/daemon/assignment.py) and placed on this agent (agentd/daemon/runs.py), then
written to RUN_DIR/assignment.json. Every default lives here; nothing past the edge sees protobuf or a
dict of it. Its secrets are not in it: they reach the supervisor on stdin."""

from __future__ import annotations

import base64
import dataclasses
import json
import pathlib
from typing import Any

from agentd import run_dir as run_dir_files

FILE = run_dir_files.ASSIGNMENT
DEFAULT_OUTPUT_LIMIT = 8 << 20
GIT_TOKEN = "DROVER_GIT_TOKEN"
"""The secret agentd clones and pushes https URLs with; never given to a command."""
GIT_SSH_KEY = "DROVER_GIT_SSH_KEY"
"""The SSH deploy key agentd clones and pushes ssh URLs with, held in memory only; never given to a
command nor written where the Task could read it."""
GIT_SECRETS = frozenset({GIT_TOKEN, GIT_SSH_KEY})
"""Output kept per run when the control plane names no limit."""
DEFAULT_GIT_NAME, DEFAULT_GIT_EMAIL = "Drover Agent", "agent@drover.invalid"
"""The run's commits' identity when the project names none (the control plane's default too)."""


@dataclasses.dataclass(frozen=True)
class StackedChangeSet:
    """A dependency's published ChangeSet, merged into the workspace before the run."""

    changeset_id: str = ""
    task_id: str = ""
    branch: str = ""
    commit: str = ""
    created_at: str = ""


@dataclasses.dataclass(frozen=True)
class HarnessSpec:
    """What a model-driven run needs beyond the workspace (the harness, Claude Code, opencode)."""

    workspace_mode: str = "write"
    """write (implement, migrate, test), read, none (no repository)."""
    max_calls: int = 0
    max_output_tokens: int = 0
    thinking_json: str = ""
    prompt: str = ""
    command_rules: tuple[str, ...] = ()
    """The project's command allowlist; empty: the default Python one."""
    network: bool = False
    context_window_tokens: int = 200_000
    fold_fraction: float = 0.7
    fold_model: str = ""
    """Empty: the run's own model."""
    stall_timeout_seconds: float = 120.0
    max_attempts: int = 4
    instructions: str = ""
    billing: str = "PayPerApi"
    resume_branch: str = ""
    resume_workspace_json: str = ""
    resume_session_id: str = ""
    resume_state: bytes = b""
    """A parked session's state, gzip (never written to disk in the clear: base64 in assignment.json)."""
    resume_answers: str = ""
    build_outputs: tuple[str, ...] = ()
    """Patterns of build outputs a ChangeSet leaves out; empty: the default list."""
    anthropic_workspace_id: str = ""
    """Sent as the anthropic-workspace-id header on every Messages API call; empty: not sent."""
    effort: str = ""
    """output_config.effort of the run's model calls (the member's reasoning, else the tier's); "": none."""
    attempt_ceiling_seconds: float = 600.0
    """One model call attempt's ceiling, however steadily it streams."""

    @property
    def thinking(self) -> dict[str, Any] | None:
        return json.loads(self.thinking_json) if self.thinking_json else None


@dataclasses.dataclass(frozen=True)
class Preparation:
    """The project's workspace preparation (seed 003), as the control plane rendered it for this run."""

    setup: tuple[str, ...] = ()
    """Shell command lines (`sh -c`) run in order in the sandbox after the clone; any failure: setup_failed."""
    setup_network: bool = True
    """Whether setup may use the network (the Task's own phase keeps the project's `network`)."""
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    """The project's env plus DROVER_CHANGE_ID, DROVER_TASK_KEY, DROVER_BRANCH, DROVER_RUN_ID."""
    git_name: str = ""
    git_email: str = ""
    """ChangeSet commits' author and committer; "": Drover's default identity."""
    task_branch: str = ""
    """The branch the Task's ChangeSet is pushed to; "": drover/<change>/<task>."""
    cache_key_files: tuple[str, ...] = ()

    @property
    def identity(self) -> tuple[str, str]:
        """The author and committer of the run's commits: the project's, else Drover's."""
        return (self.git_name or DEFAULT_GIT_NAME, self.git_email or DEFAULT_GIT_EMAIL)

    @property
    def git_env(self) -> dict[str, str]:
        """The identity as git's environment, for commits a command makes in the sandbox."""
        name, email = self.identity
        return {
            "GIT_AUTHOR_NAME": name,
            "GIT_AUTHOR_EMAIL": email,
            "GIT_COMMITTER_NAME": name,
            "GIT_COMMITTER_EMAIL": email,
        }


@dataclasses.dataclass(frozen=True)
class RunSpec:
    run_id: str
    driver: str = "command"
    """command, harness, or an external runtime: claude-code, opencode."""
    change_id: str = ""
    task_id: str = ""
    task_key: str = ""
    kind: str = ""
    # a command run's
    argv: tuple[str, ...] = ()
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    timeout_seconds: int = 0
    """0: none."""
    network: bool = False
    files: dict[str, str] = dataclasses.field(default_factory=dict)
    """Written into the workspace (path relative to the repository) after setup, before the command."""
    workdir: str = ""
    """Where the command runs, relative to the repository; "": its root."""
    # the workspace
    project: str = ""
    """The project's name: agentd's prepared workspaces are kept per project."""
    repo: str = ""
    branch: str = ""
    stack: tuple[StackedChangeSet, ...] = ()
    preparation: Preparation = Preparation()
    # a model-driven run's
    model: str = ""
    base_url: str = ""
    tier: str = ""
    prompt: str = ""
    harness: HarnessSpec = HarnessSpec()
    output_limit_bytes: int = DEFAULT_OUTPUT_LIMIT
    # placed on this agent (agentd/daemon/runs.py): its settings and the run's slot
    workspace_dir: str = ""
    keep_workspace: bool = False
    kill_grace_seconds: float = 10.0
    session_user: str = ""
    slot: int = -1
    cgroups: tuple[str, ...] = ()
    uid: int = -1
    gid: int = -1
    run_memory_bytes: int = 0
    run_processes: int = 512
    run_disk_bytes: int = 0
    run_tmp_bytes: int | None = None
    """None: the sandbox's default."""
    sandbox: str = "bubblewrap"
    """bubblewrap, or none (agentd --unsafe-no-sandbox); decided once at start, never fallen back from."""
    bwrap: str = ""
    """The bubblewrap executable; empty: bwrap on PATH."""
    seccomp: bool = True
    runtime_command: str = ""
    """An external runtime's executable on this agent."""
    prepared_cache_dir: str = ""
    """agentd's prepared-workspace cache (agentd/run/prepared_cache.py); "": none."""
    prepared_cache_max_bytes: int = 0
    mirror_dir: str = ""
    """agentd's repository mirrors (drover/core/mirror.py) the workspace is cloned through; "": none."""

    @property
    def workspace(self) -> pathlib.Path:
        return pathlib.Path(self.workspace_dir)

    @property
    def commands_network(self) -> bool:
        """Whether the run's commands may use the network: a command's own setting, else the harness's."""
        return self.network if self.driver == "command" else self.harness.network

    def to_json(self) -> str:
        return json.dumps(_plain(self))

    @classmethod
    def from_json(cls, text: str) -> RunSpec:
        """The spec written by to_json (by this agentd or an earlier one: unknown keys are ignored,
        missing ones take their defaults). ValueError when it is not a spec."""
        data = json.loads(text)
        if not isinstance(data, dict) or not isinstance(data.get("run_id"), str):
            raise ValueError("not a run spec")
        return _decode(cls, data)

    @classmethod
    def load(cls, run_dir: pathlib.Path) -> RunSpec:
        return cls.from_json((run_dir / FILE).read_text())

    def save(self, run_dir: pathlib.Path) -> None:
        (run_dir / FILE).write_text(self.to_json())


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return value


NESTED: dict[str, type[Any]] = {"harness": HarnessSpec, "stack": StackedChangeSet, "preparation": Preparation}


def _decode(cls: type[Any], data: dict[str, Any]) -> Any:
    """A frozen spec from its plain form: each field coerced to its declared type."""
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        if field.name not in data or (data[field.name] is None and field.name != "run_tmp_bytes"):
            continue
        raw = data[field.name]
        kind = str(field.type)
        if field.name in ("harness", "preparation"):
            values[field.name] = _decode(NESTED[field.name], raw if isinstance(raw, dict) else {})
        elif field.name == "stack":
            values[field.name] = tuple(_decode(StackedChangeSet, item) for item in raw if isinstance(item, dict))
        elif kind.startswith("tuple"):
            values[field.name] = tuple(str(v) for v in raw)
        elif kind.startswith("dict"):
            values[field.name] = {str(k): str(v) for k, v in dict(raw).items()}
        elif kind == "bytes":
            values[field.name] = base64.b64decode(raw) if raw else b""
        elif kind == "bool":
            values[field.name] = bool(raw)
        elif kind == "int":
            values[field.name] = int(raw)
        elif kind == "float":
            values[field.name] = float(raw)
        elif kind == "int | None":
            values[field.name] = None if raw is None else int(raw)
        else:
            values[field.name] = str(raw)
    return cls(**values)
