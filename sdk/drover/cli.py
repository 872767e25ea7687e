"""`drover`: submit and follow Changes, look at runs and agents, from a terminal.

Exit codes (EXIT below, and docs/cli.md): 0 done; 1 the Change or run failed; 2 usage or invalid input;
3 not found; 4 not signed in or not allowed; 5 control plane unavailable; 6 refused in the current
state (a budget, a precondition); 7 the control plane failed; 70 a bug in this CLI."""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from drover import admin_commands, follow, render
from drover.errors import DroverError, Unauthenticated
from drover.extras import Version
from drover.render import format_change, format_event, format_run_event

if TYPE_CHECKING:
    from drover.client import Client
    from drover.models import LogLine

DEFAULT_TOKEN_FILE = ".drover/tokens/admin.token"
Command = Callable[["Client", argparse.Namespace], int]
EXIT = {"INVALID_ARGUMENT": 2, "NOT_FOUND": 3, "UNAUTHENTICATED": 4, "PERMISSION_DENIED": 4}
EXIT |= {
    "UNAVAILABLE": 5,
    "DEADLINE_EXCEEDED": 5,
    "FAILED_PRECONDITION": 6,
    "RESOURCE_EXHAUSTED": 6,
    "ALREADY_EXISTS": 6,
}
"""A server error's exit code by gRPC status; any other status is 7."""
RUN_STATES = ("queued", "starting", "running", "succeeded", "failed", "cancelled")


def _token(args: argparse.Namespace) -> str:
    if args.token_file:
        where = pathlib.Path(args.token_file)
    elif os.environ.get("DROVER_TOKEN"):
        return os.environ["DROVER_TOKEN"].strip()
    else:
        where = pathlib.Path(DEFAULT_TOKEN_FILE)
    try:
        return where.read_text().strip()
    except OSError as err:
        raise Unauthenticated(
            f"cannot read the token file {where}: {err.strerror or err}; pass --token-file or set DROVER_TOKEN"
        ) from None


def _show(args: argparse.Namespace, found: Any, text: Callable[[Any], str]) -> int:
    """Print an object, or a list of them, as JSON (--json), JSON lines (--jsonl) or as `text` says."""
    if args.jsonl:
        for item in found if isinstance(found, list) else [found]:
            print(json.dumps(render.as_dict(item)))
    elif args.json:
        value = [render.as_dict(m) for m in found] if isinstance(found, list) else render.as_dict(found)
        print(json.dumps(value, indent=2))
    else:
        print(text(found))
    return 0


def _machine(args: argparse.Namespace) -> bool:
    return bool(args.json or args.jsonl)


def _print_line(args: argparse.Namespace, key: str, line: LogLine) -> None:
    if _machine(args):
        print(json.dumps(render.as_dict(line)), flush=True)
        return
    for text in render.labelled_lines(key, line):
        print(text, flush=True)


def _watch(client: Client, change_id: str, args: argparse.Namespace) -> int:
    change = client.get_change(change_id)
    keys = {t.id: t.key for t in change.tasks}
    for notice in change.notices:  # the control plane says what holds the Change up
        print(f"drover: {notice}", file=sys.stderr, flush=True)
    logs = follow.RunFollowers(client, lambda key, line: _print_line(args, key, line)) if args.logs else None
    for event in follow.change_events(client, change_id):
        if logs is not None and event.kind == "run.finished":
            logs.finished(event.run_id)  # its last lines before the event
        print(json.dumps(render.as_dict(event)) if _machine(args) else format_event(event), flush=True)
        if logs is not None and event.kind == "run.started":
            logs.started(event.run_id, keys.get(event.task_id, ""))
    change = client.get_change(change_id)
    if not _machine(args):
        print(format_change(change))
    return 0 if change.status == "succeeded" else 1


def cmd_submit(client: Client, args: argparse.Namespace) -> int:
    from drover import changefile  # here: YAML is read by this command only

    change = client.submit_change_file(changefile.load(args.file))
    _show(args, change, lambda c: f"submitted change {c.id} ({len(c.tasks)} tasks)")
    return _watch(client, change.id, args) if args.watch else 0


def cmd_watch(client: Client, args: argparse.Namespace) -> int:
    return _watch(client, args.change_id, args)


