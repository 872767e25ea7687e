"""A project's workspace preparation (seed 003 "Workspace preparation"): its setup commands, its
environment, its commits' identity, the branch each Task's ChangeSet goes to and the files that key
the agent's prepared-workspace cache. Pure checks, each raising InvalidArgument naming the field, and
the Task branch rendered from its template."""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence

from controlplane.domain.names import ENV_NAME
from drover.errors import InvalidArgument

MAX_SETUP_COMMANDS = 50
MAX_COMMAND_CHARS = 8192
MAX_ENV = 200
MAX_ENV_VALUE = 32 * 1024
MAX_KEY_FILES = 50
MAX_WORKSPACE_FILES = 100
MAX_WORKSPACE_FILE_BYTES = 256 * 1024
MAX_WORKSPACE_BYTES = 768 * 1024
"""A command Task's files: at most this many, each and all together at most this size (UTF-8)."""
MAX_PATH_CHARS = 1024
RESERVED_ENV_PREFIX = "DROVER_"
"""Drover's own variables (DROVER_CHANGE_ID, DROVER_TASK_KEY, DROVER_BRANCH, DROVER_RUN_ID, ...)."""
DEFAULT_BRANCH_TEMPLATE = "drover/{change}/{task}"
PLACEHOLDERS = frozenset({"change", "task", "slug"})
DEFAULT_GIT_NAME = "Drover Agent"
DEFAULT_GIT_EMAIL = "agent@drover.invalid"
_SLUG_DROP = re.compile(r"[^a-z0-9]+")
_IDENTITY_BAD = re.compile(r"[\x00-\x1f<>\x7f]")


def check_setup(commands: Sequence[str]) -> list[str]:
    """Shell command lines run in order (`sh -c`); each non-blank, without NUL, bounded."""
    if len(commands) > MAX_SETUP_COMMANDS:
        raise InvalidArgument(f"at most {MAX_SETUP_COMMANDS} commands", field="setup")
    out = []
    for i, command in enumerate(commands):
        if not command.strip() or "\x00" in command or len(command) > MAX_COMMAND_CHARS:
            raise InvalidArgument(
                f"must be a command line without NUL, 1 to {MAX_COMMAND_CHARS} characters", field=f"setup[{i}]"
            )
        out.append(command)
    return out


def check_env(env: Mapping[str, str]) -> dict[str, str]:
    """POSIX names, not Drover's own (DROVER_*), values without NUL; not for secrets (they are shown)."""
    if len(env) > MAX_ENV:
        raise InvalidArgument(f"at most {MAX_ENV} variables", field="env")
    for name, value in env.items():
        if not ENV_NAME.fullmatch(name):
            raise InvalidArgument(f"{name!r} is not a variable name", field=f"env[{name[:64]}]")
        if name.upper().startswith(RESERVED_ENV_PREFIX):
            raise InvalidArgument(f"{RESERVED_ENV_PREFIX}* variables are Drover's own", field=f"env[{name}]")
        if "\x00" in value or len(value) > MAX_ENV_VALUE:
            raise InvalidArgument(f"must be at most {MAX_ENV_VALUE} characters, without NUL", field=f"env[{name}]")
    return dict(sorted(env.items()))


def check_identity(name: str, email: str) -> tuple[str, str]:
    """The author of ChangeSet commits ("" for either: Drover's default)."""
    if len(name) > 200 or _IDENTITY_BAD.search(name):
        raise InvalidArgument("must be at most 200 characters, without control characters, < or >", field="git_name")
    if email and (len(email) > 200 or _IDENTITY_BAD.search(email) or "@" not in email or " " in email):
        raise InvalidArgument("must be an email address", field="git_email")
    return name.strip(), email.strip()


def check_cache_key_files(patterns: Sequence[str]) -> list[str]:
    """Paths (or glob patterns) relative to the repository, never leaving it."""
    if len(patterns) > MAX_KEY_FILES:
        raise InvalidArgument(f"at most {MAX_KEY_FILES} files", field="cache_key_files")
    for i, pattern in enumerate(patterns):
        parts = pattern.split("/")
        if (
            not pattern
            or len(pattern) > 500
            or pattern.startswith("/")
            or "\x00" in pattern
            or "\\" in pattern
            or any(p in ("", ".", "..") for p in parts)
        ):
            raise InvalidArgument(
                "must be a path relative to the repository, without '..'", field=f"cache_key_files[{i}]"
            )
    return list(patterns)


