"""Where a run's command executes: inside bubblewrap when it works here, otherwise (loudly) not.

A Sandbox only rewrites a command: `wrap(argv, workspace, env)` answers the argv and environment
to hand to `subprocess.Popen(..., start_new_session=True)`. Either way the command starts behind
the `agentd/rlimits.py` launcher, which sets the resource limits (and drops to the session user)
before anything else runs, so the limits hold for bubblewrap and every process below it.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import pwd
import stat
import subprocess
import sys
from typing import Protocol

GiB = 1024 ** 3
LAUNCHER = pathlib.Path(__file__).with_name("rlimits.py")
# The read-only system. Each is bound when it is a directory here, recreated when it is a symlink
# (usrmerge: /bin -> usr/bin), skipped when absent. /root, /home and agentd's spool are not in it.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc")
PROBE_SECONDS = 10


@dataclasses.dataclass(frozen=True)
class SandboxPolicy:
    """What a command may do. Limits apply per process (RLIMIT_*), inherited by its children."""

    network: bool = False
    """Whether the command shares the host's network; without it, it has only its own loopback."""
    memory_bytes: int = 4 * GiB
    """Address space per process (RLIMIT_AS); default 4 GiB."""
    cpu_seconds: int = 600
    """CPU time per process (RLIMIT_CPU); default 600 s."""
    file_bytes: int = 1 * GiB
    """Largest file a process may write (RLIMIT_FSIZE); default 1 GiB."""
    processes: int = 512
    """Processes of the command's user (RLIMIT_NPROC); default 512."""
    user: str = ""
    """Run as this user (a name in the passwd database); empty: as agentd's own user."""


