"""The launcher in front of every command: set resource limits, optionally become a user, then exec.

    python -I -S agentd/run/rlimits.py --as BYTES --cpu SECONDS --fsize BYTES --nproc N
                                   [--uid UID --gid GID] [--chdir DIR] [--ready-fd FD] [--env-fd FD]
                                   [--cgroup-fds FD,FD...] -- COMMAND [ARG...]

It runs inside the sandbox, as the first process bubblewrap starts (outside only when agentd
runs without one). Limits set here are inherited by everything the command starts, and a lowered
hard limit cannot be raised again without privilege. Dropping to the user here, not in
bubblewrap, is what lets bubblewrap run as root without a user namespace: the process keeps only
CAP_SETUID and CAP_SETGID until setuid() clears them. It imports only the standard library and is
started with `-I -S`: nothing from the workspace (or the environment) can change what it loads.
It parses its own few options (argparse alone would add 20 ms to every run's start).

With --env-fd (agentd/run/launch.py's sealed memory file of NUL-separated NAME=VALUE entries) the
command gets exactly that environment, read here, inside the sandbox, and the descriptor is closed
before the exec; the launcher's own environment (agentd's fixed one) never reaches the command.

With --cgroup-fds (descriptors of cgroup.procs files the supervisor opened: /sys/fs/cgroup is not
visible inside the sandbox) it moves itself into those cgroups while still uid 0, before it drops to
the user, and closes them: the command and all it starts are counted in the run's cgroups and, as the
user, cannot move out.

With --ready-fd (a Unix socket) it sends its PID namespace's name ("pid:[N]", a newline) and a
descriptor of the namespace just before it execs: the supervisor learns that the sandbox is up and
which processes are the run's (agentd/run/confined.py).
"""

from __future__ import annotations

import _socket  # not `socket`: the launcher starts on every run, and `socket` costs ~7 ms of imports
import os
import resource
import sys

LIMITS = {
    "as": resource.RLIMIT_AS,
    "cpu": resource.RLIMIT_CPU,
    "fsize": resource.RLIMIT_FSIZE,
    "nproc": resource.RLIMIT_NPROC,
}


def original_environ() -> dict[str, str]:
    """The environment this process was started with. Python itself may have added to os.environ
    (LC_CTYPE, when it coerces a C locale); /proc/self/environ still holds what the caller gave."""
    try:
        with open("/proc/self/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return dict(os.environ)
    env = {}
    for entry in raw.split(b"\0"):
        name, sep, value = entry.partition(b"=")
        if sep:
            env[os.fsdecode(name)] = os.fsdecode(value)
    return env


def read_env(fd: int) -> dict[str, str]:
    """The environment in agentd's env file `fd` (closed once read)."""
    chunks = []
    try:
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    finally:
        os.close(fd)
    env = {}
    for entry in b"".join(chunks).split(b"\0"):
        name, sep, value = entry.partition(b"=")
        if sep and name:
            env[os.fsdecode(name)] = os.fsdecode(value)
    return env


def set_limit(which: int, value: int) -> None:
    """Soft and hard both at `value`, or at the current hard limit when that is lower
    (raising a hard limit needs a privilege the caller may not have)."""
    _, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(which, (value, value))


def become(uid: int, gid: int) -> None:
    """Drop to uid/gid with no supplementary groups; nothing to do when already them."""
    if os.getuid() == os.geteuid() == uid and os.getgid() == os.getegid() == gid:
        return
    os.setgroups([gid])
    os.setgid(gid)
    os.setuid(uid)


def join_cgroups(fds: str) -> None:
    """Move this process into the cgroups whose cgroup.procs are open at `fds` ("5,6"), then close them."""
    for fd in (int(d) for d in fds.split(",") if d):
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)


def report_ready(fd: int) -> None:
    """Say which PID namespace this is, and hand over a descriptor of it, then close the channel so
    the command cannot use it."""
    try:
        name, pinned = os.readlink("/proc/self/ns/pid"), [os.open("/proc/self/ns/pid", os.O_RDONLY)]
    except OSError:
        name, pinned = "unknown", []
    channel = _socket.socket(fileno=fd)
    try:
        rights = b"".join(d.to_bytes(4, sys.byteorder) for d in pinned)  # C ints, as SCM_RIGHTS takes them
        channel.sendmsg([f"{name}\n".encode()], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, rights)] if pinned else [])
    finally:
        channel.close()
    for descriptor in pinned:
        os.close(descriptor)


def execvpe(command: list[str], env: dict[str, str]) -> None:
    """os.execvpe without its lazy `import warnings`: the launcher loads nothing past the frozen modules,
    which the session user can always read (the stdlib directory it may not)."""
    if "/" in command[0]:
        os.execve(command[0], command, env)
    first: OSError | None = None
    for directory in env.get("PATH", os.defpath).split(os.pathsep):
        try:
            os.execve(os.path.join(directory or ".", command[0]), command, env)
        except OSError as err:  # like execvp: go on, report the first error that is not "not here"
            if first is None and not isinstance(err, (FileNotFoundError, NotADirectoryError)):
                first = err
    raise first or FileNotFoundError(2, "No such file or directory", command[0])


OPTIONS = (*LIMITS, "uid", "gid", "chdir", "ready-fd", "env-fd", "cgroup-fds")
USAGE = (
    "rlimits: usage: rlimits.py [--as N --cpu N --fsize N --nproc N --uid N --gid N --chdir DIR --ready-fd FD"
    " --env-fd FD --cgroup-fds FD,FD] -- COMMAND [ARG...]"
)


def parse(options: list[str]) -> dict[str, str]:
    """`--name value` pairs, each name one of OPTIONS. ValueError says what is wrong."""
    parsed: dict[str, str] = {}
    for i in range(0, len(options), 2):
        name = options[i][2:] if options[i].startswith("--") else ""
        if name not in OPTIONS:
            raise ValueError(f"unknown option {options[i]!r}")
        if i + 1 == len(options):
            raise ValueError(f"{options[i]} needs a value")
        digits = options[i + 1].replace(",", "") if name == "cgroup-fds" else options[i + 1].lstrip("-")
        if name != "chdir" and not digits.isdigit():
            raise ValueError(f"{options[i]} takes a number, not {options[i + 1]!r}")
        parsed[name] = options[i + 1]
    return parsed


def main(args: list[str]) -> None:
    if "--" not in args:
        sys.exit(USAGE)
    split = args.index("--")
    try:
        opts = parse(args[:split])
    except ValueError as err:
        sys.exit(f"rlimits: {err}\n{USAGE}")
    command = args[split + 1 :]
    if not command:
        sys.exit("rlimits: no command")
    try:
        env = read_env(int(opts["env-fd"])) if "env-fd" in opts else original_environ()
        if opts.get("cgroup-fds"):
            join_cgroups(opts["cgroup-fds"])
        for name, which in LIMITS.items():
            if name in opts:
                set_limit(which, int(opts[name]))
        if "uid" in opts:
            become(int(opts["uid"]), int(opts.get("gid", opts["uid"])))
        if opts.get("chdir"):
            os.chdir(opts["chdir"])
        if "ready-fd" in opts:
            report_ready(int(opts["ready-fd"]))
    except OSError as err:
        print(f"rlimits: cannot prepare the command: {err}", file=sys.stderr)
        sys.exit(126)
    try:
        execvpe(command, env)
    except OSError as err:
        print(f"rlimits: cannot start {command[0]}: {err.strerror}", file=sys.stderr)
        sys.exit(127)


if __name__ == "__main__":
    main(sys.argv[1:])
