"""agentd settings: defaults, then a TOML file (--config), then DROVER_AGENTD_* env, then flags."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pathlib
import shutil
import socket
import tempfile
import tomllib
from collections.abc import Mapping
from typing import Any

ENV_PREFIX = "DROVER_AGENTD_"
AUTO_UID_BASE = 2_000_000_000
UID_BLOCK = 4096
"""run_uid_base = 0 (the default): the slots' uids are one of UID_BLOCKS blocks of UID_BLOCK ids from
AUTO_UID_BASE, the block chosen by the spool's hash (up to 3,073,741,824: below 2^32 - 1)."""
UID_BLOCKS = 2**18
DRIVER_KEYS = frozenset({"claude_command", "opencode_command"})


@dataclasses.dataclass(frozen=True)
class AgentConfig:
    control_plane: str = "127.0.0.1:50051"
    """host:port of the control plane, or several (`a:50051,b:50051`: its replicas, tried in turn); agentd
    dials out."""
    name: str = dataclasses.field(default_factory=socket.gethostname)
    """Unique among connected agents; keep it stable so a restarted agentd re-attaches to its runs."""
    token_file: pathlib.Path = pathlib.Path(".drover/tokens/agent.token")
    """The agent token; read at every connection attempt."""
    retry_auth: bool = False
    """Keep dialling when the control plane refuses this agent (UNAUTHENTICATED: a bad, revoked or expired
    token; PERMISSION_DENIED: a name bound to another agent token, another pool's label) or the token file
    cannot be read at start. false: agentd exits with code 4, since waiting does not heal those."""
    capacity: int = 1
    """Concurrent runs."""
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """key=value labels; pool=P puts the agent in pool P."""
    work_dir: pathlib.Path = pathlib.Path(tempfile.gettempdir()) / "drover-workspaces"
    """Parent of the run workspaces."""
    spool_dir: pathlib.Path = pathlib.Path("")
    """Run directories and the outbox; default <state_dir>/<name>/spool (state_dir below)."""
    min_free_spool_bytes: int = 100 * 1024 * 1024
    """New runs are refused (`disk_full`) while the spool's filesystem has less free space than this."""
    prepared_cache_dir: pathlib.Path = pathlib.Path("")
    """Prepared workspaces (a project's tree after its setup commands, reused by the next run with the
    same setup, env and cache_key_files); default `prepared` beside the spool directory
    (<state_dir>/<name>/prepared). Only agentd reads it: runs see their own copy."""
    prepared_cache_max_bytes: int = 20 * 1024**3
    """The prepared workspaces' size, at most (the least recently used go first); 0: no cache, every
    run runs its project's setup."""
    repository_mirrors: bool = True
    """Clone runs' workspaces through a mirror of each repository kept on this agent (fetched at each
    run's start and between runs): a run fetches only what changed and clones from local disk. false:
    every run clones from the repository itself."""
    mirror_dir: pathlib.Path = pathlib.Path("")
    """The repository mirrors; default `mirrors` beside the spool directory (<state_dir>/<name>/mirrors).
    Only agentd reads it: runs get their own clone."""
    mirror_refresh_seconds: float = 300.0
    """How often agentd fetches, between runs, the mirrors of repositories a run used in the last day
    (with that run's git credential, kept in memory only); 0: only at each run's start."""
    keep_workspaces: bool = False
    """Keep each run's workspace after it ends, for debugging."""
    prefork: bool = True
    """Fork each run's supervisor from a template process that has its code imported (agentd/daemon/prefork.py);
    false: start a fresh interpreter per run (slower by the imports: ~0.3 s a command, ~2 s a harness)."""
    default_timeout_seconds: int = 7200
    """Timeout of runs whose Task sets none."""
    kill_grace_seconds: float = 10.0
    """Between SIGTERM and SIGKILL to a run's process group."""
    session_user: str = ""
    """One OS user every run's commands run as inside the sandbox (agentd must be root). Weaker than the
    default: runs then share per-user limits (one run forking to RLIMIT_NPROC stops the others from
    forking) and can signal each other's leftovers. "": as root, each run slot its own uid
    (run_uid_base); otherwise agentd's own user."""
    run_uid_base: int = 0
    """As root without session_user, run slot i (0..capacity-1) runs as uid = gid = base + i (`uid_base`).
    0: a base of 2,000,000,000 + 4096 x (a number from a hash of the spool directory), so agentds
    sharing a host get uids of their own and a restart with the same spool the same ones. No user or
    group may own those ids (agentd refuses to start); agentds sharing a host with bases set by hand
    need them at least `capacity` apart."""
    cgroups: bool = True
    """Hold each run's memory, processes and CPU share in a cgroup of its slot (v2, or v1 memory, pids
    and cpu); false, or where agentd cannot make them: the per-process rlimits alone (a loud warning)."""
    run_memory_bytes: int = 4 * 1024**3
    """Memory (and swap) of a whole run, all its processes and its /tmp together (the cgroup's limit)."""
    run_processes: int = 512
    """Processes and threads of a whole run (the cgroup's pids.max; RLIMIT_NPROC of its uid too)."""
    run_disk_bytes: int = 32 * 1024**3
    """Each run's workspace is a filesystem of this size of its own (a sparse ext4 image beside it), so
    a run filling it cannot fill agentd's disk; 0: no such filesystem (the workspace is a directory), as
    with keep_workspaces."""
    run_tmp_bytes: int = 1024**3
    """Size of the private /tmp (a tmpfs) of each command in the sandbox."""
    unsafe_no_sandbox: bool = False
    """Run Tasks WITHOUT bubblewrap: no filesystem, network or process isolation at all. Without it,
    agentd refuses to start where bubblewrap cannot make its namespaces."""
    bwrap: str = "/usr/bin/bwrap"
    """The bubblewrap executable."""
    seccomp: bool = True
    """Run every sandboxed command under agentd's seccomp filter (no user namespaces, mounts, keyrings,
    bpf, perf events, io_uring, TIOCSTI: agentd/run/seccomp.py); false turns it off, with a warning at start."""
    tls: bool = False
    """Dial with TLS (system roots, or ca_file)."""
    ca_file: str = ""
    """CA bundle that signed the control plane's certificate; "": the system roots."""
    tls_cert: str = ""
    """This agent's client certificate (PEM) for a control plane that requires mTLS."""
    tls_key: str = ""
    keepalive_seconds: int = 10
    """HTTP/2 pings keep NAT mappings open."""
    reconnect_max_seconds: float = 30.0
    """The longest wait between two attempts to reach the control plane (the backoff starts at 0.5 s
    and doubles up to this). Keep it well under the control plane's `agent_lost_seconds` (120 s): after
    a control-plane start, an agent that has not reconnected within that window loses its runs."""
    metrics_listen: str = ""
    """host:port of a Prometheus /metrics endpoint; empty: none."""
    batch_interval: float = 0.2
    batch_bytes: int = 256 * 1024
    claude_command: str = "claude"
    """The Claude Code executable (TOML: [drivers] claude_command); the claude-code runtime is offered
    only when it is found."""
    opencode_command: str = "opencode"
    """The opencode executable (TOML: [drivers] opencode_command); likewise for the opencode runtime."""

    def drivers(self) -> list[str]:
        """What this agent runs: commands, the harness, and the external runtimes installed here."""
        return ["command", "harness", *self.runtime_commands()]

    def runtime_commands(self) -> dict[str, str]:
        """The external runtimes this agent offers, each with its executable's full path."""
        found = {"claude-code": shutil.which(self.claude_command), "opencode": shutil.which(self.opencode_command)}
        return {runtime: path for runtime, path in found.items() if path}

    @property
    def spool(self) -> pathlib.Path:
        if str(self.spool_dir) not in ("", "."):
            return self.spool_dir
        return state_dir(os.geteuid(), os.environ) / self.name / "spool"

    @property
    def prepared_cache(self) -> pathlib.Path:
        """prepared_cache_dir, else `prepared` beside the spool (<state_dir>/<name>/prepared by default)."""
        if str(self.prepared_cache_dir) not in ("", "."):
            return self.prepared_cache_dir
        return self.spool.parent / "prepared"

    @property
    def mirrors(self) -> pathlib.Path:
        """mirror_dir, else `mirrors` beside the spool (<state_dir>/<name>/mirrors by default)."""
        if str(self.mirror_dir) not in ("", "."):
            return self.mirror_dir
        return self.spool.parent / "mirrors"

    @property
    def instance(self) -> str:
        """8 hex digits of a hash of the spool's full path: tells apart agentds of one name on one host
        (their cgroups, their run uids), and stays the same when agentd restarts with the same spool."""
        return hashlib.sha256(str(self.spool.resolve()).encode()).hexdigest()[:8]

    @property
    def uid_base(self) -> int:
        """The uid of run slot 0: run_uid_base, or when that is 0 a block of this instance's own."""
        if self.run_uid_base:
            return self.run_uid_base
        return AUTO_UID_BASE + int(self.instance, 16) % UID_BLOCKS * UID_BLOCK


