"""A project's link to its repository on a forge (issue 28): which forge, the repository's owner/name,
the forge's API URL, the label that hands an issue to Drover and how many fix rounds a pull request
gets. Pure checks, each raising InvalidArgument naming the setting; and `verify_signature`, the
constant-time check of a webhook delivery's `X-Hub-Signature-256` header."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import math
import re
import string
import urllib.parse

from controlplane.domain.preparation import legal_branch, slug
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
DEFAULT_BRANCH_TEMPLATE = "drover/issue-{number}"
ISSUE_PLACEHOLDERS = frozenset({"number", "change", "slug"})
MAX_BRANCH_TEMPLATE = 200
MAX_CHECK_COMMAND = 4096
"""Bytes of a project's check command (run by `sh -c` in the check Task)."""


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


def check_budget(budget_usd: float) -> float:
    """The budget of each Change an issue starts, in USD (0: the Change has no budget of its own)."""
    if not (math.isfinite(budget_usd) and budget_usd >= 0):
        raise InvalidArgument("must be a finite number of USD, 0 or more (0: no budget)", field="forge_budget_usd")
    return budget_usd


def issue_branch(template: str, number: int, change: str, title: str = "") -> str:
    """The pull request's branch for an issue's Change, from the project's template."""
    return (template or DEFAULT_BRANCH_TEMPLATE).format(number=number, change=change, slug=slug(title))


def check_branch_template(template: str) -> str:
    """{number}, {change} and {slug} only; {number} or {change} required (two issues never share a branch);
    whatever they hold, it must name a legal branch."""
    field = "forge_branch_template"
    if not template:
        raise InvalidArgument(f"must not be empty (the default is {DEFAULT_BRANCH_TEMPLATE!r})", field=field)
    try:
        parsed = [(name, spec, conv) for _, name, spec, conv in string.Formatter().parse(template) if name is not None]
    except ValueError as err:
        raise InvalidArgument(f"not a template: {err}", field=field) from None
    if {name for name, _, _ in parsed} - ISSUE_PLACEHOLDERS or any(spec or conv for _, spec, conv in parsed):
        raise InvalidArgument("may only use {number}, {change} and {slug}", field=field)
    if not {"number", "change"} & {name for name, _, _ in parsed}:
        raise InvalidArgument("must use {number} or {change}: each issue needs its own branch", field=field)
    sample = issue_branch(template, 123456, "ch-0123456789abcdef", "A title")
    if len(template) > MAX_BRANCH_TEMPLATE or not legal_branch(sample):
        raise InvalidArgument(f"names {sample!r}, which is not a legal branch name", field=field)
    return template


def check_check_command(command: str) -> str:
    """The command an issue's check Task runs (`sh -c`); "": no check Task."""
    if len(command.encode()) > MAX_CHECK_COMMAND:
        raise InvalidArgument(f"at most {MAX_CHECK_COMMAND} bytes", field="forge_check_command")
    if "\x00" in command:
        raise InvalidArgument("must not contain NUL", field="forge_check_command")
    return command


def signature(secret: bytes, body: bytes) -> str:
    """The `X-Hub-Signature-256` header a forge sends with `body` signed with `secret`."""
    return SIGNATURE_PREFIX + hmac.new(secret, body, hashlib.sha256).hexdigest()


def verify_signature(secret: bytes, body: bytes, header: str) -> bool:
    """Whether `header` (`sha256=<64 hex digits>`) is `body` signed with `secret`, compared in constant
    time. An empty secret verifies nothing (a project without a webhook secret accepts no delivery)."""
    if not secret or not header.startswith(SIGNATURE_PREFIX):
        return False
    return hmac.compare_digest(signature(secret, body).encode(), header.encode("utf-8", "replace"))
