"""`drover`: submit and follow Changes, look at runs and agents, from a terminal."""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
from collections.abc import Callable
from typing import Any

import grpc

from drover import changefile, render
from drover.client import Client
from drover.errors import DroverError
from drover.render import format_change, format_event, format_run_event

DEFAULT_TOKEN_FILE = ".drover/tokens/admin.token"
Command = Callable[[Client, argparse.Namespace], int]


def _token(args: argparse.Namespace) -> str:
    if args.token_file:
        return pathlib.Path(args.token_file).read_text().strip()
    if os.environ.get("DROVER_TOKEN"):
        return os.environ["DROVER_TOKEN"].strip()
    return pathlib.Path(DEFAULT_TOKEN_FILE).read_text().strip()


def _show(args: argparse.Namespace, found: Any, text: Callable[[Any], str]) -> int:
    """Print a message, or a list of them, as JSON (--json) or as `text` says."""
    if args.json:
        value = [render.as_dict(m) for m in found] if isinstance(found, list) else render.as_dict(found)
        print(json.dumps(value, indent=2))
    else:
        print(text(found))
    return 0


def _watch(client: Client, change_id: str, as_json: bool) -> int:
    for event in client.watch(change_id):
        print(json.dumps(render.as_dict(event)) if as_json else format_event(event), flush=True)
    change = client.get_change(change_id)
    if not as_json:
        print(format_change(change))
    return 0 if change.status == "succeeded" else 1


def cmd_submit(client: Client, args: argparse.Namespace) -> int:
    change = client.submit_change_file(changefile.load(args.file))
    _show(args, change, lambda c: f"submitted change {c.id} ({len(c.tasks)} tasks)")
    return _watch(client, change.id, args.json) if args.watch else 0


def cmd_watch(client: Client, args: argparse.Namespace) -> int:
    return _watch(client, args.change_id, args.json)


def cmd_logs(client: Client, args: argparse.Namespace) -> int:
    for line in client.run_logs(args.run_id, follow=args.follow):
        if args.json:
            print(json.dumps(render.as_dict(line)), flush=True)
        elif line.stream == "event":
            for text in line.text.splitlines():
                print(format_run_event(text), flush=True)
        else:
            (sys.stderr if line.stream == "stderr" else sys.stdout).write(line.text)
            sys.stdout.flush()
    return 0


def cmd_events(client: Client, args: argparse.Namespace) -> int:
    for event in client.list_events(change_id=args.change, run_id=args.run, kind=args.kind):
        print(json.dumps(render.as_dict(event)) if args.json else format_event(event))
    return 0


def cmd_patch(client: Client, args: argparse.Namespace) -> int:
    text = client.get_patch(args.changeset_id)
    print(json.dumps({"changeset_id": args.changeset_id, "patch": text}) if args.json else text, end="")
    return 0


def cmd_packet(client: Client, args: argparse.Namespace) -> int:
    print(json.dumps(client.get_packet(args.run_id), indent=2, ensure_ascii=False))
    return 0


SHOW: dict[str, tuple[Callable[[Client, argparse.Namespace], Any], Callable[[Any], str]]] = {
    "agents": (lambda c, a: c.list_agents(), render.agents_table),
    "runs": (lambda c, a: c.list_runs(change_id=a.change, state=a.state, agent=a.agent), render.runs_table),
    "change": (lambda c, a: c.get_change(a.change_id), format_change),
    "changesets": (lambda c, a: c.list_changesets(a.change_id), render.changesets_table),
    "raise-budget": (lambda c, a: c.raise_budget(a.change_id, a.budget_usd), format_change),
    "spend": (lambda c, a: c.get_spend(a.change_id), render.spend_text),
    "usage": (lambda c, a: c.get_usage(a.prefix), render.meters_table),
    "claims": (lambda c, a: c.list_claims(a.change), render.claims_table),
    "cancel": (lambda c, a: c.cancel_change(a.change_id), format_change),
    "cancel-run": (
        lambda c, a: c.cancel_run(a.run_id),
        lambda r: f"run {r.id}: {r.state}{' (cancel sent)' if r.cancel_requested else ''}",
    ),
    "drain": (lambda c, a: c.drain_agent(a.name), lambda a: f"agent {a.name}: draining"),
}
"""Commands that ask one thing and show the answer."""


