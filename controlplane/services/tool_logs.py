"""A run's full tool inputs and outputs, kept in the object store at
context/<project>/<change>/<task>/tools-<run>.json (model reasoning never goes there)."""

from __future__ import annotations

import json
import logging
from typing import Any

from sqlalchemy.orm import Session

from controlplane.store.models import Change, Run
from controlplane.store.objects import ObjectStore, tool_log_key

log = logging.getLogger("drover.toollog")


def record(s: Session, objects: ObjectStore, run: Run, seq: int, text: str) -> None:
    """Merge tool-call records (JSON lines, each with an "id") into the run's file.

    A large record reaches the control plane in pieces over several messages, so the text of each
    message is kept under its seq until its line is whole: applying a message twice, or a replay after
    a crash between this write and the commit, changes nothing. A line that is not JSON is logged and
    skipped rather than stopping the agent's stream."""
    change = s.get(Change, run.change_id)
    assert change is not None
    path = tool_log_key(change.project, change.id, run.task_id, run.id)
    document: dict[str, Any] = (
        json.loads(objects.get(path)) if objects.exists(path) else {"run_id": run.id, "calls": []}
    )
    pending = document.setdefault("pending", {})
    pending[str(seq)] = text
    joined = "".join(pending[k] for k in sorted(pending, key=int))
    whole, _, rest = joined.rpartition("\n")
    document["pending"] = {str(seq): rest} if rest else {}
    index = {call["id"]: i for i, call in enumerate(document["calls"])}
    for line in whole.splitlines() if whole else ():
        if not line.strip():
            continue
        try:
            call = json.loads(line)
        except ValueError:
            log.error("run %s: a tool record is not JSON; skipped", run.id)
            continue
        if call.get("id") in index:
            document["calls"][index[call["id"]]] = call
        else:
            index[call.get("id")] = len(document["calls"])
            document["calls"].append(call)
    objects.put(path, json.dumps(document, ensure_ascii=False, indent=1).encode())