def check_workspace_path(path: str, field: str) -> str:
    """A path relative to the workspace that stays in it: not absolute, no `..`, not in .git."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if (
        not parts
        or len(path) > MAX_PATH_CHARS
        or path.startswith("/")
        or "\x00" in path
        or "\\" in path
        or ".." in parts
        or parts[0] == ".git"
    ):
        raise InvalidArgument(
            f"{path[:80]!r} must be a path relative to the workspace, without '..' and outside .git", field=field
        )
    return path


def check_workspace_files(files: Mapping[str, str], workdir: str, command: bool, where: str) -> None:
    """A command Task's files (path -> content, written into the workspace before it runs) and workdir
    (relative to the repository); `where` names the Task (`tasks[0]`)."""
    if (files or workdir) and not command:
        field = f"{where}.workspace_files" if files else f"{where}.workdir"
        raise InvalidArgument("only a command Task has files and a workdir", field=field)
    if len(files) > MAX_WORKSPACE_FILES:
        raise InvalidArgument(f"at most {MAX_WORKSPACE_FILES} files", field=f"{where}.workspace_files")
    total = 0
    for path, content in files.items():
        field = f"{where}.workspace_files[{path[:80]!r}]"
        check_workspace_path(path, field)
        size = len(content.encode())
        if size > MAX_WORKSPACE_FILE_BYTES:
            raise InvalidArgument(f"{size} bytes; at most {MAX_WORKSPACE_FILE_BYTES}", field=field)
        total += size
    if total > MAX_WORKSPACE_BYTES:
        raise InvalidArgument(f"{total} bytes in all; at most {MAX_WORKSPACE_BYTES}", field=f"{where}.workspace_files")
    if workdir:
        check_workspace_path(workdir, f"{where}.workdir")


def slug(text: str, most: int = 40) -> str:
    """`Fix the login form!` -> `fix-the-login-form`."""
    return _SLUG_DROP.sub("-", text.lower()).strip("-")[:most].strip("-") or "change"


def task_branch(template: str, change: str, task: str, title: str = "") -> str:
    """The branch a Task's ChangeSet is pushed to, from the project's template."""
    return (template or DEFAULT_BRANCH_TEMPLATE).format(change=change, task=task, slug=slug(title))


def check_branch_template(template: str) -> str:
    """Only {change}, {task} and {slug}; must name a legal branch whatever they hold, and one per Task
    ({task} and {change} both present, so two Tasks never push to one branch)."""
    if not template:
        return ""
    try:
        fields = {name for _, name, spec, conv in string.Formatter().parse(template) if name is not None}
        specs = [(spec, conv) for _, name, spec, conv in string.Formatter().parse(template) if name is not None]
    except ValueError as err:
        raise InvalidArgument(f"not a template: {err}", field="branch_template") from None
    if fields - PLACEHOLDERS or any(spec or conv for spec, conv in specs):
        raise InvalidArgument("may only use {change}, {task} and {slug}", field="branch_template")
    if not {"change", "task"} <= fields:
        raise InvalidArgument("must use {change} and {task}: each Task needs its own branch", field="branch_template")
    sample = task_branch(template, "ch-0123456789abcdef", "task-key.1", "A title")
    if not legal_branch(sample) or len(template) > 200:
        raise InvalidArgument(f"names {sample!r}, which is not a legal branch name", field="branch_template")
    return template


def legal_branch(name: str) -> bool:
    """git check-ref-format's rules for refs/heads/<name>."""
    if not name or len(name) > 250 or name.startswith(("/", "-")) or name.endswith(("/", ".", ".lock")):
        return False
    if any(bad in name for bad in ("..", "//", "@{", "\\")) or name == "@":
        return False
    if any(ord(c) < 0x20 or c in " ~^:?*[\x7f" for c in name):
        return False
    return all(part and not part.startswith(".") and not part.endswith(".lock") for part in name.split("/"))
