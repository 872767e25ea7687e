"""`drover project add|update|show|list|remove`, `drover project credential set|delete` and `drover token
create|list|revoke`: projects and tokens through the API, from anywhere the control plane is reachable.
A git credential is read from a file or stdin, never from the command line (argv is visible to every
user of the machine, and lands in shell history)."""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from drover import render
from drover.errors import InvalidArgument

if TYPE_CHECKING:
    from drover.client import Client
    from drover.models import Project, Token

Show = Callable[[argparse.Namespace, Any, Callable[[Any], str]], int]
LIST, TEXT, FLOAT, FLAG, INT = "list", "text", "float", "flag", "int"
SETTINGS: list[tuple[str, str, str]] = [
    ("--repo", TEXT, "path (on the control plane's host) or URL of the git repository"),
    ("--branch", TEXT, "the branch runs start from (default: the one the repository's HEAD names)"),
    ("--pool", TEXT, "only agents of this pool run the project's Tasks"),
    ("--allow", LIST, "a command the harness may run, e.g. 'pytest [args]' (repeatable)"),
    ("--build-output", LIST, "files a ChangeSet leaves out, e.g. 'dist/' (repeatable)"),
    ("--network", FLAG, "the project's Tasks may use the network"),
    ("--monthly-budget-usd", FLOAT, "the project's monthly model budget (0: none)"),
    ("--answer-window-minutes", FLOAT, "a session held by a question longer than this is parked (default 15)"),
    ("--setup", LIST, "a command run after the clone, before the Task's work (repeatable, in order)"),
    ("--setup-network", FLAG, "setup may use the network (default yes)"),
    ("--env", LIST, "NAME=VALUE in every run's environment (repeatable; not for secrets)"),
    ("--git-name", TEXT, "author of ChangeSet commits"),
    ("--git-email", TEXT, "its email"),
    ("--branch-template", TEXT, "each Task's branch: {change}, {task}, {slug}"),
    ("--cache-key-file", LIST, "a file (or glob) keying the agents' prepared workspaces (repeatable)"),
    ("--forge", TEXT, "the forge the repository is on: github ('' unlinks)"),
    ("--forge-repo", TEXT, "owner/name of the repository on the forge"),
    ("--forge-api-url", TEXT, "the forge's API (default https://api.github.com; GitHub Enterprise: its /api/v3)"),
    ("--forge-label", TEXT, "the issue label that hands an issue to Drover (default drover)"),
    ("--max-fix-rounds", INT, "fix rounds after failing CI or a review, per pull request (default 3, 0-20)"),
    ("--forge-budget-usd", FLOAT, "each issue's Change budget in USD (0: none; `/drover budget $N` wins)"),
    ("--forge-branch-template", TEXT, "the pull request's branch: {number}, {change}, {slug}"),
    ("--forge-check-command", TEXT, "a check Task runs it with sh -c after the implement Task ('' : none)"),
    ("--max-active-runs-per-change", INT, "at most this many runs of one Change at once; the rest wait (default 8)"),
    ("--weight", INT, "the project's share of its pool's slots against the pool's other projects (default 1)"),
    ("--max-open-sandboxes-per-change", INT, "at most this many open sandboxes per Change; the rest wait (default 4)"),
]
FIELD = {"--allow": "commands", "--build-output": "build_outputs", "--cache-key-file": "cache_key_files"}


def _field(flag: str) -> str:
    return FIELD.get(flag, flag[2:].replace("-", "_"))


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """The settings given on the command line (`update` changes only these)."""
    given = {_field(flag): getattr(args, _field(flag)) for flag, _, _ in SETTINGS if hasattr(args, _field(flag))}
    if "env" in given:
        pairs = [pair.partition("=") for pair in given["env"]]
        bad = next((name for name, eq, _ in pairs if not eq), None)
        if bad is not None:
            raise InvalidArgument(f"{bad!r} is not NAME=VALUE", field="env")
        given["env"] = {name: value for name, _, value in pairs}
    repo = given.get("repo", "")
    if repo and "://" not in repo and not repo.startswith("git@") and os.path.exists(repo):
        given["repo"] = str(pathlib.Path(repo).resolve())  # the control plane runs elsewhere: a whole path
    return given


def project_table(projects: list[Project]) -> str:
    rows = [
        [p.name, p.repo or "-", p.branch, p.pool or "-", p.git_credential.kind or "-", str(len(p.setup))]
        for p in projects
    ]
    return render.table(rows, ["NAME", "REPO", "BRANCH", "POOL", "CREDENTIAL", "SETUP"])


def project_text(p: Project) -> str:
    return json.dumps(render.as_dict(p), indent=2)


