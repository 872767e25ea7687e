"""How the drover CLI shows things in a terminal: events, harness events, Changes and tables."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, Iterable

from google.protobuf import json_format

from drover.v1 import types_pb2


def as_dict(message: Any) -> dict[str, Any]:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def _clock(ts: Any) -> str:
    if not ts.seconds:
        return "--:--:--"
    return dt.datetime.fromtimestamp(ts.seconds, dt.timezone.utc).strftime("%H:%M:%S")


def format_event(event: types_pb2.Event) -> str:
    data = as_dict(event.data) if event.data.fields else {}
    key = data.pop("key", "")
    bits = [f"{_clock(event.created_at)}  {event.kind:<24}"]
    if key:
        bits.append(key)
    if event.run_id:
        bits.append(event.run_id)
    if event.agent and event.kind.startswith(("run.", "agent.")):
        bits.append(f"on {event.agent}")
    for name in ("status", "exit_code", "reason", "because", "tier", "member", "rule", "from", "to", "limit", "error"):
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


def table(rows: Iterable[list[str]], header: list[str]) -> str:
    rows = [header, *rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def agents_table(agents: Iterable[types_pb2.Agent]) -> str:
    return table(
        (
            [
                a.name,
                "yes" if a.connected else "no",
                f"{a.active_runs}/{a.capacity}",
                "yes" if a.draining else "",
                ",".join(f"{k}={v}" for k, v in sorted(a.labels.items())),
            ]
            for a in agents
        ),
        ["NAME", "CONNECTED", "RUNS", "DRAINING", "LABELS"],
    )


def runs_table(runs: Iterable[types_pb2.Run]) -> str:
    return table(
        (
            [
                r.id,
                r.state,
                r.task_key,
                r.agent,
                str(r.exit_code) if r.finished_at.seconds else "",
                r.reason,
                r.change_id,
            ]
            for r in runs
        ),
        ["RUN", "STATE", "TASK", "AGENT", "EXIT", "REASON", "CHANGE"],
    )


def changesets_table(found: Iterable[types_pb2.ChangeSet]) -> str:
    return table(
        ([c.id, c.task_key, c.branch, c.commit[:12], ",".join(c.own_files)] for c in found),
        ["CHANGESET", "TASK", "BRANCH", "COMMIT", "OWN FILES"],
    )


def spend_text(spend: Any) -> str:
    budget = "$%.2f" % (spend.budget_micros / 1e6) if spend.budget_micros else "no budget"
    lines = [
        f"change {spend.change_id}: spent ${spend.spent_micros / 1e6:.6f} of {budget}",
        table(
            (
                [line.tier, line.member, line.model, str(line.calls), f"${line.cost_micros / 1e6:.6f}"]
                for line in spend.lines
            ),
            ["TIER", "MEMBER", "MODEL", "CALLS", "COST"],
        ),
    ]
    for r in spend.receipts:
        data = as_dict(r.data)
        lines.append(
            f"  {r.task_key} {r.run_id}: tier {r.tier} by {data.get('rule', '')}"
            f"{' (opus disabled)' if data.get('opus_disabled') else ''}"
            f"{' escalation ' + data['escalation'] if data.get('escalation') else ''}"
            f" member {data.get('member', '-')} agent {data.get('agent', '-')}"
        )
    return "\n".join(lines)


def meters_table(meters: Iterable[types_pb2.MeterUsage]) -> str:
    def amount(m: types_pb2.MeterUsage, v: int) -> str:
        return f"${v / 1e6:.6f}" if m.unit == "usd" else str(v)

    return table(
        (
            [m.key, m.period, amount(m, m.used), amount(m, m.reserved), amount(m, m.limit) if m.limit else "none"]
            for m in meters
        ),
        ["METER", "PERIOD", "USED", "RESERVED", "LIMIT"],
    )


def claims_table(found: Iterable[types_pb2.Claim]) -> str:
    return table(
        (
            [
                c.resource,
                c.run_id,
                c.holder,
                str(c.generation),
                dt.datetime.fromtimestamp(c.expires_at.seconds, dt.timezone.utc).strftime("%H:%M:%S"),
            ]
            for c in found
        ),
        ["RESOURCE", "RUN", "HOLDER", "GENERATION", "EXPIRES"],
    )
