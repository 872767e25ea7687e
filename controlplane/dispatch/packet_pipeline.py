"""The run start pipeline's Context Packet (seed 000): gather the inputs (the store, then the
canonical tree, outside any transaction), compile them (a pure function), store the packet in
the object store by hash and keep the hash on the run. The harness prompt is rendered from it."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import logging
import pathlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pygit2
from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane import metrics
from controlplane.context import import_graph, retrieval
from controlplane.context.canonical_tree import open_canonical
from controlplane.dispatch.assignments import workspace_mode
from controlplane.dispatch.own_model import CompletionModel, MeterRefused
from controlplane.domain import packet
from controlplane.services.credentials import Sealer, git_secret
from controlplane.store import events
from controlplane.store.changes import latest_changesets, tasks_by_key
from controlplane.store.engine import Store, aware
from controlplane.store.models import Change, ChangeSet, Project, Run, RunLog, Task
from controlplane.store.objects import ObjectStore, packet_key
from drover.core.model import ModelError
from drover.core.tool_specs import DEFINITIONS, TERMINAL

log = logging.getLogger("drover.router")

FAILURE_LOG_CHARS = 400_000  # read at most this much of a failed run's log
COMPACT_ABOVE_TOKENS = 6_000  # longer failure logs are compacted by a metered haiku call
GRAPHS = import_graph.Graphs(retrieval.GitTree)
"""This process's import graphs of canonical commits (each replica builds its own, in memory)."""
COMPACT_SYSTEM = (
    "You compact the log of a coding agent's failed attempt at a Task so the next attempt can "
    "learn from it. Keep what was tried, what failed and why (errors, failing tests, refused "
    "commands), and what was left undone. Plain text, at most 300 words, no preamble."
)
Compactor = Callable[[str], Awaitable[str]]


@dataclasses.dataclass(frozen=True)
class Gathered:
    """What the store knows; plain data, taken in one transaction."""

    project: str
    repo: str
    branch: str
    token: str = dataclasses.field(repr=False)  # the git secret (a token or an SSH key): never shown
    change_id: str
    task_id: str
    change: dict[str, Any]
    task: dict[str, Any]
    declared: tuple[str, ...]
    tools: tuple[str, ...]
    budget: dict[str, Any]
    stacked: tuple[dict[str, Any], ...]
    intents: tuple[dict[str, Any], ...]
    owners: tuple[dict[str, Any], ...]
    failures: tuple[dict[str, Any], ...]


def _iso(value: dt.datetime | None) -> str:
    value = aware(value)
    return value.isoformat() if value else ""


def gather(s: Session, run_id: str, sealer: Sealer | None = None) -> Gathered | None:
    """FailedPrecondition when the project's stored git credential does not open (the run fails saying so)."""
    run = s.get(Run, run_id)
    if run is None or run.state != "queued":
        return None
    task = s.get(Task, run.task_id)
    change = s.get(Change, run.change_id)
    assert task is not None and change is not None
    project = s.get(Project, change.project)
    assert project is not None
    spec = task.spec or {}
    tasks = tasks_by_key(s, change.id)
    latest = latest_changesets(s, [t.id for t in tasks.values()])
    mode = workspace_mode(task.kind, project)
    deps = [tasks[k] for k in task.depends_on]
    stacked = [
        {
            "changeset_id": cs.id,
            "task_key": t.key,
            "branch": cs.branch,
            "commit": cs.commit,
            "summary": cs.summary,
            "files": list(cs.own_files),
        }
        for t in deps
        if (cs := latest.get(t.id)) is not None
    ]
    return Gathered(
        project=project.name,
        repo=project.repo,
        branch=project.branch,
        token=git_secret(project, sealer)[1],
        change_id=change.id,
        task_id=task.id,
        change={"goal": change.goal, "criteria": list(change.criteria), "invariants": list(change.invariants)},
        task={
            "key": task.key,
            "kind": task.kind,
            "objective": task.objective,
            "resources": list(spec.get("resources", [])),
            "risk": spec.get("risk", ""),
            "files": list(spec.get("files", [])),
        },
        declared=tuple(spec.get("files", [])),
        tools=tuple(TERMINAL) if mode == "none" else tuple(DEFINITIONS),
        budget={"usd": change.budget_usd, "calls": 0},
        stacked=tuple(stacked),
        intents=tuple(_intents(task, tasks, deps, latest)),
        owners=tuple(_owners(s, project.name, task)),
        failures=tuple(_failures(s, task)),
    )