def token_table(tokens: list[Token]) -> str:
    rows = [
        [
            t.name,
            t.kind,
            t.role or "-",
            (t.pool or "default") if t.kind == "agent" else "-",
            ",".join(t.projects) or ("all" if t.kind == "user" else "-"),
            t.created_by or "host",
            t.expires_at[:16] or "-",
            t.revoked_at[:16] or "-",
        ]
        for t in tokens
    ]
    return render.table(rows, ["NAME", "KIND", "ROLE", "POOL", "PROJECTS", "CREATED BY", "EXPIRES", "REVOKED"])


def read_secret(path: str) -> str:
    """The credential from a file, or stdin for `-`."""
    text = sys.stdin.read() if path == "-" else pathlib.Path(path).read_text()
    if not text.strip():
        raise InvalidArgument(f"{'stdin' if path == '-' else path} is empty", field="secret")
    return text


def commands(show: Show) -> dict[str, Callable[[Client, argparse.Namespace], int]]:
    """Each command by its dotted name, printing what it got through `show` (text, --json or --jsonl)."""
    return {
        "project.add": lambda c, a: show(a, c.projects.create(a.name, **settings(a)), project_text),
        "project.update": lambda c, a: show(a, c.projects.update(a.name, **settings(a)), project_text),
        "project.show": lambda c, a: show(a, c.projects.get(a.name), project_text),
        "project.list": lambda c, a: show(a, c.projects.list(), project_table),
        "project.remove": lambda c, a: _done(c.projects.delete(a.name), f"project {a.name} removed"),
        "project.credential.set": lambda c, a: show(
            a,
            c.projects.set_git_credential(a.name, a.kind, read_secret(a.secret_file)),
            lambda p: f"project {p.name}: {p.git_credential.kind} set, fingerprint {p.git_credential.fingerprint}",
        ),
        "project.credential.delete": lambda c, a: show(
            a, c.projects.delete_git_credential(a.name), lambda p: f"project {p.name}: git credential deleted"
        ),
        "project.forge.set": lambda c, a: show(a, _set_forge_credential(c, a), forge_credential_line),
        "project.forge.delete": lambda c, a: show(
            a, c.projects.delete_forge_credential(a.name), lambda p: f"project {p.name}: forge credential deleted"
        ),
        "project.forge.webhook-secret": lambda c, a: show(a, c.projects.rotate_webhook_secret(a.name), _new_secret),
        "token.create": lambda c, a: show(a, _create_token(c, a), lambda t: t.secret),
        "token.list": lambda c, a: show(a, c.tokens.list(a.include_revoked), token_table),
        "token.revoke": lambda c, a: _done(
            None, f"revoked {c.tokens.revoke(a.name, a.kind)} token(s) named {a.name!r}, from the next call on"
        ),
    }


def _set_forge_credential(client: Client, a: argparse.Namespace) -> Project:
    if a.kind == "app":
        if not a.private_key_file or not a.app_id or not a.installation_id:
            raise InvalidArgument("--kind app needs --app-id, --installation-id and --private-key-file", field="kind")
        if a.secret_file:
            raise InvalidArgument("--kind app takes --private-key-file, not --secret-file", field="secret_file")
        key = read_secret(a.private_key_file)
        return client.projects.set_forge_credential(
            a.name, "app", key, app_id=a.app_id, installation_id=a.installation_id
        )
    if not a.secret_file or a.private_key_file or a.app_id or a.installation_id:
        raise InvalidArgument("--kind token takes --secret-file (and no App settings)", field="secret_file")
    return client.projects.set_forge_credential(a.name, "token", read_secret(a.secret_file))


def forge_credential_line(p: Project) -> str:
    f = p.forge_credential
    app = f", app {f.app_id}, installation {f.installation_id}" if f.kind == "app" else ""
    return f"project {p.name}: forge {f.kind} set{app}, fingerprint {f.fingerprint}"


def _new_secret(rotated: Any) -> str:
    print(
        f"project {rotated.project.name}: a new webhook secret; paste it into the forge's webhook settings now "
        "(it is not shown again):",
        file=sys.stderr,
    )
    return str(rotated.secret)


def _done(_: Any, line: str) -> int:
    print(line)
    return 0


def _create_token(client: Client, a: argparse.Namespace) -> Any:
    return client.tokens.create(
        a.name,
        kind=a.kind,
        role=a.role,
        pool=a.pool,
        projects=a.projects,
        monthly_budget_usd=a.monthly_budget_usd,
        expires_in=a.expires_in,
    )


