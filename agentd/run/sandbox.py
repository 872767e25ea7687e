"""Where a run's command executes: inside bubblewrap, or, only when agentd was started with
--unsafe-no-sandbox, with no isolation at all.

A Sandbox only rewrites a command: `wrap(argv, cwd, env)` answers the Launch (agentd/run/launch.py) to
spawn: bubblewrap with a fixed environment in "/", the command's own `env` in a memory file only the
launcher reads inside. In bubblewrap the command sees its workspace read-write, the system and an
allowlist of /etc read-only, a private /tmp, its own PID namespace (nothing outlives it), no network
unless the policy allows it, and a seccomp filter refusing user namespaces (agentd/run/seccomp.py);
nothing of agentd (config, spool, tokens, keys, other runs), /root or /home. The launcher runs first
inside it: it sets the resource limits and drops to the session user before the command starts. In
bubblewrap that is the native agentd/run/launcher.c (built by agentd/run/launcher.py; rlimits.py when
no C compiler is there); without a sandbox it is `python -I -S agentd/run/rlimits.py`.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import pwd
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from typing import Protocol

from agentd.run import cgroup_lock, etc_view, launcher, seccomp
from agentd.run.confined import Confined, ready_pipe
from agentd.run.launch import Launch, env_file
from drover.core import commands

GiB = 1024**3
BWRAP = "/usr/bin/bwrap"
LAUNCHER = pathlib.Path(__file__).with_name("rlimits.py")
LAUNCHER_INSIDE = "/run/drover/rlimits.py"
"""Where the launcher shows inside the sandbox: a fixed path, so agentd's checkout stays hidden."""
NATIVE_INSIDE = "/run/drover/launcher"
"""Where the native launcher (agentd/run/launcher.py) shows inside, when it could be built."""
# The read-only system. Each is bound when it is a directory here, recreated when it is a symlink
# (usrmerge: /bin -> usr/bin), skipped when absent. /etc is not in it: see ETC_ALLOWED.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64")
PROBE_SECONDS = 10
MODES = ("bubblewrap", "none")
"""A run's spec says which: agentd decides once at start, a supervisor never falls back."""


@dataclasses.dataclass(frozen=True)
class Bind:
    """A host path shown inside the sandbox at `inside` (read-only unless `writable`). Without a
    sandbox nothing is bound: the command sees the host's paths."""

    source: pathlib.Path
    inside: str
    writable: bool = False


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
    seccomp: bool = True
    """Run under agentd/run/seccomp.py's filter (no user namespaces, mounts, keyrings, bpf, io_uring...)."""
    uid: int = -1
    gid: int = -1
    """Run as this uid and gid (a run slot's, agentd/daemon/run_slots.py) instead of `user`; -1: `user`."""
    cgroup_fds: tuple[int, ...] = ()
    """Open cgroup.procs files of the run (agentd/daemon/cgroups.py) the launcher joins before it drops to the user."""
    cgroup_dirs: tuple[str, ...] = ()
    """The run's cgroup directories: each launch first starts the kernel's wait for the join (cgroup_lock)."""
    tmp_bytes: int = 1 * GiB
    """Size of the sandbox's private /tmp (a tmpfs, counted in the run's memory)."""

    def ids(self) -> tuple[int, int] | None:
        """The uid and gid the command runs as (None: agentd's own); ValueError for an unknown user."""
        return (self.uid, self.gid) if self.uid >= 0 else user_ids(self.user) if self.user else None

    def switches_user(self, privileged: bool) -> bool:
        """Whether the launcher becomes another user than agentd's; ValueError when it cannot (not root)."""
        ids = self.ids()
        if ids is not None and ids[0] != os.geteuid() and not privileged:
            raise ValueError(f"running commands as {self.user or ids[0]} needs agentd to run as root")
        return ids is not None and ids[0] != os.geteuid()


