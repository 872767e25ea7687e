"""The Context Packet compiler (seed 000): a pure function from loaded inputs to canonical bytes.

No I/O, no clock, no randomness: `compile_packet` orders the retrieved items, trims them to the
token limit and serialises the packet as canonical JSON (sorted keys, no spaces, UTF-8, no NaN).
The same inputs give the same bytes and the same sha256 in any process. `controlplane.context.retrieval`
loads the inputs; `render_prompt` turns a packet, and nothing else, into the harness prompt.

Tokens are estimated as ceil(UTF-8 bytes / 4), so a packet's size is ceil(len(its bytes) / 4).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from drover.errors import InvalidArgument

PACKET_VERSION = 1
LIMIT_TOKENS = 12_000
FILE_LIST_MAX_BYTES = 8_000  # about 2,000 tokens of paths; the rest is counted and left to list_files

# Retrieval order (seed 000): an item's place in this tuple breaks ties between equal priorities.
SOURCES = (
    "declared_file",
    "dependency_neighbour",
    "resource_owner",
    "dependency_intent",
    "nearby_intent",
    "prior_failure",
    "semantic",
)
CONVENTION = "convention"  # the source of convention Items: fixed, never retrieved or dropped
_SOURCE_ORDER = {s: i for i, s in enumerate(SOURCES)}


@dataclasses.dataclass(frozen=True)
class Item:
    """One piece of context with its provenance. `priority`: lower is more important.
    `source_version`: the git blob id of a file, else the ChangeSet (or run, or Task) id it came
    from. `captured_at`: an ISO time given by the caller. `score`: similarity, semantic items only."""

    item_id: str
    source: str
    priority: int
    source_version: str
    captured_at: str
    title: str
    text: str
    score: float | None = None


@dataclasses.dataclass(frozen=True)
class PacketInputs:
    """Everything a packet is compiled from, already loaded.

    change: {goal, criteria, invariants}; task: {key, kind, objective, resources, risk, files?};
    file_list: every path at `canonical_commit`; conventions: Items with source "convention";
    stacked_changesets: JSON-able dicts, in merge order; prior_failures: this Task's failed runs
    as Items with source "prior_failure" (compacted by the caller), always kept; tools: allowed
    tool names; budget: {usd, calls}; items: retrieved Items (any of SOURCES), trimmed to fit;
    semantic_note: why semantic items are absent or few, "" when nothing to say."""

    change: Mapping[str, Any]
    task: Mapping[str, Any]
    canonical_commit: str
    file_list: tuple[str, ...] = ()
    conventions: tuple[Item, ...] = ()
    stacked_changesets: tuple[Mapping[str, Any], ...] = ()
    prior_failures: tuple[Item, ...] = ()
    tools: tuple[str, ...] = ()
    budget: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    items: tuple[Item, ...] = ()
    semantic_note: str = ""


@dataclasses.dataclass(frozen=True)
class CompiledPacket:
    """`data`: the canonical JSON bytes; `sha256`: their hex digest; `packet`: the same as a dict;
    `dropped`: ids of the items left out to fit, in the order they were dropped; `tokens`: the
    estimate of `data` (over the limit only when the fixed part alone is)."""

    data: bytes
    sha256: str
    packet: dict[str, Any]
    dropped: tuple[str, ...]
    tokens: int


def estimate_tokens(text: str | bytes) -> int:
    """Deterministic token estimate: one token per four UTF-8 bytes, rounded up."""
    return _tokens(len(text if isinstance(text, bytes) else text.encode("utf-8")))


def _tokens(size: int) -> int:
    return (size + 3) // 4


def canonical_json(value: Any) -> bytes:
    """The one serialisation of a packet: sorted keys, no whitespace, UTF-8, NaN refused."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def compile_packet(inputs: PacketInputs, limit_tokens: int = LIMIT_TOKENS) -> CompiledPacket:
    """Order, trim and serialise. Items sort by (priority, retrieval order of source, item_id); an
    item_id seen twice keeps its first place. Over the limit, semantic items go first (lowest
    score first), then the remaining items from the least important up. The fixed part (Change,
    Task, conventions, stacked ChangeSets, prior failures, bounded file list, tools, budget) is
    always kept.

    Packet keys: packet_version, limit_tokens, canonical_commit, change, task, conventions,
    stacked_changesets, prior_failures, file_list {total, paths, omitted, note}, tools, budget,
    semantic_note, items (in order), dropped (ids, in the order they went)."""
    if limit_tokens <= 0:
        raise InvalidArgument("must be positive", field="limit_tokens")
    _check_items(inputs.conventions, {CONVENTION}, "conventions")
    _check_items(inputs.prior_failures, {"prior_failure"}, "prior_failures")
    _check_items(inputs.items, set(SOURCES), "items")
    items = _ordered(inputs.items)
    packet = _fixed(inputs, limit_tokens)
    item_sizes = [len(canonical_json(_item(i))) for i in items]
    kept, kept_bytes = len(items), sum(item_sizes)
    dropped: list[str] = []
    dropped_bytes = 0
    fixed_bytes = len(canonical_json(packet))  # with "items": [] and "dropped": []

    def size() -> int:  # exact: each array adds its elements and a comma between two of them
        return fixed_bytes + kept_bytes + max(kept - 1, 0) + dropped_bytes + max(len(dropped) - 1, 0)

    gone: set[int] = set()
    for index in _drop_order(items):
        if _tokens(size()) <= limit_tokens:
            break
        gone.add(index)
        kept, kept_bytes = kept - 1, kept_bytes - item_sizes[index]
        dropped.append(items[index].item_id)
        dropped_bytes += len(canonical_json(items[index].item_id))
    packet["items"] = [_item(i) for n, i in enumerate(items) if n not in gone]
    packet["dropped"] = dropped
    data = canonical_json(packet)
    # the dict handed back is the stored bytes parsed, so rendering it equals rendering the stored packet
    return CompiledPacket(
        data=data,
        sha256=hashlib.sha256(data).hexdigest(),
        packet=json.loads(data),
        dropped=tuple(dropped),
        tokens=estimate_tokens(data),
    )


