"""How agentd isolates its runs, decided once at start: the users runs execute as (a uid per run slot
as root, agentd/daemon/run_slots.py), whether bubblewrap works here, and whether each run gets a cgroup
(agentd/daemon/cgroups.py) and a filesystem (agentd/daemon/run_disk.py) of its own. agentd refuses to start without
a working sandbox unless told --unsafe-no-sandbox, and warns loudly when runs can starve each other."""

from __future__ import annotations

import dataclasses
import grp
import os
import pwd
import shutil

from agentd.daemon import cgroups, run_disk, run_slots
from agentd.daemon.config import AgentConfig
from agentd.errors import CgroupsUnavailable, StartRefused
from agentd.run.sandbox import BubblewrapSandbox, SandboxPolicy, user_ids

NO_SECCOMP = (
    "seccomp = false: sandboxed commands run WITHOUT the seccomp filter: they can create user namespaces "
    "(and be root in them), mount inside them, and reach keyrings, bpf, perf events and io_uring"
)


def no_sandbox_message(reason: str) -> str:
    return (
        f"bubblewrap is missing or cannot create namespaces here ({reason}), and agentd does not run "
        "Tasks without a sandbox. Install it (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install "
        "bubblewrap); in a container, let it create namespaces (deploy/compose.yaml shows how). Or start "
        "agentd with --unsafe-no-sandbox (env DROVER_AGENTD_UNSAFE_NO_SANDBOX=1) to run Tasks WITHOUT a "
        "sandbox: their commands can then read agentd's tokens and files, reach the network and leave "
        "processes behind."
    )


def _user_of(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return ""


def _group_of(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return ""


@dataclasses.dataclass(frozen=True)
class Isolation:
    config: AgentConfig
    """The config runs start with: the session user filled in."""
    said: str
    """What to log at start."""
    warning: str = ""
    """What to log loudly at start (--unsafe-no-sandbox, no cgroups, no filesystem per run), a line each."""


def probe(config: AgentConfig) -> str:
    """Why bubblewrap cannot run this agent's Tasks here, or "" when it can."""
    if run_slots.slotted(config.session_user, os.geteuid()):
        uid, gid = run_slots.ids(config.uid_base, 0)
        return BubblewrapSandbox(SandboxPolicy(uid=uid, gid=gid, seccomp=config.seccomp), config.bwrap).probe()
    return BubblewrapSandbox(SandboxPolicy(user=config.session_user, seccomp=config.seccomp), config.bwrap).probe()


def limits(config: AgentConfig, euid: int) -> tuple[AgentConfig, list[str]]:
    """The config with cgroups and run filesystems turned off where they cannot work here, and the
    warnings saying so."""
    warnings = []
    if not config.cgroups:
        warnings.append(
            "!!! cgroups = false: memory and processes are limited per process only; one run can starve "
            "the others of memory !!!"
        )
    else:
        try:
            if euid != 0:
                raise CgroupsUnavailable("agentd does not run as root")
            cgroups.prepare_agent(cgroups.detect(), cgroups.group_name(config.name, config.instance))
        except (CgroupsUnavailable, OSError) as err:
            warnings.append(
                f"!!! no cgroup per run ({err}): memory and processes are limited per process only; one run "
                "can starve the others of memory (set cgroups = false to silence this) !!!"
            )
            config = dataclasses.replace(config, cgroups=False)
    if config.run_disk_bytes and config.keep_workspaces:
        warnings.append(
            "keep_workspaces: runs keep their workspaces in the work dir, without a filesystem of their own "
            "(a run can fill the work dir's disk)"
        )
        config = dataclasses.replace(config, run_disk_bytes=0)
    if config.run_disk_bytes:
        reason = run_disk.probe(config.work_dir) if euid == 0 else "mounting needs root"
        if reason:
            warnings.append(
                f"!!! no filesystem per run ({reason}): a run can fill the work dir's disk, and agentd's "
                "(set run_disk_bytes = 0 to silence this) !!!"
            )
            config = dataclasses.replace(config, run_disk_bytes=0)
        elif config.capacity * config.run_disk_bytes > shutil.disk_usage(config.work_dir).free:
            warnings.append(
                f"capacity x run_disk_bytes ({cgroups.size(config.capacity * config.run_disk_bytes)}) is more "
                f"than {config.work_dir} has free: runs filling their workspaces can still fill it"
            )
    return config, warnings


def prepare(config: AgentConfig) -> Isolation:
    """How runs will be isolated, or StartRefused when agentd must not start."""
    euid = os.geteuid()
    user = config.session_user
    if user:
        try:
            uid, _ = user_ids(user)
        except ValueError as err:
            raise StartRefused(f"session_user: {err}") from None
        if euid != 0 and uid != euid:
            raise StartRefused(f"session_user {user!r}: running Tasks as another user needs agentd to run as root")
    if run_slots.slotted(config.session_user, euid):
        taken = run_slots.owned_ids(config.uid_base, config.capacity, _user_of, _group_of)
        if taken:
            raise StartRefused(
                f"run_uid_base: the run slots' ids must belong to no user or group, but {'; '.join(taken)}: "
                "choose another run_uid_base"
            )
        last = config.uid_base + config.capacity - 1
        who = f"each run slot executes as a uid of its own ({config.uid_base}..{last})"
    elif not user:
        who = "runs execute as agentd's own user"
    else:
        who = f"runs execute as {user!r}, all of them (session_user: one user shares per-user limits)"
    config, warnings = limits(config, euid)
    held = "cgroups" if config.cgroups else "rlimits only"
    who += f"; runs held by {held}" + (", each on its own filesystem" if config.run_disk_bytes else "")
    if config.unsafe_no_sandbox:
        warnings.insert(
            0,
            "!!! --unsafe-no-sandbox: Tasks run WITHOUT a sandbox: "
            "their commands can read agentd's tokens and files, reach the network and leave processes "
            "behind !!!",
        )
        return Isolation(config, f"{who}, WITHOUT a sandbox", "\n".join(warnings))
    reason = probe(config)
    if reason and config.seccomp and not probe(dataclasses.replace(config, seccomp=False)):
        raise StartRefused(
            f"bubblewrap works here but cannot apply agentd's seccomp filter ({reason}). Set seccomp = false "
            f"(env DROVER_AGENTD_SECCOMP=0) to run Tasks without it; {NO_SECCOMP.split(': ', 1)[1]}"
        )
    if reason:
        raise StartRefused(no_sandbox_message(reason))
    if not config.seccomp:
        warnings.append(NO_SECCOMP)
        return Isolation(
            config, f"{who}, each in bubblewrap ({config.bwrap}) WITHOUT a seccomp filter", "\n".join(warnings)
        )
    return Isolation(config, f"{who}, each in bubblewrap ({config.bwrap}) under a seccomp filter", "\n".join(warnings))
