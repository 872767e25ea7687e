"""What of the host's /etc a sandboxed command sees: an allowlist, shown read-only by agentd/run/sandbox.py."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable

COPY_BYTES = 1024**2

ETC_ALLOWED = (
    # names for uids and groups (password hashes are in shadow, which is not here)
    "passwd",
    "group",
    "nsswitch.conf",
    # host names and the resolver, for a project allowed on the network
    "hosts",
    "hostname",
    "resolv.conf",
    "host.conf",
    "gai.conf",
    "networks",
    "protocols",
    "services",
    # the dynamic linker
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    # TLS trust: the certificates, never ssl/private
    "ssl/certs",
    "ssl/openssl.cnf",
    "ca-certificates",
    "ca-certificates.conf",
    "pki/tls/certs",
    "pki/ca-trust",
    "crypto-policies",
    # time, locale and what tools look up
    "localtime",
    "timezone",
    "locale.alias",
    "locale.conf",
    "alternatives",
    "mime.types",
    "magic",
    "magic.mime",
    "os-release",
    "debian_version",
    "lsb-release",
)
"""What of /etc a command sees (each when it exists here). Never shadow, gshadow, sudoers, ssh,
ssl/private or drover: a command could read them through the session user's rights or a tool
like `git diff --no-index`."""


def copied(st: os.stat_result) -> bool:
    """Whether a file of the allowlist is shown as a copy (0444, root's): a regular file up to
    COPY_BYTES that others may read on the host already. A copy never lets the command read more than
    the host's own mode lets any user read: a host that made /etc/hosts 0640 keeps it bound, as it is."""
    return stat.S_ISREG(st.st_mode) and st.st_size <= COPY_BYTES and bool(st.st_mode & stat.S_IROTH)


def arguments(parents: Callable[[str], list[str]]) -> tuple[list[str], tuple[int, ...]]:
    """bwrap's arguments showing the allowlist, and the descriptors they name (the caller closes them
    once bwrap started). `parents(directory)` answers the arguments that make a directory inside.

    A regular file everyone may read, up to COPY_BYTES, is copied into the sandbox's (then read-only)
    root from a descriptor (`--file`), as it is at this launch: two mounts fewer each, ~3 ms of bwrap's
    ~9. Directories, larger files and a file the host keeps from others (`copied`) are bound read-only,
    their owner and mode the host's. A symlink's target is shown (it may live under /run)."""
    args: list[str] = []
    fds: list[int] = []
    try:
        for name in ETC_ALLOWED:
            path = f"/etc/{name}"
            try:  # decided on what was opened: a file changed after a look is not copied by mistake
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
            except FileNotFoundError:
                continue
            args += parents(os.path.dirname(path))
            if copied(os.fstat(fd)):
                fds.append(fd)
                args += ["--perms", "0444", "--file", str(fd), path]
            else:
                os.close(fd)
                args += ["--ro-bind", path, path]
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return args, tuple(fds)