def _check_items(items: Iterable[Item], sources: set[str], field: str) -> None:
    for item in items:
        if not isinstance(item, Item):
            raise InvalidArgument(f"expected an Item, got {type(item).__name__}", field=field)
        if item.source not in sources:
            raise InvalidArgument(
                f"{item.item_id}: source {item.source!r} is not one of {sorted(sources)}", field=field
            )


def _ordered(items: Iterable[Item]) -> list[Item]:
    seen: set[str] = set()
    out = []
    for item in sorted(items, key=_sort_key):
        if item.item_id not in seen:
            seen.add(item.item_id)
            out.append(item)
    return out


def _sort_key(item: Item) -> tuple[int, int, str]:
    return (item.priority, _SOURCE_ORDER[item.source], item.item_id)


def _drop_order(items: list[Item]) -> list[int]:
    """Indexes (into the sorted `items`) in the order they go: semantic by ascending score, then
    everything else from the end of the order."""
    backwards = list(reversed(range(len(items))))
    semantic = sorted(
        (n for n in backwards if items[n].source == "semantic"),
        key=lambda n: items[n].score or 0.0,
    )
    return semantic + [n for n in backwards if items[n].source != "semantic"]


def _item(item: Item) -> dict[str, Any]:
    return dataclasses.asdict(item)


def _fixed(inputs: PacketInputs, limit_tokens: int) -> dict[str, Any]:
    change, task = inputs.change, inputs.task
    for field, value, keys in (("change", change, ("goal",)), ("task", task, ("key", "kind", "objective"))):
        for key in keys:
            if key not in value:
                raise InvalidArgument(f"missing {key!r}", field=field)
    return {
        "packet_version": PACKET_VERSION,
        "limit_tokens": limit_tokens,
        "canonical_commit": inputs.canonical_commit,
        "change": {
            "goal": change["goal"],
            "criteria": list(change.get("criteria") or ()),
            "invariants": list(change.get("invariants") or ()),
        },
        "task": {
            "key": task["key"],
            "kind": task["kind"],
            "objective": task["objective"],
            "resources": list(task.get("resources") or ()),
            "risk": task.get("risk", ""),
            "files": list(task.get("files") or ()),
        },
        "conventions": [_item(i) for i in inputs.conventions],
        "stacked_changesets": [dict(c) for c in inputs.stacked_changesets],
        "prior_failures": [_item(i) for i in inputs.prior_failures],
        "file_list": file_list_summary(inputs.file_list, task.get("files") or ()),
        "tools": list(inputs.tools),
        "budget": dict(inputs.budget),
        "semantic_note": inputs.semantic_note,
        "items": [],
        "dropped": [],
    }