class Sandbox(Protocol):
    @property
    def policy(self) -> SandboxPolicy: ...

    @property
    def isolated(self) -> bool:
        """Whether the command runs in its own PID namespace (and reports it on `ready_fd`)."""
        ...

    def wrap(
        self,
        argv: list[str],
        cwd: pathlib.Path,
        env: dict[str, str],
        *,
        writable: pathlib.Path | Sequence[pathlib.Path] | None = None,
        ready_fd: int | None = None,
        binds: Sequence[Bind] = (),
    ) -> Launch:
        """The Launch that runs `argv` in `cwd` with exactly `env`. `writable` (default `cwd`)
        are the directories the command may change; `ready_fd`, inherited by the command's launcher,
        gets its PID namespace once the sandbox is up; `binds` show more of the host inside (a
        runtime's installation, the model gateway's socket, the workspace's git directory read-only
        at repo/.git), each after the writable directories, so one may lie inside them."""
        ...


def _check(argv: Sequence[str], env: Mapping[str, str]) -> None:
    """ValueError when the command could not start: the rule the control plane checked at submit."""
    refused = commands.refusal(argv, env)
    if refused is not None:
        raise ValueError(f"cannot start this command: {refused}")


def _launcher(
    policy: SandboxPolicy,
    path: str,
    chdir: pathlib.Path | None = None,
    ready_fd: int | None = None,
    env_fd: int | None = None,
) -> list[str]:
    """The launcher's argv: `path` is rlimits.py (run by this Python) or the native launcher."""
    argv = [
        *([] if path == NATIVE_INSIDE else [sys.executable, "-I", "-S"]),
        path,
        "--as",
        str(policy.memory_bytes),
        "--cpu",
        str(policy.cpu_seconds),
        "--fsize",
        str(policy.file_bytes),
        "--nproc",
        str(policy.processes),
    ]
    ids = policy.ids()
    if ids is not None:
        argv += ["--uid", str(ids[0]), "--gid", str(ids[1])]
    if policy.cgroup_fds:
        argv += ["--cgroup-fds", ",".join(map(str, policy.cgroup_fds))]
    if chdir is not None:
        argv += ["--chdir", str(chdir)]
    if ready_fd is not None:
        argv += ["--ready-fd", str(ready_fd)]
    if env_fd is not None:
        argv += ["--env-fd", str(env_fd)]
    return argv + ["--"]


def user_ids(user: str) -> tuple[int, int]:
    """The uid and gid of `user`; ValueError when there is no such user."""
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise ValueError(f"sandbox user {user!r} does not exist") from None
    return entry.pw_uid, entry.pw_gid


def namespace_flags(privileged: bool, network: bool, switches_user: bool) -> list[str]:
    """bubblewrap's namespaces and capabilities. As root --unshare-all would add a user namespace,
    in which the launcher's setgroups() fails: root unshares the rest one by one and keeps only
    CAP_SETUID/CAP_SETGID for the launcher, which loses them when it drops to the session user
    (bwrap sets NO_NEW_PRIVS, so no setuid binary gives them back)."""
    if not privileged:
        return ["--unshare-all", *(["--share-net"] if network else []), "--cap-drop", "ALL"]
    flags = ["--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"]
    if not network:
        flags.append("--unshare-net")
    flags += ["--cap-drop", "ALL"]
    if switches_user:
        flags += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    return flags


