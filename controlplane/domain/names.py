"""What names, keys and ids look like: the patterns the edge checks every request against, and the
services check names against when they are made (projects, pools, tokens)."""

from __future__ import annotations

import re

TASK_KEY = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
"""Projects (and the project a token may use)."""
AGENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,199}")
ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
"""Change, run, ChangeSet and reservation ids: printable, short. A well-formed unknown id is NOT_FOUND."""
KIND = re.compile(r"[a-z][a-z0-9_-]{0,31}")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
"""POSIX: letters, digits and underscores, not starting with a digit."""
CAPABILITY = re.compile(r"[a-z0-9][a-z0-9_.:-]{0,63}")
LABEL_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,62}")
MODEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@-]{0,199}")
EVENT_KIND = re.compile(r"[a-z0-9._-]{0,64}")
COMMIT = re.compile(r"(?:[0-9a-f]{40}|[0-9a-f]{64})?")
BRANCH = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,299}")

ROLES = ("submit", "run.manage", "admin")
"""A user token's roles; each includes the ones before it."""
TOKEN_KINDS = ("agent", "user")
