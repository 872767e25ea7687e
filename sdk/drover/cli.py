"""`drover`: submit and follow Changes, look at runs and agents, from a terminal."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import pathlib
import sys
from typing import Any, Iterable

import grpc
from google.protobuf import json_format

from drover import changefile
from drover.client import Client
from drover.errors import DroverError
from drover.v1 import types_pb2

DEFAULT_TOKEN_FILE = ".drover/tokens/admin.token"


def _as_dict(message: Any) -> dict[str, Any]:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def _clock(ts: Any) -> str:
    if not ts.seconds:
        return "--:--:--"
    return dt.datetime.fromtimestamp(ts.seconds, dt.timezone.utc).strftime("%H:%M:%S")


def format_event(event: types_pb2.Event) -> str:
    data = _as_dict(event.data) if event.data.fields else {}
    key = data.pop("key", "")
    bits = [f"{_clock(event.created_at)}  {event.kind:<24}"]
    if key:
        bits.append(key)
    if event.run_id:
        bits.append(event.run_id)
    if event.agent and event.kind.startswith(("run.", "agent.")):
        bits.append(f"on {event.agent}")
    for name in ("status", "exit_code", "reason", "because", "tier", "member", "rule", "from", "to", "limit",
                 "error"):
        if name in data and data[name] not in ("", None):
            value = data[name]
            if name == "exit_code" and data.get("status") == "succeeded":
                continue
            bits.append(f"{name}={int(value) if isinstance(value, float) else value}")
    return "  ".join(bits)


def format_run_event(line: str) -> str:
    """One harness event (a JSON line of stream "event") for a terminal."""
    try:
        event = json.loads(line)
    except ValueError:
        return line
    kind = event.get("kind", "")
    if kind == "text":
        return f"  says: {event.get('text', '').strip()}"
    if kind == "tool_use":
        args = json.dumps(event.get("input", {}), ensure_ascii=False)
        return f"  -> {event.get('tool')} {args[:160]}{'...' if len(args) > 160 else ''}"
    if kind == "tool_result":
        first = (event.get("text", "").strip().splitlines() or [""])[0]
        return f"  <- {event.get('tool')}{' ERROR' if event.get('error') else ''}: {first[:160]}"
    if kind == "result":
        return f"  == {event.get('outcome')}: {event.get('text', '')}"
    return f"  {kind}"


def format_change(change: types_pb2.Change) -> str:
    lines = [f"change {change.id}  {change.status}  project {change.project}", f"  goal: {change.goal}"]
    if change.candidate_branch:
        lines.append(f"  candidate: {change.candidate_branch} at {change.candidate_commit[:12]}")
    if change.reason:
        lines.append(f"  reason: {change.reason}")
    for c in change.conflicts:
        lines.append(f"  conflict: {c.task_a} and {c.task_b} touch {', '.join([*c.files, *c.resources])}")
    for task in change.tasks:
        deps = f"  after {', '.join(task.depends_on)}" if task.depends_on else ""
        why = f"  ({task.reason})" if task.reason else ""
        lines.append(f"  {task.status:<10} {task.key:<20} {task.kind:<10} {task.latest_run_id}{deps}{why}")
    return "\n".join(lines)


def _table(rows: Iterable[list[str]], header: list[str]) -> str:
    rows = [header, *rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def _token(args: argparse.Namespace) -> str:
    if args.token_file:
        return pathlib.Path(args.token_file).read_text().strip()
    if os.environ.get("DROVER_TOKEN"):
        return os.environ["DROVER_TOKEN"].strip()
    return pathlib.Path(DEFAULT_TOKEN_FILE).read_text().strip()


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--target", default=os.environ.get("DROVER_TARGET", "127.0.0.1:50051"),
                        help="control plane host:port (env DROVER_TARGET)")
    common.add_argument("--token-file", help=f"default {DEFAULT_TOKEN_FILE}; env DROVER_TOKEN holds a token")
    common.add_argument("--json", action="store_true", help="machine-readable output")
    common.add_argument("--tls-ca", default=os.environ.get("DROVER_TLS_CA", ""),
                        help="dial with TLS, trusting this CA bundle (env DROVER_TLS_CA)")
    p = argparse.ArgumentParser(prog="drover", description="Submit and follow Drover Changes")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("submit", parents=[common], help="submit a Change file (YAML or JSON)")
    s.add_argument("file")
    s.add_argument("--watch", action="store_true", help="then watch it until it ends")
    w = sub.add_parser("watch", parents=[common], help="follow a Change's events until it ends")
    w.add_argument("change_id")
    lg = sub.add_parser("logs", parents=[common], help="a run's output")
    lg.add_argument("run_id")
    lg.add_argument("-f", "--follow", action="store_true", help="until the run ends")
    sub.add_parser("agents", parents=[common], help="connected and known agents")
    r = sub.add_parser("runs", parents=[common], help="recent runs")
    r.add_argument("--change", default="")
    r.add_argument("--state", default="")
    r.add_argument("--agent", default="")
    c = sub.add_parser("change", parents=[common], help="a Change and its Tasks")
    c.add_argument("change_id")
    cs = sub.add_parser("changesets", parents=[common], help="the ChangeSets of a Change")
    cs.add_argument("change_id")
    pt = sub.add_parser("patch", parents=[common], help="a ChangeSet's patch")
    pt.add_argument("changeset_id")
    rb = sub.add_parser("raise-budget", parents=[common], help="raise a Change's budget (USD)")
    rb.add_argument("change_id")
    rb.add_argument("budget_usd", type=float)
    sp = sub.add_parser("spend", parents=[common], help="a Change's spend by tier and member, and its receipts")
    sp.add_argument("change_id")
    us = sub.add_parser("usage", parents=[common], help="every meter: value, limit, period")
    us.add_argument("--prefix", default="")
    pk = sub.add_parser("packet", parents=[common], help="a run's Context Packet")
    pk.add_argument("run_id")
    cl = sub.add_parser("claims", parents=[common], help="advisory claims: holder, resource, generation, expiry")
    cl.add_argument("--change", default="")
    cc = sub.add_parser("cancel", parents=[common], help="cancel a Change")
    cc.add_argument("change_id")
    cr = sub.add_parser("cancel-run", parents=[common], help="cancel one run")
    cr.add_argument("run_id")
    d = sub.add_parser("drain", parents=[common], help="give an agent no new runs")
    d.add_argument("name")
    e = sub.add_parser("events", parents=[common], help="recent events")
    e.add_argument("--change", default="")
    e.add_argument("--run", default="")
    e.add_argument("--kind", default="")
    return p


def _watch(client: Client, change_id: str, as_json: bool) -> int:
    for event in client.watch(change_id):
        print(json.dumps(_as_dict(event)) if as_json else format_event(event), flush=True)
    change = client.get_change(change_id)
    if not as_json:
        print(format_change(change))
    return 0 if change.status == "succeeded" else 1


def run(args: argparse.Namespace) -> int:
    out = (lambda m: print(json.dumps(_as_dict(m), indent=2))) if args.json else None
    credentials = grpc.ssl_channel_credentials(pathlib.Path(args.tls_ca).read_bytes()) if args.tls_ca else None
    with Client(args.target, token=_token(args), credentials=credentials) as client:
        if args.command == "submit":
            change = client.submit_change_file(changefile.load(args.file))
            (out or (lambda c: print(f"submitted change {c.id} ({len(c.tasks)} tasks)")))(change)
            return _watch(client, change.id, args.json) if args.watch else 0
        if args.command == "watch":
            return _watch(client, args.change_id, args.json)
        if args.command == "logs":
            for line in client.run_logs(args.run_id, follow=args.follow):
                if args.json:
                    print(json.dumps(_as_dict(line)), flush=True)
                elif line.stream == "event":
                    for text in line.text.splitlines():
                        print(format_run_event(text), flush=True)
                else:
                    (sys.stderr if line.stream == "stderr" else sys.stdout).write(line.text)
                    sys.stdout.flush()
            return 0
        if args.command == "agents":
            agents = client.list_agents()
            if args.json:
                print(json.dumps([_as_dict(a) for a in agents], indent=2))
            else:
                print(_table(([a.name, "yes" if a.connected else "no", f"{a.active_runs}/{a.capacity}",
                               "yes" if a.draining else "", ",".join(f"{k}={v}" for k, v in sorted(a.labels.items()))]
                              for a in agents), ["NAME", "CONNECTED", "RUNS", "DRAINING", "LABELS"]))
            return 0
        if args.command == "runs":
            runs = client.list_runs(change_id=args.change, state=args.state, agent=args.agent)
            if args.json:
                print(json.dumps([_as_dict(r) for r in runs], indent=2))
            else:
                print(_table(([r.id, r.state, r.task_key, r.agent, str(r.exit_code) if r.finished_at.seconds else "",
                               r.reason, r.change_id] for r in runs),
                             ["RUN", "STATE", "TASK", "AGENT", "EXIT", "REASON", "CHANGE"]))
            return 0
        if args.command == "change":
            change = client.get_change(args.change_id)
            (out or (lambda c: print(format_change(c))))(change)
            return 0
        if args.command == "changesets":
            found = client.list_changesets(args.change_id)
            if args.json:
                print(json.dumps([_as_dict(c) for c in found], indent=2))
            else:
                print(_table(([c.id, c.task_key, c.branch, c.commit[:12], ",".join(c.own_files)] for c in found),
                             ["CHANGESET", "TASK", "BRANCH", "COMMIT", "OWN FILES"]))
            return 0
        if args.command == "patch":
            text = client.get_patch(args.changeset_id)
            print(json.dumps({"changeset_id": args.changeset_id, "patch": text}) if args.json else text, end="")
            return 0
        if args.command == "raise-budget":
            change = client.raise_budget(args.change_id, args.budget_usd)
            (out or (lambda c: print(format_change(c))))(change)
            return 0
        if args.command == "spend":
            spend = client.get_spend(args.change_id)
            if args.json:
                print(json.dumps(_as_dict(spend), indent=2))
            else:
                print(f"change {spend.change_id}: spent ${spend.spent_micros / 1e6:.6f} of "
                      f"{'$%.2f' % (spend.budget_micros / 1e6) if spend.budget_micros else 'no budget'}")
                print(_table(([l.tier, l.member, l.model, str(l.calls), f"${l.cost_micros / 1e6:.6f}"]
                              for l in spend.lines), ["TIER", "MEMBER", "MODEL", "CALLS", "COST"]))
                for r in spend.receipts:
                    data = _as_dict(r.data)
                    print(f"  {r.task_key} {r.run_id}: tier {r.tier} by {data.get('rule', '')}"
                          f"{' (opus disabled)' if data.get('opus_disabled') else ''}"
                          f"{' escalation ' + data['escalation'] if data.get('escalation') else ''}"
                          f" member {data.get('member', '-')} agent {data.get('agent', '-')}")
            return 0
        if args.command == "usage":
            meters = client.get_usage(args.prefix)
            if args.json:
                print(json.dumps([_as_dict(m) for m in meters], indent=2))
            else:
                def amount(m, v: int) -> str:
                    return f"${v / 1e6:.6f}" if m.unit == "usd" else str(v)
                print(_table(([m.key, m.period, amount(m, m.used), amount(m, m.reserved),
                               amount(m, m.limit) if m.limit else "none"] for m in meters),
                             ["METER", "PERIOD", "USED", "RESERVED", "LIMIT"]))
            return 0
        if args.command == "packet":
            found = client.get_packet(args.run_id)
            print(json.dumps(found, indent=2, ensure_ascii=False))
            return 0
        if args.command == "claims":
            found = client.list_claims(args.change)
            if args.json:
                print(json.dumps([_as_dict(c) for c in found], indent=2))
            else:
                print(_table(([c.resource, c.run_id, c.holder, str(c.generation),
                               dt.datetime.fromtimestamp(c.expires_at.seconds, dt.timezone.utc).strftime("%H:%M:%S")]
                              for c in found), ["RESOURCE", "RUN", "HOLDER", "GENERATION", "EXPIRES"]))
            return 0
        if args.command == "cancel":
            change = client.cancel_change(args.change_id)
            (out or (lambda c: print(format_change(c))))(change)
            return 0
        if args.command == "cancel-run":
            run_ = client.cancel_run(args.run_id)
            (out or (lambda r: print(f"run {r.id}: {r.state}{' (cancel sent)' if r.cancel_requested else ''}")))(run_)
            return 0
        if args.command == "drain":
            agent = client.drain_agent(args.name)
            (out or (lambda a: print(f"agent {a.name}: draining")))(agent)
            return 0
        if args.command == "events":
            events = client.list_events(change_id=args.change, run_id=args.run, kind=args.kind)
            for event in events:
                print(json.dumps(_as_dict(event)) if args.json else format_event(event))
            return 0
    return 2


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
