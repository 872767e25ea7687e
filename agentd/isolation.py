"""How agentd isolates its runs, decided once at start: the session user, and whether bubblewrap
works here. agentd refuses to start without a working sandbox unless told --unsafe-no-sandbox."""

from __future__ import annotations

import dataclasses
import os
import pwd
from collections.abc import Callable

from agentd.config import AgentConfig
from agentd.sandbox import BubblewrapSandbox, SandboxPolicy, user_ids

RUN_USER = "drover-run"
"""The dedicated unprivileged user runs execute as when agentd runs as root (deploy/Dockerfile makes it)."""


NO_SECCOMP = (
    "seccomp = false: sandboxed commands run WITHOUT the seccomp filter: they can create user namespaces "
    "(and be root in them), mount inside them, and reach keyrings, bpf, perf events and io_uring"
)


class Refused(Exception):
    """agentd will not start; the message says why and what to do."""


def default_session_user(configured: str, euid: int, exists: Callable[[str], bool]) -> str:
    """The user runs execute as: the configured one; as root without one, drover-run when it exists,
    else nobody (never root); otherwise agentd's own user ("")."""
    if configured or euid != 0:
        return configured
    return RUN_USER if exists(RUN_USER) else "nobody"


def no_sandbox_message(reason: str) -> str:
    return (
        f"bubblewrap is missing or cannot create namespaces here ({reason}), and agentd does not run "
        "Tasks without a sandbox. Install it (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install "
        "bubblewrap); in a container, let it create namespaces (deploy/compose.yaml shows how). Or start "
        "agentd with --unsafe-no-sandbox (env DROVER_AGENTD_UNSAFE_NO_SANDBOX=1) to run Tasks WITHOUT a "
        "sandbox: their commands can then read agentd's tokens and files, reach the network and leave "
        "processes behind."
    )


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


@dataclasses.dataclass(frozen=True)
class Isolation:
    config: AgentConfig
    """The config runs start with: the session user filled in."""
    said: str
    """What to log at start."""
    warning: str = ""
    """What to log loudly at start (--unsafe-no-sandbox)."""


def probe(config: AgentConfig) -> str:
    """Why bubblewrap cannot run this agent's Tasks here, or "" when it can."""
    user = default_session_user(config.session_user, os.geteuid(), _user_exists)
    return BubblewrapSandbox(SandboxPolicy(user=user, seccomp=config.seccomp), config.bwrap).probe()


def prepare(config: AgentConfig) -> Isolation:
    """How runs will be isolated, or Refused when agentd must not start."""
    euid = os.geteuid()
    user = default_session_user(config.session_user, euid, _user_exists)
    if user:
        try:
            uid, _ = user_ids(user)
        except ValueError as err:
            raise Refused(f"session_user: {err}") from None
        if euid != 0 and uid != euid:
            raise Refused(f"session_user {user!r}: running Tasks as another user needs agentd to run as root")
    if not user:
        who = "runs execute as agentd's own user"
    elif config.session_user:
        who = f"runs execute as {user!r}"
    else:
        who = f"runs execute as {user!r} (agentd runs as root and session_user is not set)"
    config = dataclasses.replace(config, session_user=user)
    if config.unsafe_no_sandbox:
        return Isolation(
            config,
            f"{who}, WITHOUT a sandbox",
            "!!! --unsafe-no-sandbox: Tasks run WITHOUT a sandbox: "
            "their commands can read agentd's tokens and files, reach the network and leave processes "
            "behind !!!",
        )
    reason = probe(config)
    if reason and config.seccomp and not probe(dataclasses.replace(config, seccomp=False)):
        raise Refused(
            f"bubblewrap works here but cannot apply agentd's seccomp filter ({reason}). Set seccomp = false "
            f"(env DROVER_AGENTD_SECCOMP=0) to run Tasks without it; {NO_SECCOMP.split(': ', 1)[1]}"
        )
    if reason:
        raise Refused(no_sandbox_message(reason))
    if not config.seccomp:
        return Isolation(config, f"{who}, each in bubblewrap ({config.bwrap}) WITHOUT a seccomp filter", NO_SECCOMP)
    return Isolation(config, f"{who}, each in bubblewrap ({config.bwrap}) under a seccomp filter")