def cmd_logs(client: Client, args: argparse.Namespace) -> int:
    lines = follow.run_lines(client, args.run_id) if args.follow else client.run_logs(args.run_id)
    for line in lines:
        if _machine(args):
            print(json.dumps(render.as_dict(line)), flush=True)
        elif line.stream == "event":
            for text in line.text.splitlines():
                print(format_run_event(text), flush=True)
        else:
            (sys.stderr if line.stream == "stderr" else sys.stdout).write(line.text)
            sys.stdout.flush()
    return 0


def cmd_events(client: Client, args: argparse.Namespace) -> int:
    """The newest --limit events (oldest first), or those after --after; --follow then waits for more."""
    where = {"change_id": args.change, "run_id": args.run, "kind": args.kind}
    events = client.list_events(**where, after_id=args.after, limit=args.limit, newest=not args.after)
    for event in events:
        print(json.dumps(render.as_dict(event)) if _machine(args) else format_event(event), flush=True)
    if args.follow:
        last = events[-1].id if events else args.after  # nothing matched yet: every match is new
        for event in follow.new_events(client, last, **where):
            print(json.dumps(render.as_dict(event)) if _machine(args) else format_event(event), flush=True)
    return 0


def cmd_patch(client: Client, args: argparse.Namespace) -> int:
    text = client.get_patch(args.changeset_id)
    print(json.dumps({"changeset_id": args.changeset_id, "patch": text}) if _machine(args) else text, end="")
    return 0


def cmd_packet(client: Client, args: argparse.Namespace) -> int:
    print(json.dumps(client.get_packet(args.run_id), indent=2, ensure_ascii=False))
    return 0


SHOW: dict[str, tuple[Callable[[Client, argparse.Namespace], Any], Callable[[Any], str]]] = {
    "agents": (lambda c, a: c.list_agents(), render.agents_table),
    "runs": (
        lambda c, a: c.list_runs(change_id=a.change, state=a.state, agent=a.agent, limit=a.limit),
        render.runs_table,
    ),
    "run": (lambda c, a: c.get_run(a.run_id), render.run_text),
    "changes": (lambda c, a: c.list_changes(a.project, a.limit), render.changes_table),
    "change": (lambda c, a: c.get_change(a.change_id), format_change),
    "changesets": (lambda c, a: c.list_changesets(a.change_id), render.changesets_table),
    "raise-budget": (lambda c, a: c.raise_budget(a.change_id, a.budget_usd), format_change),
    "raise-meter": (lambda c, a: c.raise_meter(a.meter, a.limit, a.name), lambda m: render.meters_table([m])),
    "retry": (lambda c, a: c.retry_task(a.task_id, a.tier), format_change),
    "amend": (lambda c, a: c.amend_change_file(a.change_id, a.file), format_change),
    "spend": (lambda c, a: c.get_spend(a.change_id), render.spend_text),
    "usage": (lambda c, a: c.get_usage(a.prefix), render.meters_table),
    "claims": (lambda c, a: c.list_claims(a.change), render.claims_table),
    "notifications": (
        lambda c, a: c.notifications.list(state=a.state, target=a.to, limit=a.limit),
        render.notifications_table,
    ),
    "cancel": (lambda c, a: c.cancel_change(a.change_id), format_change),
    "cancel-run": (
        lambda c, a: c.cancel_run(a.run_id),
        lambda r: f"run {r.id}: {r.state}{' (cancel sent)' if r.cancel_requested else ''}",
    ),
    "say": (
        lambda c, a: c.send_input(a.run_id, "message", a.text),
        lambda i: f"run {i.run_id}: message {i.seq} sent; it reaches the session after the current turn",
    ),
    "interrupt": (
        lambda c, a: c.send_input(a.run_id, "interrupt", a.text),
        lambda i: (
            f"run {i.run_id}: interrupt {i.seq} sent"
            + ("; its text follows as the next message" if i.text else "; the session ends after the stopped turn")
        ),
    ),
    "questions": (
        lambda c, a: c.list_questions(change_id=a.change, run_id=a.run, open_only=not a.all),
        render.questions_table,
    ),
    "answer": (
        lambda c, a: c.answer_question(a.question_id, a.text),
        lambda q: f"question {q.id}: answered; the answer reaches run {q.run_id} as a message",
    ),
    "drain": (lambda c, a: c.drain_agent(a.name), lambda a: f"agent {a.name}: draining"),
    "undrain": (lambda c, a: c.undrain_agent(a.name), lambda a: f"agent {a.name}: taking runs"),
}
"""Commands that ask one thing and show the answer."""