@dataclasses.dataclass(frozen=True)
class BubblewrapSandbox:
    """Read-only system, writable workspace, private /tmp, own PID namespace, no network unless the
    policy allows it, no capabilities, and everything dies with the process that started it."""

    policy: SandboxPolicy
    bwrap: str = BWRAP
    privileged: bool = dataclasses.field(default_factory=lambda: os.geteuid() == 0)
    """agentd runs as root: no user namespace, the launcher switches to the policy's user."""
    native: bool = True
    """Start the command through the native launcher (agentd/run/launcher.c) when it can be built here,
    not through `python -I -S rlimits.py`: the same steps without an interpreter's start."""

    @property
    def isolated(self) -> bool:
        return True

    def wrap(
        self,
        argv: list[str],
        cwd: pathlib.Path,
        env: dict[str, str],
        *,
        writable: pathlib.Path | Sequence[pathlib.Path] | None = None,
        ready_fd: int | None = None,
        binds: Sequence[Bind] = (),
    ) -> Launch:
        _check(argv, env)
        cgroup_lock.warm(self.policy.cgroup_dirs)  # waits beside bwrap's setup, not in the launcher's join
        switches = self.policy.switches_user(self.privileged)
        inside = os.path.abspath(cwd)
        shown = [os.path.abspath(path) for path in _paths(writable, cwd)]
        command = self._system(switches)
        made, bound = {"/", "/tmp", "/dev", "/proc"}, list(SYSTEM_DIRS)
        command += _mkdirs("/etc", made, bound)
        etc_args, etc_fds = etc_view.arguments(lambda directory: _mkdirs(directory, made, bound))
        command += etc_args
        try:
            tmp = ["--perms", "1777", "--size", str(self.policy.tmp_bytes), "--tmpfs", "/tmp"]
            # /dev/shm too (bwrap's /dev has it root's 0755: multiprocessing's locks failed as the run's user)
            shm = ["--perms", "1777", "--size", str(self.policy.tmp_bytes), "--tmpfs", "/dev/shm"]
            command += ["--dev", "/dev", *shm, "--proc", "/proc", *tmp]
            # After --tmpfs /tmp, so a Python or a workspace under /tmp is not hidden by it. Each parent
            # is made 0755: bwrap would make it 0700, which the session user cannot pass through.
            for path in _python_dirs():
                command += _mkdirs(os.path.dirname(path), made, bound) + ["--ro-bind", path, path]
                bound.append(path)
            native = launcher.binary() if self.native else None
            start = NATIVE_INSIDE if native else LAUNCHER_INSIDE
            command += _mkdirs(os.path.dirname(start), made, bound) + ["--ro-bind", native or str(LAUNCHER), start]
            for path in shown:
                command += _mkdirs(os.path.dirname(path), made, bound)
                command += ["--bind", str(pathlib.Path(path).resolve()), path]
            bound += shown
            for bind in binds:
                if not _under(bind.inside, tuple(bound)):
                    command += _mkdirs(os.path.dirname(bind.inside), made, bound)
                command += ["--bind" if bind.writable else "--ro-bind", str(bind.source), bind.inside]
            owned, filter_args = _descriptors(env, self.policy.seccomp)
            env_fd = owned[0]
            command += ["--remount-ro", "/", *filter_args, "--"]
            # The launcher changes directory after it became the user: bwrap, root without
            # CAP_DAC_OVERRIDE by then, could not enter a workspace only the user may. It reads the
            # command's environment from env_fd: bwrap itself runs with agentd's fixed one.
            command += _launcher(self.policy, start, chdir=pathlib.Path(inside), ready_fd=ready_fd, env_fd=env_fd)
            owned += etc_fds
            fds = tuple(f for f in (ready_fd, *owned) if f is not None) + self.policy.cgroup_fds
            return Launch(command + list(argv), pass_fds=fds, owned=owned)
        except BaseException:
            for fd in etc_fds:
                os.close(fd)
            raise

    def _system(self, switches: bool) -> list[str]:
        """bwrap with its namespaces, and the read-only system: each of SYSTEM_DIRS bound, or its symlink
        made (usrmerge)."""
        command = [
            self.bwrap,
            *namespace_flags(self.privileged, self.policy.network, switches),
            "--die-with-parent",
            "--new-session",
        ]
        for path in SYSTEM_DIRS:
            if os.path.islink(path):
                command += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                command += ["--ro-bind", path, path]
        return command

    def probe(self) -> str:
        """Whether bubblewrap can set up this sandbox here (as the policy's user): "" when it can,
        else why not."""
        if not os.access(self.bwrap, os.X_OK):
            return f"{self.bwrap} is not installed"
        with tempfile.TemporaryDirectory(prefix="drover-probe-") as scratch:
            os.chmod(scratch, 0o755)  # empty; the session user must be able to enter it
            read, write = ready_pipe()
            processes = Confined(0, read)
            try:
                with self.wrap(["true"], pathlib.Path(scratch), {"PATH": "/usr/bin:/bin"}, ready_fd=write) as launch:
                    done = subprocess.run(
                        launch.argv,
                        stdin=subprocess.DEVNULL,
                        capture_output=True,
                        text=True,
                        timeout=PROBE_SECONDS,
                        **launch.spawn_kwargs(),
                    )
            except (OSError, ValueError, subprocess.TimeoutExpired) as err:
                return f"{self.bwrap} did not run: {err}"
            finally:
                os.close(write)
                reported = processes.started  # only the launcher's word proves the sandbox
                processes.close()
        if done.returncode != 0 or not reported:
            return f"{self.bwrap} cannot create namespaces here: {done.stderr.strip() or done.returncode}"
        return ""