def _intents(
    task: Task, tasks: dict[str, Task], deps: list[Task], latest: dict[str, ChangeSet]
) -> list[dict[str, Any]]:
    """The intents of the Task's dependencies, and of nearby Tasks of the Change whose ChangeSets touched
    the Task's files or resources."""

    def intent(t: Task, relation: str) -> dict[str, Any]:
        cs = latest.get(t.id)
        return {
            "relation": relation,
            "task_id": t.id,
            "task_key": t.key,
            "changeset_id": cs.id if cs else None,
            "intent": (cs.summary if cs else "") or t.objective,
            "files": list(cs.own_files) if cs else [],
            "captured_at": _iso(cs.created_at) if cs else "",
        }

    spec = task.spec or {}
    mine = set(spec.get("files", [])) | set(spec.get("resources", []))
    found = [intent(t, "dependency") for t in deps]
    for t in tasks.values():
        cs = latest.get(t.id)
        if t.key != task.key and t not in deps and cs is not None and mine & set(cs.own_files):
            found.append(intent(t, "nearby"))
    return found


def _owners(s: Session, project: str, task: Task) -> list[dict[str, Any]]:
    """For each resource of the Task, the Task and ChangeSet of the project that last touched it."""
    owners = []
    for resource in (task.spec or {}).get("resources", []):
        for cs, other in s.execute(
            select(ChangeSet, Task)
            .join(Task, Task.id == ChangeSet.task_id)
            .join(Change, Change.id == ChangeSet.change_id)
            .where(Change.project == project, Task.id != task.id)
            .order_by(ChangeSet.created_at.desc(), ChangeSet.id)
            .limit(200)
        ):
            if resource in (other.spec or {}).get("resources", []):
                owners.append(
                    {
                        "resource": resource,
                        "task_id": other.id,
                        "task_key": other.key,
                        "changeset_id": cs.id,
                        "summary": cs.summary,
                        "files": list(cs.own_files),
                    }
                )
                break
    return owners


def _failures(s: Session, task: Task) -> list[dict[str, Any]]:
    """The Task's failed runs, each with the end of its log."""
    failures = []
    for r in s.scalars(select(Run).where(Run.task_id == task.id, Run.state == "failed").order_by(Run.created_at)):
        log = "".join(s.scalars(select(RunLog.text).where(RunLog.run_id == r.id).order_by(RunLog.seq, RunLog.id)))
        failures.append(
            {
                "run_id": r.id,
                "task_key": task.key,
                "attempt": r.attempt,
                "tier": r.tier,
                "outcome": r.reason,
                "reason": r.reason,
                "log": log[-FAILURE_LOG_CHARS:],
                "captured_at": _iso(r.finished_at),
            }
        )
    return failures


@dataclasses.dataclass(frozen=True)
class Located:
    """Where the canonical tree is: a repository on this machine and the commit."""

    repo_path: str
    commit: str
    captured_at: str  # the commit's time: file items were captured as of it


def locate(g: Gathered, mirrors: pathlib.Path) -> Located | None:
    if not g.repo:
        return None
    repo, commit = open_canonical(g.project, g.repo, g.branch, mirrors, g.token)
    if not commit:
        return Located(repo.path, "", "")
    when = dt.datetime.fromtimestamp(repo[commit].peel(pygit2.Commit).commit_time, dt.UTC)
    return Located(repo.path, commit, when.isoformat())


def compile_for(
    g: Gathered,
    where: Located | None,
    semantic: tuple[packet.Item, ...] = (),
    semantic_note: str = "",
    graph: import_graph.ImportGraph | None = None,
) -> packet.CompiledPacket:
    """Read the canonical tree and compile. Runs in a thread: git I/O, no transaction. With the commit's
    import `graph` the neighbours are a lookup; without, a scan; the bytes are the same."""
    items: list[packet.Item] = []
    conventions: list[packet.Item] = []
    files: tuple[str, ...] = ()
    commit = where.commit if where else ""
    captured = where.captured_at if where else ""
    if where is not None and where.commit:
        tree = retrieval.GitTree(where.repo_path, where.commit)
        files = tuple(tree.files())
        conventions = retrieval.conventions(tree, captured)
        items += retrieval.declared_items(tree, g.declared, captured)
        neighbours = retrieval.dependency_neighbours(tree, g.declared, graph)
        items += retrieval.neighbour_items(tree, neighbours, captured)
    items += retrieval.resource_owner_items(g.owners, captured)
    items += retrieval.intent_items(list(g.intents), captured)
    items += [dataclasses.replace(i, captured_at=captured) for i in semantic]
    failures = retrieval.failure_items(
        [{k: v for k, v in f.items() if k != "captured_at"} for f in g.failures], captured
    )
    return packet.compile_packet(
        packet.PacketInputs(
            change=g.change,
            task=g.task,
            canonical_commit=commit,
            file_list=files,
            conventions=tuple(conventions),
            stacked_changesets=g.stacked,
            prior_failures=tuple(failures),
            tools=g.tools,
            budget=g.budget,
            items=tuple(items),
            semantic_note=semantic_note,
        )
    )