def _shower(name: str) -> Command:
    ask, text = SHOW[name]
    return lambda client, args: _show(args, ask(client, args), text)


def _positive(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"{value} is not between 1 and 1000")
    return value


Arguments = list[tuple[tuple[str, ...], dict[str, Any]]]
LOGS: Arguments = [(("--logs",), {"action": "store_true", "help": "also follow each run's output and tool calls"})]
METERS = ("provider_month", "agent_calls_day", "classifier_calls_day", "project", "user")
CHANGE: tuple[tuple[str, ...], dict[str, Any]] = (("change_id",), {})
CHANGE_FILTER = (("--change",), {"default": ""})
RUN: tuple[tuple[str, ...], dict[str, Any]] = (("run_id",), {})
TIER = (("--tier",), {"default": "", "help": "at this configured tier (a model Task)"})
LIMIT = (("--limit",), {"type": _positive, "default": 50, "help": "at most this many (1-1000, default 50)"})
COMMANDS: list[tuple[str, str, Command, Arguments]] = [
    (
        "submit",
        "submit a Change file (YAML or JSON)",
        cmd_submit,
        [(("file",), {}), (("--watch",), {"action": "store_true", "help": "then watch it until it ends"}), *LOGS],
    ),
    ("watch", "follow a Change's events until it ends (through restarts)", cmd_watch, [CHANGE, *LOGS]),
    (
        "logs",
        "a run's output",
        cmd_logs,
        [RUN, (("-f", "--follow"), {"action": "store_true", "help": "until it ends"})],
    ),
    ("agents", "connected and known agents", _shower("agents"), []),
    ("changes", "recent Changes, newest first", _shower("changes"), [(("--project",), {"default": ""}), LIMIT]),
    (
        "runs",
        "recent runs, newest first",
        _shower("runs"),
        [
            CHANGE_FILTER,
            (("--state",), {"default": "", "choices": ("", *RUN_STATES), "metavar": "{" + ",".join(RUN_STATES) + "}"}),
            (("--agent",), {"default": ""}),
            LIMIT,
        ],
    ),
    ("run", "a run and its session's result (final message, turns, cost)", _shower("run"), [RUN]),
    ("change", "a Change and its Tasks", _shower("change"), [CHANGE]),
    ("changesets", "the ChangeSets of a Change", _shower("changesets"), [CHANGE]),
    ("patch", "a ChangeSet's patch", cmd_patch, [(("changeset_id",), {})]),
    (
        "raise-budget",
        "raise a Change's budget (USD)",
        _shower("raise-budget"),
        [CHANGE, (("budget_usd",), {"type": float})],
    ),
    (
        "raise-meter",
        "raise a meter this month or UTC day (USD or calls; --name: its project or user); its stopped Tasks run again",
        _shower("raise-meter"),
        [(("meter",), {"choices": METERS}), (("limit",), {"type": float}), (("--name",), {"default": ""})],
    ),
    ("retry", "run a failed or stopped Task again", _shower("retry"), [(("task_id",), {}), TIER]),
    ("amend", "add a file's tasks: and edges: to a running Change", _shower("amend"), [CHANGE, (("file",), {})]),
    ("spend", "a Change's spend by tier and member, and its receipts", _shower("spend"), [CHANGE]),
    ("usage", "every meter: value, limit, period", _shower("usage"), [(("--prefix",), {"default": ""})]),
    ("packet", "a run's Context Packet", cmd_packet, [RUN]),
    ("claims", "advisory claims: holder, resource, generation, expiry", _shower("claims"), [CHANGE_FILTER]),
    (
        "notifications",
        "notifications sent to [[notify]] targets, newest first, and how their delivery went",
        _shower("notifications"),
        [
            (("--state",), {"default": "", "choices": ("", "pending", "delivered", "failed")}),
            (("--to",), {"default": "", "help": "only those to this [[notify]] target (its name)"}),
            LIMIT,
        ],
    ),
    ("cancel", "cancel a Change", _shower("cancel"), [CHANGE]),
    ("cancel-run", "cancel one run", _shower("cancel-run"), [RUN]),
    ("say", "send a message to a running session", _shower("say"), [RUN, (("text",), {})]),
    (
        "interrupt",
        "stop a session's turn now; TEXT (optional) follows as the next message",
        _shower("interrupt"),
        [RUN, (("text",), {"nargs": "?", "default": ""})],
    ),
    (
        "questions",
        "questions sessions asked, open ones unless --all",
        _shower("questions"),
        [
            CHANGE_FILTER,
            (("--run",), {"default": ""}),
            (("--all",), {"action": "store_true", "help": "answered ones too"}),
        ],
    ),
    ("answer", "answer a session's question", _shower("answer"), [(("question_id",), {}), (("text",), {})]),
    ("drain", "give an agent no new runs", _shower("drain"), [(("name",), {})]),
    ("undrain", "offer a drained agent runs again", _shower("undrain"), [(("name",), {})]),
    (
        "events",
        "the newest events (oldest first); --follow for new ones",
        cmd_events,
        [
            CHANGE_FILTER,
            (("--run",), {"default": ""}),
            (("--kind",), {"default": "", "help": "a prefix: run. matches run.queued, run.started, ..."}),
            LIMIT,
            (("--after",), {"type": int, "default": 0, "help": "the events after this id instead of the newest"}),
            (("-f", "--follow"), {"action": "store_true", "help": "then print new events as they happen"}),
        ],
    ),
]