def state_dir(euid: int, env: Mapping[str, str]) -> pathlib.Path:
    """Where agentd keeps its state when no spool_dir is set, never the directory it was started from:
    /var/lib/drover-agentd as root; else $XDG_STATE_HOME/drover-agentd, ~/.local/state/drover-agentd
    when that is unset or not absolute (the XDG base directory rule)."""
    if euid == 0:
        return pathlib.Path("/var/lib/drover-agentd")
    xdg = env.get("XDG_STATE_HOME", "")
    if xdg and pathlib.Path(xdg).is_absolute():
        return pathlib.Path(xdg) / "drover-agentd"
    home = env.get("HOME") or str(pathlib.Path.home())
    return pathlib.Path(home) / ".local" / "state" / "drover-agentd"


def parse_labels(value: Any) -> dict[str, str]:
    if isinstance(value, Mapping):
        return {str(k): str(v) for k, v in value.items()}
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    labels = {}
    for item in items:
        item = str(item).strip()
        if not item:
            continue
        if "=" not in item:
            raise ValueError(f"label {item!r}: expected key=value")
        key, _, val = item.partition("=")
        labels[key.strip()] = val.strip()
    return labels


def _coerce(field: dataclasses.Field[Any], value: Any) -> Any:
    kind = field.type
    if field.name == "labels":
        return parse_labels(value)
    if "Path" in str(kind):
        return pathlib.Path(value)
    if kind == "bool" or kind is bool:
        return value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes", "on")
    if kind == "int" or kind is int:
        return int(value)
    if kind == "float" or kind is float:
        return float(value)
    return str(value)