def record(s: Session, run_id: str, context_hash: str, dropped: list[str], neighbours: str = "scan") -> None:
    run = s.get(Run, run_id)
    if run is None or run.state != "queued":
        return
    run.context_hash = context_hash
    events.add_event(
        s,
        "packet.compiled",
        change_id=run.change_id,
        task_id=run.task_id,
        run_id=run.id,
        context_hash=context_hash,
        dropped=dropped,
        neighbours=neighbours,  # "graph": from the commit's import graph; "scan": it was not built yet
    )


async def compact_log(model: CompletionModel, text: str) -> str:
    """One haiku call that compacts a failure log; "" when a meter refuses it (no request made) or it fails."""
    try:
        reply = await model.complete(
            system=[{"type": "text", "text": COMPACT_SYSTEM}],
            tools=[],
            max_tokens=1000,
            messages=[{"role": "user", "content": [{"type": "text", "text": text}]}],
        )
    except MeterRefused as refused:
        log.info("compacting a failure log: %s; keeping its tail", refused)
        return ""
    except ModelError as err:
        log.warning("compacting a failure log failed: %s", err)
        return ""
    return "".join(b.get("text", "") for b in reply.content if b.get("type") == "text")


async def compact_failures(g: Gathered, compact: Compactor | None) -> Gathered:
    """Failure logs over 6,000 tokens are compacted before compiling (a metered haiku call); without a
    compactor, or when a meter refuses it or it fails, the log's last 6,000 tokens are kept."""
    failures = []
    for failure in g.failures:
        log = failure["log"]
        if packet.estimate_tokens(log) > COMPACT_ABOVE_TOKENS:
            compacted = await compact(log) if compact is not None else ""
            log = f"[compacted log]\n{compacted}" if compacted else log[-COMPACT_ABOVE_TOKENS * 4 :]
        failures.append({**failure, "log": log})
    return dataclasses.replace(g, failures=tuple(failures))


async def prepare(
    store: Store,
    objects: ObjectStore,
    mirrors: pathlib.Path,
    run_id: str,
    recall: Any = None,
    compact: Compactor | None = None,
    sealer: Sealer | None = None,
) -> str:
    """Compile and store the run's packet; answers its hash ("" when the run is no longer queued)."""
    g = await store.run(gather, run_id, sealer)
    if g is None:
        return ""
    g = await compact_failures(g, compact)
    where = await asyncio.to_thread(locate, g, mirrors)
    semantic: tuple[packet.Item, ...] = ()
    note = ""
    if recall is not None and where is not None and where.commit:
        files = set(await asyncio.to_thread(lambda: retrieval.GitTree(where.repo_path, where.commit).files()))
        semantic, note = await recall.items(
            g.project, where.repo_path, where.commit, f"{g.change['goal']}\n{g.task['objective']}", files
        )
    # The commit's import graph, or None while a thread builds it (this packet scans instead).
    graph = GRAPHS.ready(where.repo_path, where.commit) if where is not None and where.commit else None
    began = time.perf_counter()
    compiled = await asyncio.to_thread(compile_for, g, where, semantic, note, graph)
    metrics.PACKET_COMPILE.observe(time.perf_counter() - began)
    key = packet_key(g.project, g.change_id, g.task_id, compiled.sha256)
    await asyncio.to_thread(objects.put, key, compiled.data)  # off the loop (a database round trip), before the row
    await store.run(record, run_id, compiled.sha256, list(compiled.dropped), "graph" if graph else "scan")
    return compiled.sha256


def load(objects: ObjectStore, project: str, change_id: str, task_id: str, context_hash: str) -> dict[str, Any]:
    return json.loads(objects.get(packet_key(project, change_id, task_id, context_hash)))
