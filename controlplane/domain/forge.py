"""A project's link to its repository on a forge (issue 28): which forge, the repository's owner/name,
the forge's API URL, the label that hands an issue to Drover and how many fix rounds a pull request
gets. Pure checks, each raising InvalidArgument naming the setting; and `verify_signature`, the
constant-time check of a webhook delivery's `X-Hub-Signature-256` header."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
import urllib.parse

from drover.errors import InvalidArgument

FORGES = ("", "github")
GITHUB_API = "https://api.github.com"
DEFAULT_LABEL = "drover"
DEFAULT_FIX_ROUNDS = 3
MAX_FIX_ROUNDS = 20
MAX_URL = 500
MAX_LABEL = 50
"""GitHub's own limit on a label's name."""
OWNER = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}")
"""A GitHub user or organisation: letters, digits and single hyphens, not first or last, at most 39."""
REPO_NAME = re.compile(r"[A-Za-z0-9._-]{1,100}")
"""A GitHub repository: letters, digits, '.', '_', '-', at most 100 ("." and ".." are not names)."""
FORGE_REPO = re.compile(rf"{OWNER.pattern}/{REPO_NAME.pattern}")
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain"})
SIGNATURE_PREFIX = "sha256="


def check_forge(forge: str) -> str:
    if forge not in FORGES:
        raise InvalidArgument(f"{forge!r} is not a forge: '' (none) or 'github'", field="forge")
    return forge


def check_repo(forge: str, repo: str) -> str:
    """owner/name on the forge; required with a forge, refused without one."""
    if not forge:
        if repo:
            raise InvalidArgument("set only with a forge (forge = 'github')", field="forge_repo")
        return ""
    if not repo:
        raise InvalidArgument("must be owner/name: the repository on the forge", field="forge_repo")
    name = repo.partition("/")[2]
    if not FORGE_REPO.fullmatch(repo) or name in (".", "..") or name.lower().endswith(".git"):
        raise InvalidArgument(
            f"{repo[:120]!r} is not owner/name: an owner of letters, digits and single inner hyphens (at most 39), "
            "a name of letters, digits, '.', '_', '-' (at most 100, without .git)",
            field="forge_repo",
        )
    return repo


def check_api_url(forge: str, url: str) -> str:
    """The forge's REST API: http(s), no credentials, query or fragment; plain http only to this machine
    (a token sent over the network in the clear is refused). Default for github: https://api.github.com."""
    url = url.strip().rstrip("/")
    if not forge:
        if url and url != GITHUB_API:
            raise InvalidArgument("set only with a forge (forge = 'github')", field="forge_api_url")
        return ""
    if not url:
        return GITHUB_API
    if len(url) > MAX_URL or any(c.isspace() or ord(c) < 32 for c in url):
        raise InvalidArgument(f"must be a URL of at most {MAX_URL} characters, without spaces", field="forge_api_url")
    try:
        parts = urllib.parse.urlsplit(url)
        host, _port = parts.hostname or "", parts.port  # a port that is no number: ValueError
    except ValueError as err:
        raise InvalidArgument(f"not a URL: {err}", field="forge_api_url") from None
    if parts.scheme not in ("http", "https") or not host:
        raise InvalidArgument("must be an http(s) URL with a host, e.g. https://api.github.com", field="forge_api_url")
    if "@" in parts.netloc:
        raise InvalidArgument(
            "credentials in the URL would be stored as they are; send them with SetForgeCredential",
            field="forge_api_url",
        )
    if parts.query or parts.fragment:
        raise InvalidArgument("must have no query or fragment", field="forge_api_url")
    if parts.scheme == "http" and not is_loopback(host):
        raise InvalidArgument(
            f"plain http would send the forge credential in the clear to {host}; use https "
            "(http only to this machine: localhost, 127.0.0.0/8, ::1)",
            field="forge_api_url",
        )
    return url


def is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_label(label: str) -> str:
    """The label that hands an issue to Drover ("": the default, drover)."""
    if not label:
        return DEFAULT_LABEL
    if label != label.strip() or len(label) > MAX_LABEL or any(ord(c) < 32 or c == "\x7f" for c in label):
        raise InvalidArgument(
            f"must be a label name: at most {MAX_LABEL} characters, no control characters, "
            "no leading or trailing space",
            field="forge_label",
        )
    return label


def check_fix_rounds(rounds: int) -> int:
    if not 0 <= rounds <= MAX_FIX_ROUNDS:
        raise InvalidArgument(f"must be 0 to {MAX_FIX_ROUNDS}", field="max_fix_rounds")
    return rounds


def signature(secret: bytes, body: bytes) -> str:
    """The `X-Hub-Signature-256` header a forge sends with `body` signed with `secret`."""
    return SIGNATURE_PREFIX + hmac.new(secret, body, hashlib.sha256).hexdigest()


def verify_signature(secret: bytes, body: bytes, header: str) -> bool:
    """Whether `header` (`sha256=<64 hex digits>`) is `body` signed with `secret`, compared in constant
    time. An empty secret verifies nothing (a project without a webhook secret accepts no delivery)."""
    if not secret or not header.startswith(SIGNATURE_PREFIX):
        return False
    return hmac.compare_digest(signature(secret, body).encode(), header.encode("utf-8", "replace"))
