"""`controlplane project add | apply | list | show | remove`: the projects a control plane serves."""

from __future__ import annotations

import argparse
import json
import os
import pathlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from controlplane.credential_cli import key_file_flag
from drover.core.workspace import redact_url
from drover.errors import InvalidArgument

if TYPE_CHECKING:  # each command imports what it uses when it runs: `controlplane --help` starts fast
    from controlplane.store.data_dir import DataDir
    from controlplane.store.engine import Store
    from controlplane.store.models import Project

Command = Callable[["Store", "DataDir", argparse.Namespace], None]


def cmd_project_add(store: Store, config: DataDir, args: argparse.Namespace) -> None:
    from controlplane.context.canonical_tree import checked_branch
    from controlplane.services.projects import add_project

    repo = args.repo
    if repo and "://" not in repo and not repo.startswith("git@") and os.path.exists(repo):
        repo = str(pathlib.Path(repo).resolve())
    token_file = str(pathlib.Path(args.git_token_file).resolve()) if args.git_token_file else ""
    token = pathlib.Path(token_file).read_text().strip() if token_file else ""
    branch, note = checked_branch(repo, args.branch, token)
    store.transaction(
        lambda s: add_project(
            s,
            args.name,
            repo,
            branch,
            args.pool,
            commands=args.allow,
            network=args.network,
            git_token_file=token_file,
            monthly_budget_usd=args.monthly_budget_usd,
            answer_window_minutes=args.answer_window_minutes,
            build_outputs=args.build_output,
            setup=args.setup,
            setup_network=not args.no_setup_network,
            env=env_pairs(args.env),
            git_name=args.git_name,
            git_email=args.git_email,
            branch_template=args.branch_template,
            cache_key_files=args.cache_key_file,
            forge=args.forge,
            forge_repo=args.forge_repo,
            forge_api_url=args.forge_api_url,
            forge_label=args.forge_label,
            max_fix_rounds=args.max_fix_rounds,
            forge_budget_usd=args.forge_budget_usd,
            forge_branch_template=args.forge_branch_template,
            forge_check_command=args.forge_check_command,
            max_active_runs_per_change=args.max_active_runs_per_change,
            weight=args.weight,
            max_open_sandboxes_per_change=args.max_open_sandboxes_per_change,
        )
    )
    print(f"project {args.name}: repo {repo or '(none)'}, branch {branch}, pool {args.pool or '(default)'}{note}")


def env_pairs(pairs: list[str]) -> dict[str, str]:
    """`NAME=VALUE` arguments as a mapping (InvalidArgument naming `env` for one without '=')."""
    env = {}
    for pair in pairs:
        name, eq, value = pair.partition("=")
        if not eq:
            raise InvalidArgument(f"{pair!r} is not NAME=VALUE", field="env")
        env[name] = value
    return env


def as_dict(p: Project) -> dict[str, Any]:
    """What `project show` and `list --json` print: the settings, never the git token (only its file)."""
    return {
        "name": p.name,
        "repo": redact_url(p.repo),
        "branch": p.branch,
        "pool": p.pool,
        "commands": list(p.commands or []),
        "network": p.network,
        "git_token_file": p.git_token_file,
        "monthly_budget_usd": p.monthly_budget_usd,
        "answer_window_minutes": p.answer_window_minutes,
        "build_outputs": list(p.build_outputs or []),
        "setup": list(p.setup or []),
        "setup_network": p.setup_network,
        "env": dict(p.env or {}),
        "git_name": p.git_name,
        "git_email": p.git_email,
        "branch_template": p.branch_template,
        "cache_key_files": list(p.cache_key_files or []),
        "git_credential": p.git_credential_kind,
        "forge": p.forge,
        "forge_repo": p.forge_repo,
        "forge_api_url": p.forge_api_url,
        "forge_label": p.forge_label,
        "max_fix_rounds": p.max_fix_rounds,
        "forge_budget_usd": p.forge_budget_usd,
        "forge_branch_template": p.forge_branch_template,
        "forge_check_command": p.forge_check_command,
        "max_active_runs_per_change": p.max_active_runs_per_change,
        "weight": p.weight,
        "max_open_sandboxes_per_change": p.max_open_sandboxes_per_change,
        "forge_credential": p.forge_credential_kind,
        "webhook_secret": bool(p.webhook_secret_sealed),
    }


def cmd_project_apply(store: Store, config: DataDir, args: argparse.Namespace) -> None:
    from controlplane.credential_cli import host_account
    from controlplane.project_file import apply_file

    for line in apply_file(store, pathlib.Path(args.file), args.credential_key_file, host_account(), args.dry_run):
        print(line)


def cmd_project_list(store: Store, config: DataDir, args: argparse.Namespace) -> None:
    from controlplane.services.projects import list_projects
    from drover.render import table

    found = [as_dict(p) for p in store.transaction(list_projects)]
    if args.json:
        print(json.dumps(found, indent=2))
        return
    rows = [[p["name"], p["repo"] or "-", p["branch"], p["pool"] or "-", "yes" if p["network"] else ""] for p in found]
    print(table(rows, ["NAME", "REPO", "BRANCH", "POOL", "NETWORK"]))


def cmd_project_show(store: Store, config: DataDir, args: argparse.Namespace) -> None:
    from controlplane.services.tenancy import visible_project

    found = store.transaction(visible_project, args.name, None)
    print(json.dumps(as_dict(found), indent=2))


def cmd_project_remove(store: Store, config: DataDir, args: argparse.Namespace) -> None:
    from controlplane.services.projects import remove_project

    store.transaction(remove_project, args.name)
    print(f"project {args.name} removed")