@dataclasses.dataclass(frozen=True)
class PlainSandbox:
    """No isolation at all, only the resource limits and the user: agentd --unsafe-no-sandbox."""

    policy: SandboxPolicy

    @property
    def isolated(self) -> bool:
        return False

    def wrap(
        self,
        argv: list[str],
        cwd: pathlib.Path,
        env: dict[str, str],
        *,
        writable: pathlib.Path | Sequence[pathlib.Path] | None = None,
        ready_fd: int | None = None,
        binds: Sequence[Bind] = (),
    ) -> Launch:
        _check(argv, env)
        cgroup_lock.warm(self.policy.cgroup_dirs)
        env_fd = env_file(env)
        launcher = _launcher(self.policy, str(LAUNCHER), chdir=pathlib.Path(os.path.abspath(cwd)), env_fd=env_fd)
        return Launch(launcher + list(argv), pass_fds=(env_fd, *self.policy.cgroup_fds), owned=(env_fd,))


UNSANDBOXED = (
    "this run is NOT sandboxed (agentd was started with --unsafe-no-sandbox): the command "
    "can read and write whatever its user can, reach the network and leave processes behind"
)


def for_mode(mode: str, policy: SandboxPolicy, bwrap: str = BWRAP) -> Sandbox:
    """The sandbox a run's spec names ("bubblewrap" or "none"); never a weaker one than asked."""
    if mode == "none":
        return PlainSandbox(policy)
    if mode != "bubblewrap":
        raise ValueError(f"unknown sandbox mode {mode!r} (known: {', '.join(MODES)})")
    return BubblewrapSandbox(policy, bwrap)


def _descriptors(env: dict[str, str], filtered: bool) -> tuple[tuple[int, ...], list[str]]:
    """The command's env file (agentd/run/launch.py) and, when `filtered`, the seccomp filter's
    (agentd/run/seccomp.py: no user namespaces, mounts, keyrings, bpf, io_uring...), which bwrap applies
    from the launcher on; with bwrap's arguments for the filter."""
    env_fd = env_file(env)
    if not filtered:
        return (env_fd,), []
    try:
        filter_fd, args = seccomp.for_bwrap()
    except BaseException:
        os.close(env_fd)
        raise
    return (env_fd, filter_fd), args


def _paths(writable: pathlib.Path | Sequence[pathlib.Path] | None, cwd: pathlib.Path) -> list[pathlib.Path]:
    if writable is None:
        return [cwd]
    if isinstance(writable, (str, os.PathLike)):
        return [pathlib.Path(writable)]
    return [pathlib.Path(path) for path in writable]


def _mkdirs(path: str, made: set[str], bound: list[str]) -> list[str]:
    """bwrap arguments making `path` and its parents as 0755 directories, but those already made
    and those inside a bound tree (they exist there)."""
    args: list[str] = []
    for directory in (*reversed(pathlib.PurePosixPath(path).parents), pathlib.PurePosixPath(path)):
        name = str(directory)
        if name in made or _under(name, tuple(bound)):
            continue
        args += ["--perms", "0755", "--dir", name]
        made.add(name)
    return args


def _python_dirs() -> list[str]:
    """The directories this Python runs from (a venv and the installation under it), so the
    launcher and `python` work inside; those the system binds already cover are left out."""
    found = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, os.path.dirname(sys.executable)}
    paths = {os.path.abspath(p) for p in found if p} | {os.path.realpath(p) for p in found if p}
    kept: list[str] = []
    for path in sorted(paths, key=len):
        if os.path.isdir(path) and path != "/" and not _under(path, SYSTEM_DIRS + tuple(kept)):
            kept.append(path)
    return kept


def _under(path: str, parents: tuple[str, ...]) -> bool:
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in parents)