def _shower(name: str) -> Command:
    ask, text = SHOW[name]
    return lambda client, args: _show(args, ask(client, args), text)


COMMANDS: list[tuple[str, str, Command, list[tuple[tuple[str, ...], dict[str, Any]]]]] = [
    (
        "submit",
        "submit a Change file (YAML or JSON)",
        cmd_submit,
        [(("file",), {}), (("--watch",), {"action": "store_true", "help": "then watch it until it ends"})],
    ),
    ("watch", "follow a Change's events until it ends", cmd_watch, [(("change_id",), {})]),
    (
        "logs",
        "a run's output",
        cmd_logs,
        [(("run_id",), {}), (("-f", "--follow"), {"action": "store_true", "help": "until the run ends"})],
    ),
    ("agents", "connected and known agents", _shower("agents"), []),
    (
        "runs",
        "recent runs",
        _shower("runs"),
        [(("--change",), {"default": ""}), (("--state",), {"default": ""}), (("--agent",), {"default": ""})],
    ),
    ("change", "a Change and its Tasks", _shower("change"), [(("change_id",), {})]),
    ("changesets", "the ChangeSets of a Change", _shower("changesets"), [(("change_id",), {})]),
    ("patch", "a ChangeSet's patch", cmd_patch, [(("changeset_id",), {})]),
    (
        "raise-budget",
        "raise a Change's budget (USD)",
        _shower("raise-budget"),
        [(("change_id",), {}), (("budget_usd",), {"type": float})],
    ),
    ("spend", "a Change's spend by tier and member, and its receipts", _shower("spend"), [(("change_id",), {})]),
    ("usage", "every meter: value, limit, period", _shower("usage"), [(("--prefix",), {"default": ""})]),
    ("packet", "a run's Context Packet", cmd_packet, [(("run_id",), {})]),
    (
        "claims",
        "advisory claims: holder, resource, generation, expiry",
        _shower("claims"),
        [(("--change",), {"default": ""})],
    ),
    ("cancel", "cancel a Change", _shower("cancel"), [(("change_id",), {})]),
    ("cancel-run", "cancel one run", _shower("cancel-run"), [(("run_id",), {})]),
    ("drain", "give an agent no new runs", _shower("drain"), [(("name",), {})]),
    (
        "events",
        "recent events",
        cmd_events,
        [(("--change",), {"default": ""}), (("--run",), {"default": ""}), (("--kind",), {"default": ""})],
    ),
]


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--target",
        default=os.environ.get("DROVER_TARGET", "127.0.0.1:50051"),
        help="control plane host:port (env DROVER_TARGET)",
    )
    common.add_argument("--token-file", help=f"default {DEFAULT_TOKEN_FILE}; env DROVER_TOKEN holds a token")
    common.add_argument("--json", action="store_true", help="machine-readable output")
    common.add_argument(
        "--tls-ca",
        default=os.environ.get("DROVER_TLS_CA", ""),
        help="dial with TLS, trusting this CA bundle (env DROVER_TLS_CA)",
    )
    p = argparse.ArgumentParser(prog="drover", description="Submit and follow Drover Changes")
    sub = p.add_subparsers(dest="command", required=True)
    for name, help_text, func, arguments in COMMANDS:
        command = sub.add_parser(name, parents=[common], help=help_text)
        for flags, options in arguments:
            command.add_argument(*flags, **options)
        command.set_defaults(func=func)
    return p


def run(args: argparse.Namespace) -> int:
    credentials = grpc.ssl_channel_credentials(pathlib.Path(args.tls_ca).read_bytes()) if args.tls_ca else None
    with Client(args.target, token=_token(args), credentials=credentials) as client:
        result: int = args.func(client, args)
        return result


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return run(args)
    except DroverError as err:
        print(f"drover: {err.code}: {err.message}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"drover: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as err:  # a bug of ours: say what, never a traceback
        print(f"drover: unexpected error: {type(err).__name__}: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
