"""A run's full tool inputs and outputs (model reasoning never goes there).

Each tool-stream message is stored once, as it came, in `tool_log_entries`: appending costs the size of
the message, however long the run. The run's tool log is read from its entries, and its document is
written to the object store at context/<project>/<change>/<task>/tools-<run>.json when the run ends
(`write`, from every end: `finish_run` and the result or rest of output of a run that was ended here
first)."""

from __future__ import annotations

import json
import logging
from typing import Any, cast

from sqlalchemy import Table, insert, select
from sqlalchemy.orm import Session

from controlplane.store.models import Change, Run, ToolLogEntry, utcnow
from controlplane.store.objects import ObjectStore, tool_log_key

log = logging.getLogger("drover.toollog")
ENTRIES = cast(Table, ToolLogEntry.__table__)


def record(s: Session, run: Run, seq: int, text: str) -> None:
    """Keep one tool-stream message: tool-call records as JSON lines, each with an "id"; a large record
    reaches the control plane in pieces over several messages. The caller applies each seq once."""
    # A Core insert: no one reads the row back in this transaction before the run ends.
    s.execute(insert(ENTRIES).values(run_id=run.id, seq=seq, text=text, created_at=utcnow()))


def read(s: Session, objects: ObjectStore, run: Run) -> dict[str, Any] | None:
    """The run's tool log as its document: {"run_id", "calls" (by first appearance of each id, a later
    record of an id replacing it), "pending" ({seq: the unfinished line} or {})}; None when the run
    recorded no tool call. A line that is not JSON is logged and skipped rather than failing the run."""
    rows = s.execute(select(ENTRIES.c.seq, ENTRIES.c.text).where(ENTRIES.c.run_id == run.id).order_by(ENTRIES.c.id))
    texts: dict[int, str] = {}
    for seq, text in rows:
        texts[seq] = text  # a seq kept twice (a run numbered afresh) counts once, with its last text
    if not texts:
        return None
    path = _key(s, run)
    document: dict[str, Any] = {"run_id": run.id, "calls": []}
    carried = ""
    if objects.exists(path):  # written at an earlier end, or (upgraded mid-run) by a version before entries
        earlier = json.loads(objects.get(path))
        document["calls"] = earlier["calls"]
        older = {int(k): v for k, v in earlier.get("pending", {}).items() if int(k) < min(texts)}
        carried = "".join(older[k] for k in sorted(older))
    joined = carried + "".join(texts[k] for k in sorted(texts))
    whole, _, rest = joined.rpartition("\n")
    document["pending"] = {str(max(texts)): rest} if rest else {}
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
    return document


def write(s: Session, objects: ObjectStore, run: Run) -> None:
    """Write the ended run's tool-log document, once (nothing when it recorded no tool call). Written
    inside the ending transaction: a replay after a crash before the commit writes the same again."""
    document = read(s, objects, run)
    if document is not None:
        objects.put(_key(s, run), json.dumps(document, ensure_ascii=False, indent=1).encode())


def _key(s: Session, run: Run) -> str:
    change = s.get(Change, run.change_id)
    assert change is not None
    return tool_log_key(change.project, change.id, run.task_id, run.id)
