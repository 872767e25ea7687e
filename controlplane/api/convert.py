"""Rows to protobuf messages and back. Protobuf stops here and in the servicers (STYLE.md row 3)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from typing import Any

from google.protobuf import struct_pb2, timestamp_pb2

from controlplane.dispatch import assignments
from controlplane.domain import graph, resources
from controlplane.services import changesets, run_lifecycle
from controlplane.store import models
from controlplane.store.engine import aware
from drover.v1 import agent_pb2, change_pb2, types_pb2


def ts(value: dt.datetime | None) -> timestamp_pb2.Timestamp | None:
    value = aware(value)
    if value is None:
        return None
    out = timestamp_pb2.Timestamp()
    out.FromDatetime(value)
    return out


def change_spec(req: change_pb2.SubmitChangeRequest) -> graph.ChangeSpec:
    return graph.ChangeSpec(
        project=req.project,
        goal=req.goal,
        criteria=tuple(req.criteria),
        invariants=tuple(req.invariants),
        budget_usd=req.budget_usd,
        tasks=tuple(
            graph.TaskSpec(
                key=t.key,
                kind=t.kind,
                objective=t.objective,
                depends_on=tuple(t.depends_on),
                command=tuple(t.command),
                env=dict(t.env),
                timeout_seconds=t.timeout_seconds,
                traits=task_traits(t),
                workspace_files=dict(t.workspace_files),
                workdir=t.workdir,
            )
            for t in req.tasks
        ),
    )


def task_traits(t: types_pb2.Task) -> dict[str, Any]:
    """The routing fields of a submitted Task, kept only when set; files and resources normalised (the
    request was checked, so each one normalises)."""
    traits: dict[str, Any] = {
        "files": _normalised(t.files),
        "resources": _normalised(t.resources),
        "size": t.size,
        "complexity": t.complexity,
        "risk": t.risk,
        "required_capabilities": list(t.required_capabilities),
        "flags": dict(t.flags),
        "runtime": t.runtime,
    }
    return {k: v for k, v in traits.items() if v}


def _normalised(entries: Any) -> list[str]:
    return list(dict.fromkeys(resources.normalise(e) for e in entries))


def task(row: models.Task, latest_run: str = "") -> types_pb2.Task:
    spec = row.spec or {}
    return types_pb2.Task(
        id=row.id,
        key=row.key,
        kind=row.kind,
        objective=row.objective,
        depends_on=row.depends_on,
        command=row.command,
        env=row.env,
        timeout_seconds=row.timeout_seconds,
        status=row.status,
        reason=row.reason,
        latest_run_id=latest_run,
        files=spec.get("files", []),
        resources=spec.get("resources", []),
        size=spec.get("size", ""),
        complexity=spec.get("complexity", ""),
        risk=spec.get("risk", ""),
        required_capabilities=spec.get("required_capabilities", []),
        flags=spec.get("flags", {}),
        runtime="" if row.command else spec.get("runtime") or "harness",
        workspace_files=spec.get("workspace_files", {}),
        workdir=spec.get("workdir", ""),
    )


def change(row: models.Change, tasks: list[types_pb2.Task]) -> types_pb2.Change:
    return types_pb2.Change(
        id=row.id,
        project=row.project,
        goal=row.goal,
        criteria=row.criteria,
        invariants=row.invariants,
        budget_usd=row.budget_usd,
        tasks=tasks,
        status=row.status,
        submitted_by=row.submitted_by,
        created_at=ts(row.created_at),
        finished_at=ts(row.finished_at),
        candidate_branch=row.candidate_branch,
        candidate_commit=row.candidate_commit,
        reason=row.reason,
    )


def changeset(row: models.ChangeSet, task_key: str = "") -> types_pb2.ChangeSet:
    """Every field of the message the row holds under the same name (the message is the list)."""
    same = {f.name for f in types_pb2.ChangeSet.DESCRIPTOR.fields} - {"task_key", "created_at"}
    return types_pb2.ChangeSet(
        **{name: getattr(row, name) for name in same}, task_key=task_key, created_at=ts(row.created_at)
    )


def published(request: agent_pb2.PublishChangeSetRequest) -> changesets.Published:
    """The request's fields by `Published`'s names (repeated ones as tuples); the intent from its JSON."""
    fields = {f.name for f in dataclasses.fields(changesets.Published)} - {"intent"}
    values = {name: getattr(request, name) for name in fields}
    decoded: dict[str, Any] = {name: v if isinstance(v, str) else tuple(v) for name, v in values.items()}
    return changesets.Published(**decoded, intent=json.loads(request.intent_json) if request.intent_json else {})


def run(row: models.Run, task_key: str = "", project: str = "", calls: int = 0, cost: int = 0) -> types_pb2.Run:
    return types_pb2.Run(
        id=row.id,
        change_id=row.change_id,
        task_id=row.task_id,
        task_key=task_key,
        state=row.state,
        agent=row.agent,
        attempt=row.attempt,
        exit_code=row.exit_code,
        reason=row.reason,
        created_at=ts(row.created_at),
        started_at=ts(row.started_at),
        finished_at=ts(row.finished_at),
        output_bytes=row.output_bytes,
        output_truncated=row.output_truncated,
        cancel_requested=row.cancel_requested,
        project=project,
        driver=row.driver,
        tier=row.tier,
        model=row.model,
        outcome=row.reason if row.driver in graph.RUNTIMES and row.finished_at else "",
        model_calls=calls,
        cost_micros=cost,
        context_hash=row.context_hash,
        branch=row.branch,
        setup_cached=row.setup_cached,
        setup_seconds=row.setup_seconds,
        last_activity_at=ts(row.last_activity_at),
        has_result=row.result_success is not None,
        result_text=row.result_text or "",
        result_turns=row.result_turns or 0,
        result_cost_micros=row.result_cost_micros or 0,
        result_success=bool(row.result_success),
        compactions=row.compactions or 0,
    )


def agent(row: models.Agent, active: int) -> types_pb2.Agent:
    return types_pb2.Agent(
        name=row.name,
        labels=row.labels,
        capacity=row.capacity,
        active_runs=active,
        connected=row.connected,
        draining=row.draining,
        drivers=row.drivers,
        version=row.version,
        connected_at=ts(row.connected_at),
        disconnected_at=ts(row.disconnected_at),
    )


def event(row: models.Event) -> types_pb2.Event:
    data = struct_pb2.Struct()
    data.update(_plain(row.data))
    return types_pb2.Event(
        id=row.id,
        kind=row.kind,
        change_id=row.change_id,
        task_id=row.task_id,
        run_id=row.run_id,
        agent=row.agent,
        data=data,
        created_at=ts(row.created_at),
    )


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def log_line(row: models.RunLog) -> types_pb2.LogLine:
    return types_pb2.LogLine(
        run_id=row.run_id, seq=row.seq, stream=row.stream, text=row.text, created_at=ts(row.created_at)
    )


def run_message(msg: agent_pb2.RunMessage) -> run_lifecycle.RunMessage:
    body = msg.WhichOneof("body") or ""
    base = run_lifecycle.RunMessage(run_id=msg.run_id, seq=msg.seq, kind=body)
    if body == "refused":
        return dataclasses.replace(base, reason=msg.refused.reason)
    if body == "log":
        return dataclasses.replace(base, stream=msg.log.stream, text=msg.log.text)
    if body == "input_received":
        return dataclasses.replace(base, input_seq=msg.input_received.input_seq)
    if body == "finished":
        f = msg.finished
        return dataclasses.replace(
            base,
            status=f.status,
            exit_code=f.exit_code,
            reason=f.reason,
            error=f.error,
            parked=f.parked,
            session_state=f.session_state,
            setup_seconds=f.setup_seconds,
            setup_cached=f.setup_cached,
            result=(
                run_lifecycle.SessionResult(
                    text=f.result.text,
                    turns=f.result.turns,
                    cost_micros=f.result.cost_micros,
                    success=f.result.success,
                    compactions=f.result.compactions,
                )
                if f.HasField("result")
                else None
            ),
        )
    return base


def run_input(row: models.RunInput) -> types_pb2.RunInput:
    return types_pb2.RunInput(
        id=row.id,
        run_id=row.run_id,
        seq=row.seq,
        kind=row.kind,
        text=row.text,
        state=row.state,
        sent_by=row.sent_by,
        created_at=ts(row.created_at),
        received_at=ts(row.received_at),
        question_id=row.question_id,
    )


def question(row: models.Question, task_key: str = "") -> types_pb2.Question:
    return types_pb2.Question(
        id=row.id,
        run_id=row.run_id,
        change_id=row.change_id,
        task_key=task_key,
        text=row.text,
        blocking=row.blocking,
        state=row.state,
        answer=row.answer,
        answered_by=row.answered_by,
        created_at=ts(row.created_at),
        answered_at=ts(row.answered_at),
    )


def receipt(row: models.DecisionReceipt, task_key: str = "") -> types_pb2.DecisionReceipt:
    data = struct_pb2.Struct()
    data.update(_plain(row.data or {}))
    return types_pb2.DecisionReceipt(
        run_id=row.run_id,
        task_id=row.task_id,
        task_key=task_key,
        tier=row.tier,
        data=data,
        created_at=ts(row.created_at),
    )


def assignment(a: assignments.Assignment) -> agent_pb2.RunAssignment:
    """A run's assignment on the wire."""
    out = agent_pb2.RunAssignment(
        run_id=a.run_id,
        change_id=a.change_id,
        task_id=a.task_id,
        task_key=a.task_key,
        kind=a.kind,
        driver=a.driver,
        attempt=a.attempt,
        secret_env=dict(a.secret_env),
        tier=a.tier,
        model=a.model,
        base_url=a.base_url,
        context_hash=a.context_hash,
        resume=a.resume,
        workspace=agent_pb2.WorkspaceSpec(
            project=a.project,
            repo=a.repo,
            branch=a.branch,
            stack=[agent_pb2.StackedChangeSet(**dataclasses.asdict(item)) for item in a.stack],
            setup=a.preparation.setup,
            setup_network=a.preparation.setup_network,
            env=dict(a.preparation.env),
            git_name=a.preparation.git_name,
            git_email=a.preparation.git_email,
            task_branch=a.preparation.task_branch,
            cache_key_files=a.preparation.cache_key_files,
        ),
        command=agent_pb2.CommandSpec(timeout_seconds=a.timeout_seconds),
    )
    if a.output_limit_bytes > 0:  # agentd stops recording a run's output past what the control plane keeps
        out.limits["output_bytes"] = a.output_limit_bytes
    if a.command is not None:
        out.command.argv.extend(a.command.argv)
        out.command.env.update(a.command.env)
        out.command.network = a.command.network
        out.command.files.update(a.command.files)
        out.command.workdir = a.command.workdir
    if a.harness is not None:
        out.harness.CopyFrom(agent_pb2.HarnessSpec(**dataclasses.asdict(a.harness)))
    return out