def _settings_flags(p: argparse.ArgumentParser, update: bool) -> None:
    """The project's settings; for `update` each defaults to absent, so only those given change."""
    for flag, kind, meaning in SETTINGS:
        extra: dict[str, Any] = {"dest": _field(flag), "help": meaning}
        if update:
            extra["default"] = argparse.SUPPRESS
        if kind == LIST:
            extra.update(action="append", metavar=flag[2:].upper().replace("-", "_"))
        elif kind == FLAG:
            extra["action"] = argparse.BooleanOptionalAction
        elif kind == FLOAT:
            extra["type"] = float
        elif kind == INT:
            extra.update(type=int, default=argparse.SUPPRESS)  # unset: the control plane's default
        if not update and kind != FLAG:
            extra.setdefault("default", [] if kind == LIST else (0.0 if kind == FLOAT else ""))
        if not update and kind == FLOAT and flag == "--answer-window-minutes":
            extra["default"] = 15.0
        if not update and kind == FLAG:
            extra["default"] = flag == "--setup-network"
        p.add_argument(flag, **extra)


def add_parsers(sub: Any, common: argparse.ArgumentParser, run: Callable[[str], Any]) -> None:
    """`drover project ...` and `drover token ...`; `run(name)` makes the function a command calls."""

    def command(parent: Any, name: str, dotted: str, help_text: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = parent.add_parser(name, parents=[common], help=help_text)
        p.set_defaults(func=run(dotted))
        return p

    pr = sub.add_parser("project", help="projects (admin to change them)").add_subparsers(dest="sub", required=True)
    for name, help_text in (("add", "create a project"), ("update", "change only the settings given")):
        _settings_flags(command(pr, name, f"project.{name}", help_text), update=name == "update")
        pr.choices[name].add_argument("name")
    command(pr, "show", "project.show", "a project's settings and credential (never the secret)").add_argument("name")
    command(pr, "list", "project.list", "the projects this token may use")
    command(pr, "remove", "project.remove", "remove a project that has no Changes").add_argument("name")
    cr = pr.add_parser("credential", help="the project's git credential").add_subparsers(dest="cred", required=True)
    cs = command(cr, "set", "project.credential.set", "send the git credential once (stored sealed)")
    cs.add_argument("name")
    cs.add_argument("--kind", choices=("token", "ssh_key"), default="token", help="an https token or an SSH deploy key")
    cs.add_argument("--secret-file", required=True, help="the file holding it, or - for stdin (never on argv)")
    command(cr, "delete", "project.credential.delete", "delete the project's git credential").add_argument("name")
    _forge_parsers(pr, command)
    _token_parsers(sub, command)


def _forge_parsers(pr: Any, command: Callable[..., argparse.ArgumentParser]) -> None:
    """`drover project forge set | delete | webhook-secret`: the project's forge credential and webhook secret."""
    fr = pr.add_parser("forge", help="the project's forge credential and webhook secret").add_subparsers(
        dest="forge", required=True
    )
    fs = command(fr, "set", "project.forge.set", "send the forge credential once (stored sealed)")
    fs.add_argument("name")
    fs.add_argument("--kind", choices=("token", "app"), default="token", help="a fine-grained token or a GitHub App")
    fs.add_argument("--secret-file", default="", help="kind token: the file holding it, or - for stdin (never argv)")
    fs.add_argument("--app-id", type=int, default=0, help="kind app: the GitHub App's id")
    fs.add_argument("--installation-id", type=int, default=0, help="kind app: its installation's id")
    fs.add_argument("--private-key-file", default="", help="kind app: its private key (PEM), or - for stdin")
    command(fr, "delete", "project.forge.delete", "delete the project's forge credential").add_argument("name")
    command(
        fr, "webhook-secret", "project.forge.webhook-secret", "make a new webhook secret and print it, this once"
    ).add_argument("name")


def _token_parsers(sub: Any, command: Callable[..., argparse.ArgumentParser]) -> None:
    tr = sub.add_parser("token", help="tokens (role admin)").add_subparsers(dest="sub", required=True)
    tc = command(tr, "create", "token.create", "mint a token no stronger than yours; prints it once")
    tc.add_argument("name")
    tc.add_argument("--kind", choices=("user", "agent"), default="user")
    tc.add_argument("--role", choices=("submit", "run.manage", "admin"), default="", help="default submit")
    tc.add_argument("--project", action="append", default=[], dest="projects", help="a project it may use (repeatable)")
    tc.add_argument("--pool", default="", help="agent tokens: the pool it serves")
    tc.add_argument("--monthly-budget-usd", type=float, default=0.0)
    tc.add_argument("--expires-in", default="", help="e.g. 30d, 12h (default: never, or when yours expires)")
    command(tr, "list", "token.list", "tokens you may see: never their secrets").add_argument(
        "--include-revoked", action="store_true"
    )
    tv = command(tr, "revoke", "token.revoke", "revoke every live token of a name, from the next call on")
    tv.add_argument("name")
    tv.add_argument("--kind", choices=("", "user", "agent"), default="")