def _global_flags(p: argparse.ArgumentParser, defaults: bool) -> None:
    """The flags every command takes, before or after its name. On the subcommands they default to
    SUPPRESS, so a flag given before the command is not reset by the subcommand's parser."""

    def default(value: Any) -> Any:
        return value if defaults else argparse.SUPPRESS

    p.add_argument(
        "--target",
        default=default(os.environ.get("DROVER_TARGET", "127.0.0.1:50051")),
        help="control plane host:port (env DROVER_TARGET)",
    )
    p.add_argument(
        "--token-file", default=default(None), help=f"default {DEFAULT_TOKEN_FILE}; env DROVER_TOKEN holds a token"
    )
    p.add_argument("--json", action="store_true", default=default(False), help="JSON (streams: one object a line)")
    p.add_argument("--jsonl", action="store_true", default=default(False), help="one JSON object a line")
    p.add_argument(
        "--tls-ca",
        default=default(os.environ.get("DROVER_TLS_CA", "")),
        help="dial with TLS, trusting this CA bundle (env DROVER_TLS_CA)",
    )


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    _global_flags(common, defaults=False)
    p = argparse.ArgumentParser(
        prog="drover",
        description="Submit and follow Drover Changes",
        epilog="exit codes: 0 done, 1 the Change or run failed, 2 usage or invalid input, 3 not found, "
        "4 not signed in or not allowed, 5 control plane unavailable, 6 refused in the current state, "
        "7 the control plane failed, 70 a bug in drover",
    )
    p.add_argument("--version", action=Version)
    _global_flags(p, defaults=True)
    sub = p.add_subparsers(dest="command", required=True)
    for name, help_text, func, arguments in COMMANDS:
        command = sub.add_parser(name, parents=[common], help=help_text)
        for flags, options in arguments:
            command.add_argument(*flags, **options)
        command.set_defaults(func=func)
    admin_commands.add_parsers(sub, common, _admin)
    return p


def _admin(name: str) -> Command:
    return lambda client, args: admin_commands.commands(_show)[name](client, args)


def run(args: argparse.Namespace) -> int:
    import grpc  # here, not at the top: `drover --help` and `--version` start without the gRPC stack

    from drover.client import Client

    credentials = grpc.ssl_channel_credentials(pathlib.Path(args.tls_ca).read_bytes()) if args.tls_ca else None
    with Client(args.target, token=_token(args), credentials=credentials) as client:
        result: int = args.func(client, args)
        return result


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        code = run(args)
        sys.stdout.flush()  # here, so a reader that went away is seen below and not at exit
        return code
    except BrokenPipeError:  # `drover events | head -1`: the reader has what it wanted
        return render.closed_pipe()
    except DroverError as err:
        print(f"drover: {err.code}: {err.message}", file=sys.stderr)
        return EXIT.get(err.code, 7)
    except OSError as err:  # a file named on the command line (the TLS CA, ...)
        print(f"drover: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as err:  # a bug of ours: say what, never a traceback
        print(f"drover: unexpected error: {type(err).__name__}: {err}", file=sys.stderr)
        return 70


if __name__ == "__main__":
    sys.exit(main())