def project_parsers(sub: Any, command: Callable[[Any, str, Command, str], argparse.ArgumentParser]) -> Any:
    """The `project` commands; answers their subparsers (`project credential` joins them)."""
    pr = sub.add_parser("project", help="projects").add_subparsers(dest="project_command", required=True)
    pa = command(pr, "add", cmd_project_add, "add or update a project")
    pa.add_argument("name")
    pa.add_argument("--repo", default="", help="path or URL of the git repository (empty: no repository)")
    pa.add_argument(
        "--branch", default="", help="the branch runs start from (default: the one the repository's HEAD names)"
    )
    pa.add_argument("--pool", default="", help="only agents whose token serves pool P run this project's Tasks")
    pa.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="RULE",
        help="a command the harness may run, e.g. 'pytest [args]' (repeatable; default: Python rules)",
    )
    pa.add_argument(
        "--build-output",
        action="append",
        default=[],
        metavar="PATTERN",
        help="files a ChangeSet leaves out unless tracked or written by a write tool, .gitignore-like, "
        "e.g. 'dist/' (repeatable; replaces the default list: __pycache__/, *.pyc, node_modules/, build/, ...)",
    )
    pa.add_argument("--network", action="store_true", help="let the project's Tasks use the network")
    pa.add_argument("--monthly-budget-usd", type=float, default=0.0, help="the project's monthly model budget")
    pa.add_argument(
        "--answer-window-minutes",
        type=float,
        default=15.0,
        help="a session held by an unanswered question longer than this is parked (default 15; 0: never)",
    )
    pa.add_argument(
        "--git-token-file",
        default="",
        help="file holding the git token for an https repository; read when a run starts, never stored",
    )
    admission_flags(pa)
    preparation_flags(pa)
    forge_flags(pa)
    apply = command(pr, "apply", cmd_project_apply, "add or update the projects of a TOML file, in one transaction")
    apply.add_argument("file", help="[projects.NAME] tables of project add's settings and secret files")
    apply.add_argument("--dry-run", action="store_true", help="check it all and print what would change; write nothing")
    key_file_flag(apply)
    command(pr, "list", cmd_project_list, "every project").add_argument("--json", action="store_true")
    command(pr, "show", cmd_project_show, "one project's settings, as JSON").add_argument("name")
    command(pr, "remove", cmd_project_remove, "remove a project that has no Changes").add_argument("name")
    return pr


def admission_flags(pa: argparse.ArgumentParser) -> None:
    """How much of its pool the project's Changes may hold: the per-Change caps and the project's weight."""
    pa.add_argument(
        "--max-active-runs-per-change",
        type=int,
        default=8,
        help="at most this many runs of one Change are active at once; the rest stay queued (1-1000, default 8)",
    )
    pa.add_argument(
        "--weight",
        type=int,
        default=1,
        help="the project's share of its pool's slots against the pool's other projects (1-1000, default 1)",
    )
    pa.add_argument(
        "--max-open-sandboxes-per-change",
        type=int,
        default=4,
        help="at most this many runs of one Change hold an open sandbox at once; the rest wait (1-1000, default 4)",
    )


def preparation_flags(pa: argparse.ArgumentParser) -> None:
    """How each run's workspace is prepared: setup commands, the project's env, git identity, branches."""
    pa.add_argument(
        "--setup",
        action="append",
        default=[],
        metavar="COMMAND",
        help="a command run in the sandbox after the clone, before the Task's work (repeatable, in order), "
        "e.g. 'pip install -e .'",
    )
    pa.add_argument("--no-setup-network", action="store_true", help="setup may not use the network either")
    pa.add_argument(
        "--env", action="append", default=[], metavar="NAME=VALUE", help="every run's environment (not secrets)"
    )
    pa.add_argument("--git-name", default="", help="author of ChangeSet commits (default: Drover Agent)")
    pa.add_argument("--git-email", default="", help="its email (default: agent@drover.invalid)")
    pa.add_argument(
        "--branch-template",
        default="",
        help="the branch of each Task's ChangeSet: {change}, {task}, {slug} (default: drover/{change}/{task})",
    )
    pa.add_argument(
        "--cache-key-file",
        action="append",
        default=[],
        metavar="PATH",
        help="a file (or glob) whose contents key the agents' prepared workspaces, e.g. 'requirements*.txt' "
        "(repeatable)",
    )


def forge_flags(pa: argparse.ArgumentParser) -> None:
    """The project's repository on a forge (issue 28); its credential and webhook secret go through the API."""
    pa.add_argument("--forge", default="", choices=("", "github"), help="the forge the repository is on")
    pa.add_argument("--forge-repo", default="", metavar="OWNER/NAME", help="the repository on the forge")
    pa.add_argument("--forge-api-url", default="", help="the forge's API (default for github: https://api.github.com)")
    pa.add_argument("--forge-label", default="", help="the issue label that hands an issue to Drover (default drover)")
    pa.add_argument(
        "--max-fix-rounds",
        type=int,
        default=3,
        help="fix rounds per pull request after CI or a review (0-20, default 3)",
    )
    pa.add_argument("--forge-budget-usd", type=float, default=0.0, help="each issue's Change budget (0: none)")
    pa.add_argument(
        "--forge-branch-template",
        default="drover/issue-{number}",
        help="the pull request's branch: {number}, {change}, {slug} (default drover/issue-{number})",
    )
    pa.add_argument("--forge-check-command", default="", help="a check Task runs it with sh -c ('': no check Task)")
