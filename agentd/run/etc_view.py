"""What of the host's /etc a sandboxed command sees: an allowlist, shown read-only by agentd/run/sandbox.py."""

from __future__ import annotations

import os
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


def arguments(parents: Callable[[str], list[str]]) -> tuple[list[str], tuple[int, ...]]:
    """bwrap's arguments showing the allowlist, and the descriptors they name (the caller closes them
    once bwrap started). `parents(directory)` answers the arguments that make a directory inside.

    A regular file up to COPY_BYTES is copied into the sandbox's (then read-only) root from a
    descriptor (`--file`), as it is at this launch: two mounts fewer each, ~3 ms of bwrap's ~9.
    Directories and larger files are bound read-only. A symlink's target is shown (it may live under
    /run)."""
    args: list[str] = []
    fds: list[int] = []
    try:
        for name in ETC_ALLOWED:
            path = f"/etc/{name}"
            if not os.path.exists(path):
                continue
            args += parents(os.path.dirname(path))
            if os.path.isfile(path) and os.path.getsize(path) <= COPY_BYTES:
                fds.append(os.open(path, os.O_RDONLY | os.O_CLOEXEC))
                args += ["--perms", "0444", "--file", str(fds[-1]), path]
            else:
                args += ["--ro-bind", path, path]
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return args, tuple(fds)