def load(file: pathlib.Path | None, env: Mapping[str, str], flags: Mapping[str, Any]) -> AgentConfig:
    fields = {f.name: f for f in dataclasses.fields(AgentConfig)}
    values: dict[str, Any] = {}
    if file is not None:
        data = tomllib.loads(file.read_text())
        drivers = data.pop("drivers", {})
        if not isinstance(drivers, dict) or set(drivers) - DRIVER_KEYS:
            raise ValueError(f"{file}: [drivers] takes {', '.join(sorted(DRIVER_KEYS))}")
        data.update(drivers)
        for key, value in data.items():
            if key not in fields:
                raise ValueError(f"{file}: unknown setting {key!r}")
            values[key] = _coerce(fields[key], value)
    for key, field in fields.items():
        if ENV_PREFIX + key.upper() in env:
            values[key] = _coerce(field, env[ENV_PREFIX + key.upper()])
    for key, value in flags.items():
        if value is not None:
            values[key] = _coerce(fields[key], value)
    config = AgentConfig(**values)
    if config.capacity < 1:
        raise ValueError("capacity: must be at least 1")
    if not 0 < config.reconnect_max_seconds <= 300:
        raise ValueError("reconnect_max_seconds: must be more than 0 and at most 300")
    for name in ("run_memory_bytes", "run_processes", "run_tmp_bytes"):
        if getattr(config, name) < 1:
            raise ValueError(f"{name}: must be positive")
    if config.prepared_cache_max_bytes < 0:
        raise ValueError("prepared_cache_max_bytes: must be 0 (off) or positive")
    if config.mirror_refresh_seconds < 0:
        raise ValueError("mirror_refresh_seconds: must be 0 (only at each run's start) or positive")
    if config.run_disk_bytes < 0:
        raise ValueError("run_disk_bytes: must be 0 (off) or positive")
    if config.run_uid_base == 0 and config.capacity > UID_BLOCK:
        raise ValueError(f"run_uid_base: set it when capacity is more than {UID_BLOCK} (0 gives {UID_BLOCK} uids)")
    if config.run_uid_base and not 0 < config.run_uid_base <= 2**32 - 2 - config.capacity:
        raise ValueError("run_uid_base: must be 0 (one of its own) or leave room below 2^32 - 1 for `capacity` uids")
    return config
