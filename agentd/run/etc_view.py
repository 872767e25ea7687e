"""What of the host's /etc a sandboxed command sees: an allowlist, bound read-only by agentd/run/sandbox.py."""

from __future__ import annotations

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
