"""The launcher in front of every command: set resource limits, optionally become a user, then exec.

    python -I -S agentd/rlimits.py --as BYTES --cpu SECONDS --fsize BYTES --nproc N
                                   [--uid UID --gid GID] [--chdir DIR] [--ready-fd FD] -- COMMAND [ARG...]

It runs inside the sandbox, as the first process bubblewrap starts (outside only when agentd
runs without one). Limits set here are inherited by everything the command starts, and a lowered
hard limit cannot be raised again without privilege. Dropping to the user here, not in
bubblewrap, is what lets bubblewrap run as root without a user namespace: the process keeps only
CAP_SETUID and CAP_SETGID until setuid() clears them. It imports only the standard library and is
started with `-I -S`: nothing from the workspace (or the environment) can change what it loads.

With --ready-fd (a Unix socket) it sends its PID namespace's name ("pid:[N]", a newline) and a
descriptor of the namespace just before it execs: the supervisor learns that the sandbox is up and
which processes are the run's (agentd/confined.py).
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
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


def report_ready(fd: int) -> None:
    """Say which PID namespace this is, and hand over a descriptor of it, then close the channel so
    the command cannot use it."""
    try:
        name, pinned = os.readlink("/proc/self/ns/pid"), [os.open("/proc/self/ns/pid", os.O_RDONLY)]
    except OSError:
        name, pinned = "unknown", []
    with socket.socket(fileno=fd) as channel:
        socket.send_fds(channel, [f"{name}\n".encode()], pinned)
    for descriptor in pinned:
        os.close(descriptor)


def main(args: list[str]) -> None:
    if "--" not in args:
        sys.exit(
            "rlimits: usage: rlimits.py [--as N --cpu N --fsize N --nproc N "
            "--uid N --gid N --chdir DIR --ready-fd FD] -- COMMAND [ARG...]"
        )
    split = args.index("--")
    parser = argparse.ArgumentParser(prog="rlimits")
    for name in LIMITS:
        parser.add_argument(f"--{name}", type=int)
    parser.add_argument("--uid", type=int)
    parser.add_argument("--gid", type=int)
    parser.add_argument("--chdir")
    parser.add_argument("--ready-fd", dest="ready_fd", type=int)
    opts = parser.parse_args(args[:split])
    command = args[split + 1 :]
    if not command:
        sys.exit("rlimits: no command")
    env = original_environ()
    try:
        for name, which in LIMITS.items():
            if getattr(opts, name) is not None:
                set_limit(which, getattr(opts, name))
        if opts.uid is not None:
            become(opts.uid, opts.gid if opts.gid is not None else opts.uid)
        if opts.chdir:
            os.chdir(opts.chdir)
        if opts.ready_fd is not None:
            report_ready(opts.ready_fd)
    except OSError as err:
        print(f"rlimits: cannot prepare the command: {err}", file=sys.stderr)
        sys.exit(126)
    try:
        os.execvpe(command[0], command, env)
    except OSError as err:
        print(f"rlimits: cannot start {command[0]}: {err.strerror}", file=sys.stderr)
        sys.exit(127)


if __name__ == "__main__":
    main(sys.argv[1:])
