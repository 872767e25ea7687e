"""How the drover CLI shows things in a terminal: events, harness events, Changes and tables."""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from drover.models import Agent, Change, ChangeSet, Claim, Event, LogLine, MeterUsage, Question, Run, Spend, to_json

if TYPE_CHECKING:  # drover.notifications imports grpc, which `drover --version` must not load
    from drover.notifications import NotificationDelivery

PIPE_CLOSED = 141
"""The exit status of a CLI whose stdout reader went away (`drover events | head -1`): 128 + SIGPIPE, what a
shell reports for git or cat there. Nothing is printed."""


def closed_pipe() -> int:
    """stdout's reader is gone: point stdout at /dev/null, so the interpreter's last flush cannot fail
    again and print a traceback, and return PIPE_CLOSED (the Python documentation's SIGPIPE recipe)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return PIPE_CLOSED


def as_dict(obj: Any) -> dict[str, Any]:
    """What --json prints for one object: every field, proper JSON types."""
    return to_json(obj)


def _clock(at: dt.datetime | None) -> str:
    return at.strftime("%H:%M:%S") if at else "--:--:--"


def format_event(event: Event) -> str:
    data = dict(event.data)
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
            bits.append(f"{name}={value}")
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


def labelled_lines(key: str, line: LogLine) -> list[str]:
    """A run's output line (or harness events) as `    key | text` lines; nothing for system notes."""
    if line.stream == "system":
        return []
    texts = line.text.splitlines()
    if line.stream == "event":
        texts = [format_run_event(t) for t in texts]
    return [f"    {key} | {text}" for text in texts]


def format_change(change: Change) -> str:
    lines = [f"change {change.id}  {change.status}  project {change.project}", f"  goal: {change.goal}"]
    if change.candidate_branch:
        lines.append(f"  candidate: {change.candidate_branch} at {change.candidate_commit[:12]}")
    if change.reason:
        lines.append(f"  reason: {change.reason}")
    for notice in change.notices:
        lines.append(f"  note: {notice}")
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
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def agents_table(agents: Iterable[Agent]) -> str:
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


def runs_table(runs: Iterable[Run]) -> str:
    return table(
        (
            [
                r.id,
                r.state,
                r.task_key,
                r.agent,
                str(r.exit_code) if r.finished_at else "",
                r.reason,
                r.change_id,
            ]
            for r in runs
        ),
        ["RUN", "STATE", "TASK", "AGENT", "EXIT", "REASON", "CHANGE"],
    )


def run_text(r: Run) -> str:
    """One run, and its session's result (the final message is the Task's text: control characters are
    shown escaped so it cannot move the cursor or recolour the terminal)."""
    ended = f" ({r.reason})" if r.reason else ""
    lines = [
        f"run {r.id}: {r.state}{ended}",
        f"task {r.task_key} of {r.change_id}, attempt {r.attempt}, on {r.agent or '-'} ({r.driver})",
    ]
    if r.model:
        lines.append(f"model {r.model} ({r.tier}): {r.model_calls} calls, ${r.cost_micros / 1e6:.6f} metered")
    if not r.has_result:
        return "\n".join([*lines, "result: none reported"])
    cost = f", ${r.result_cost_micros / 1e6:.6f} by its own count" if r.result_cost_micros else ""
    compactions = f", {r.compactions} compactions" if r.compactions else ""
    lines.append(f"result: {'success' if r.result_success else 'failure'}, {r.result_turns} turns{cost}{compactions}")
    lines.append("final message:")
    lines += [f"  {_printable(line)}" for line in (r.result_text or "(empty)").splitlines()]
    return "\n".join(lines)


def _printable(line: str) -> str:
    """`line` with control characters escaped (\\x1b for ESC); tabs kept."""
    return "".join(c if c.isprintable() or c == "\t" else f"\\x{ord(c):02x}" for c in line)


def changes_table(found: Iterable[Change]) -> str:
    return table(
        (
            [c.id, c.status, c.project, f"{sum(t.status == 'succeeded' for t in c.tasks)}/{len(c.tasks)}", c.goal[:60]]
            for c in found
        ),
        ["CHANGE", "STATUS", "PROJECT", "TASKS OK", "GOAL"],
    )


def changesets_table(found: Iterable[ChangeSet]) -> str:
    return table(
        (
            [c.id, c.task_key, c.branch, c.commit[:12], ",".join(c.own_files), ", ".join(c.left_out) or "-"]
            for c in found
        ),
        ["CHANGESET", "TASK", "BRANCH", "COMMIT", "OWN FILES", "LEFT OUT"],
    )


def spend_text(spend: Spend) -> str:
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
        data = r.data
        lines.append(
            f"  {r.task_key} {r.run_id}: tier {r.tier} by {data.get('rule', '')}"
            f"{' (opus disabled)' if data.get('opus_disabled') else ''}"
            f"{' escalation ' + data['escalation'] if data.get('escalation') else ''}"
            f" member {data.get('member', '-')} agent {data.get('agent', '-')}"
        )
    return "\n".join(lines)


def meters_table(meters: Iterable[MeterUsage]) -> str:
    def amount(m: MeterUsage, v: int) -> str:
        return f"${v / 1e6:.6f}" if m.unit == "usd" else str(v)

    return table(
        (
            [m.key, m.period, amount(m, m.used), amount(m, m.reserved), amount(m, m.limit) if m.limit else "none"]
            for m in meters
        ),
        ["METER", "PERIOD", "USED", "RESERVED", "LIMIT"],
    )


def claims_table(found: Iterable[Claim]) -> str:
    return table(
        (
            [
                c.resource,
                c.run_id,
                c.holder,
                str(c.generation),
                _clock(c.expires_at),
            ]
            for c in found
        ),
        ["RESOURCE", "RUN", "HOLDER", "GENERATION", "EXPIRES"],
    )


def notifications_table(found: Iterable[NotificationDelivery]) -> str:
    return table(
        (
            [d.id, d.target, d.event, d.change_id, d.state, str(d.attempts), str(d.last_status or ""), d.last_error]
            for d in found
        ),
        ["DELIVERY", "TARGET", "EVENT", "CHANGE", "STATE", "ATTEMPTS", "HTTP", "ERROR"],
    )


def questions_table(found: Iterable[Question]) -> str:
    return table(
        ([q.id, q.task_key, q.run_id, q.state + ("" if q.blocking else " (not blocking)"), q.text] for q in found),
        ["QUESTION", "TASK", "RUN", "STATE", "TEXT"],
    )
