"""A run's full tool inputs and outputs, kept in the object store at
context/<project>/<change>/<task>/tools-<run>.json (model reasoning never goes there)."""

from __future__ import annotations

import json

from sqlalchemy.orm import Session

from controlplane.models import Change, Run
from controlplane.objectstore import DirectoryStore


def key(project: str, change_id: str, task_id: str, run_id: str) -> str:
    return f"context/{project}/{change_id}/{task_id}/tools-{run_id}.json"


def record(s: Session, objects: DirectoryStore, run: Run, lines: str) -> None:
    """Merge tool-call records (JSON lines, each with an "id") into the run's file. A record seen
    again (a replay) replaces itself, so applying a message twice changes nothing."""
    change = s.get(Change, run.change_id)
    assert change is not None
    path = key(change.project, change.id, run.task_id, run.id)
    document = json.loads(objects.get(path)) if objects.exists(path) else {"run_id": run.id, "calls": []}
    index = {call["id"]: i for i, call in enumerate(document["calls"])}
    for line in lines.splitlines():
        if not line.strip():
            continue
        call = json.loads(line)
        if call.get("id") in index:
            document["calls"][index[call["id"]]] = call
        else:
            index[call.get("id")] = len(document["calls"])
            document["calls"].append(call)
    objects.put(path, json.dumps(document, ensure_ascii=False, indent=1).encode())