def file_list_summary(paths: Iterable[str], declared: Iterable[str] = ()) -> dict[str, Any]:
    """The repository file list, bounded to FILE_LIST_MAX_BYTES of paths: files in the directories
    of the declared files first, then the others in path order; shown sorted, the rest counted."""
    every = sorted(set(paths))
    near = {p.rpartition("/")[0] for p in declared}
    close = [p.rpartition("/")[0] in near for p in every]
    ordered = [p for p, c in zip(every, close, strict=True) if c] + [
        p for p, c in zip(every, close, strict=True) if not c
    ]
    shown: list[str] = []
    used = 0
    for path in ordered:
        used += len(path.encode("utf-8")) + 3  # quotes and comma
        if used > FILE_LIST_MAX_BYTES:
            break
        shown.append(path)
    omitted = len(every) - len(shown)
    note = f"{omitted} more files not shown; list_files lists them" if omitted else ""
    return {"total": len(every), "paths": sorted(shown), "omitted": omitted, "note": note}


def render_prompt(packet: Mapping[str, Any]) -> str:
    """The harness prompt, rendered from the packet and nothing else."""
    change, task = packet["change"], packet["task"]
    out = [f"# Change: {change['goal']}"]
    if change["criteria"]:
        out += ["", "Acceptance criteria:", *(f"- {c}" for c in change["criteria"])]
    if change["invariants"]:
        out += ["", "Invariants (must stay true):", *(f"- {c}" for c in change["invariants"])]
    out += ["", f"# Your Task: {task['key']} ({task['kind']}, risk {task['risk'] or 'unstated'})", task["objective"]]
    if task["resources"]:
        out += ["", "Resources: " + ", ".join(map(str, task["resources"]))]
    if task["files"]:
        out += ["", "Declared files:", *(f"- {f}" for f in task["files"])]
    budget = ", ".join(f"{k} {v}" for k, v in sorted(packet["budget"].items())) or "unstated"
    out += ["", f"Tools: {', '.join(packet['tools']) or 'none'}", f"Budget: {budget}"]
    if packet["conventions"]:
        out += ["", "# Project conventions"] + [_block(i) for i in packet["conventions"]]
    if packet["stacked_changesets"]:
        out += ["", "# Stacked ChangeSets (merged into your starting tree, in this order)"]
        out += ["- " + json.dumps(c, sort_keys=True, ensure_ascii=False) for c in packet["stacked_changesets"]]
    if packet["prior_failures"]:
        out += ["", "# Prior failures of this Task"] + [_block(i) for i in packet["prior_failures"]]
    out += [
        "",
        "# Context (declared files, dependency neighbours, resource owners, intents and failures, semantic memory)",
    ] + [_block(i) for i in packet["items"]]
    if packet["dropped"]:
        out += [
            "",
            f"Left out to fit {packet['limit_tokens']} tokens (read them if you need them): "
            + ", ".join(packet["dropped"]),
        ]
    if packet["semantic_note"]:
        out += ["", f"Semantic memory: {packet['semantic_note']}"]
    files = packet["file_list"]
    out += ["", f"# Repository at {packet['canonical_commit']}: {files['total']} files", *files["paths"]]
    if files["note"]:
        out.append(files["note"])
    return "\n".join(out) + "\n"


STANDING = (
    "You work unattended on one Task of a Change in this git repository; nobody answers questions "
    "unless a tool for asking is offered. Make the smallest change that meets the Task's objective and the "
    "Change's criteria, and check it with the project's own tests. Leave your changes in the working tree: "
    "do not commit, push or switch branches (Drover commits the workspace as the Task's ChangeSet). "
    "End your last turn with a short summary of what you changed and how you checked it."
)
"""What every external runtime is told first (seed 003 "Claude Code": CLAUDE.md's standing instructions)."""


def render_instructions(packet: Mapping[str, Any]) -> str:
    """An external runtime's standing instructions (CLAUDE.md, AGENTS.md), from the packet only: what
    holds for the whole session, where the prompt is the Task itself."""
    change, task = packet["change"], packet["task"]
    out = ["# Drover", "", STANDING, "", f"Change: {change['goal']}", f"Task: {task['key']} ({task['kind']})"]
    if change["invariants"]:
        out += ["", "Invariants (must stay true):", *(f"- {c}" for c in change["invariants"])]
    if packet["conventions"]:
        out += ["", "# Project conventions"] + [_block(i) for i in packet["conventions"]]
    return "\n".join(out) + "\n"


def _block(item: Mapping[str, Any]) -> str:
    text = item["text"][:-1] if item["text"].endswith("\n") else item["text"]
    fence = "```"
    while fence in text:
        fence += "`"
    score = f" | score: {item['score']}" if item["score"] is not None else ""
    return (
        f"\n## {item['title']}\nitem: {item['item_id']} | source: {item['source']} | "
        f"version: {item['source_version']} | captured: {item['captured_at']}{score}\n"
        f"{fence}\n{text}\n{fence}"
    )