class Sandbox(Protocol):
    @property
    def policy(self) -> SandboxPolicy: ...

    def wrap(self, argv: list[str], workspace: pathlib.Path,
             env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        """The argv and env that run `argv` in `workspace` (its working directory) with exactly `env`."""
        ...

    def warning(self) -> str:
        """A sentence to print when this sandbox is weaker than it should be; empty when it is not."""
        ...


def _launcher(policy: SandboxPolicy, chdir: pathlib.Path | None = None) -> list[str]:
    argv = [sys.executable, "-I", "-S", str(LAUNCHER),
            "--as", str(policy.memory_bytes), "--cpu", str(policy.cpu_seconds),
            "--fsize", str(policy.file_bytes), "--nproc", str(policy.processes)]
    if policy.user:
        uid, gid = _ids(policy.user)
        argv += ["--uid", str(uid), "--gid", str(gid)]
    if chdir is not None:
        argv += ["--chdir", str(chdir)]
    return argv + ["--"]


def _ids(user: str) -> tuple[int, int]:
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise ValueError(f"sandbox user {user!r} does not exist") from None
    return entry.pw_uid, entry.pw_gid


@dataclasses.dataclass(frozen=True)
class BubblewrapSandbox:
    """Read-only system, writable workspace, private /tmp, no network unless the policy allows it,
    no capabilities, and everything dies with the process that started it."""

    policy: SandboxPolicy
    bwrap: str = "/usr/bin/bwrap"

    def wrap(self, argv: list[str], workspace: pathlib.Path,
             env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        if not argv:
            raise ValueError("no command to run")
        if "=" in argv[0]:
            raise ValueError(f"a command name with '=' cannot run in the sandbox: {argv[0]!r}")
        inside = os.path.abspath(workspace)
        command = [self.bwrap, "--unshare-all"]
        if self.policy.network:
            command.append("--share-net")
        command += ["--die-with-parent", "--new-session", "--cap-drop", "ALL"]
        if self.policy.user:
            uid, gid = _ids(self.policy.user)
            command += ["--uid", str(uid), "--gid", str(gid)]
        for path in SYSTEM_DIRS:
            if os.path.islink(path):
                command += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                command += ["--ro-bind", path, path]
        command += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
        # Binds after --tmpfs /tmp, so a Python or a workspace under /tmp is not hidden by it.
        for path in _python_dirs():
            if not self.policy.user or _reachable(path, *_ids(self.policy.user)):
                command += ["--ro-bind", path, path]
        if self.policy.network and os.path.islink("/etc/resolv.conf"):
            resolv = os.path.realpath("/etc/resolv.conf")  # often under /run, which is not bound
            if os.path.isfile(resolv) and not _under(resolv, ("/etc",)):
                command += ["--ro-bind", resolv, resolv]
        command += ["--bind", str(pathlib.Path(inside).resolve()), inside, "--chdir", inside,
                    "--remount-ro", "/", "--"]
        # bwrap always sets PWD; env(1) takes it back out (or back to what was given),
        # so the command sees exactly `env`.
        restore = ["--", f"PWD={env['PWD']}"] if "PWD" in env else ["-u", "PWD", "--"]
        command += ["/usr/bin/env", *restore]
        return _launcher(self.policy) + command + list(argv), dict(env)

    def warning(self) -> str:
        return ""

    def probe(self) -> str:
        """Whether bubblewrap can make its namespaces here (as the policy's user): "" when it can,
        else why not."""
        if not os.access(self.bwrap, os.X_OK):
            return f"{self.bwrap} is not installed"
        argv = _launcher(dataclasses.replace(self.policy, network=False)) + [
            self.bwrap, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "--new-session",
            "--cap-drop", "ALL", "--", "/usr/bin/env", "true"]
        try:
            done = subprocess.run(argv, env={"PATH": "/usr/bin:/bin"}, stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=PROBE_SECONDS)
        except (OSError, subprocess.TimeoutExpired) as err:
            return f"{self.bwrap} did not run: {err}"
        if done.returncode != 0:
            return f"{self.bwrap} cannot create namespaces here: {done.stderr.strip() or done.returncode}"
        return ""


@dataclasses.dataclass(frozen=True)
class PlainSandbox:
    """No isolation at all, only the resource limits and the user: for hosts without bubblewrap."""

    policy: SandboxPolicy
    reason: str = ""
    """Why bubblewrap is not used, for the warning."""

    def wrap(self, argv: list[str], workspace: pathlib.Path,
             env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        if not argv:
            raise ValueError("no command to run")
        return _launcher(self.policy, chdir=pathlib.Path(os.path.abspath(workspace))) + list(argv), dict(env)

    def warning(self) -> str:
        why = f" ({self.reason})" if self.reason else ""
        return (f"bubblewrap is not available{why}: commands run WITHOUT a sandbox "
                "(no filesystem or network isolation)")


def detect(policy: SandboxPolicy, bwrap: str = "/usr/bin/bwrap") -> Sandbox:
    """Bubblewrap when it is installed and works here, else PlainSandbox. Probes on every call."""
    sandbox = BubblewrapSandbox(policy, bwrap)
    reason = sandbox.probe()
    return PlainSandbox(policy, reason) if reason else sandbox


def _python_dirs() -> list[str]:
    """The directories this Python runs from (a venv and the installation under it), so `python`
    works inside; those the system binds already cover are left out."""
    found = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             os.path.dirname(sys.executable)}
    paths = {os.path.abspath(p) for p in found if p} | {os.path.realpath(p) for p in found if p}
    kept: list[str] = []
    for path in sorted(paths, key=len):
        if os.path.isdir(path) and path != "/" and not _under(path, SYSTEM_DIRS + tuple(kept)):
            kept.append(path)
    return kept


def _reachable(path: str, uid: int, gid: int) -> bool:
    """Whether uid (with only gid as group, as the launcher leaves it) can reach `path`. bwrap makes
    its binds as that user and gives up on one it cannot see, so such a Python is left out
    rather than stopping every command."""
    for directory in (*reversed(pathlib.Path(path).parents), pathlib.Path(path)):
        try:
            st = directory.stat()
        except OSError:
            return False
        bit = (stat.S_IXUSR if st.st_uid == uid else stat.S_IXGRP if st.st_gid == gid else stat.S_IXOTH)
        if not st.st_mode & bit:
            return False
    return True


def _under(path: str, parents: tuple[str, ...]) -> bool:
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in parents)
