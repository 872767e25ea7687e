"""Recovery after a stop, as methods of `drover.Client`: raise the meter that stopped work, run a
failed or stopped Task again, or amend a running Change with more Tasks and edges (docs/operations.md,
"Recovery after a stop")."""

from __future__ import annotations

import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

from drover.admin import Metadata, _call
from drover.models import Change, MeterUsage, from_proto
from drover.task_messages import task_message
from drover.v1 import change_pb2, operations_pb2


def amendment_request(
    change_id: str, tasks: Sequence[Mapping[str, Any]], edges: Sequence[Mapping[str, str] | tuple[str, str]]
) -> change_pb2.AmendChangeRequest:
    """The AmendChange request of Tasks as `submit_change` takes them and edges (mappings or pairs)."""
    pairs = [(e["task"], e["depends_on"]) if isinstance(e, Mapping) else tuple(e) for e in edges]
    return change_pb2.AmendChangeRequest(
        change_id=change_id,
        tasks=[task_message(t, i) for i, t in enumerate(tasks)],
        edges=[change_pb2.TaskEdge(task=k, depends_on=d) for k, d in pairs],
    )


class Recovery:
    """Mixed into `drover.Client`, whose stubs and metadata these calls use."""

    _changes: Any
    _ops: Any
    _metadata: Metadata

    def retry_task(self, task_id: str, tier: str = "") -> Change:
        """Run a failed or stopped Task again (at `tier`, a configured tier, when named); answers its Change."""
        request = change_pb2.RetryTaskRequest(task_id=task_id, tier=tier)
        return from_proto(_call(self._changes.RetryTask, request, self._metadata), Change)

    def amend_change(
        self,
        change_id: str,
        tasks: Sequence[Mapping[str, Any]] = (),
        edges: Sequence[Mapping[str, str] | tuple[str, str]] = (),
    ) -> Change:
        """Add Tasks (dicts as `submit_change` takes) and edges (`{"task": K, "depends_on": D}` or
        `(K, D)`: K depends on D) to an open or running Change; answers the Change."""
        request = amendment_request(change_id, tasks, edges)
        return from_proto(_call(self._changes.AmendChange, request, self._metadata), Change)

    def amend_change_file(self, change_id: str, path: str | pathlib.Path) -> Change:
        """Amend with an amendment file (tasks:, edges:; see drover.changefile.load_amendment)."""
        from drover import changefile  # YAML is read by this call only

        data = changefile.load_amendment(path)
        return self.amend_change(change_id, data.get("tasks") or [], data.get("edges") or [])

    def raise_meter(self, meter: str, limit: float, name: str = "") -> MeterUsage:
        """Raise a meter in its current window: provider_month, agent_calls_day or classifier_calls_day
        (the fleet's), project or user (the one `name`d); `limit` in USD, or calls for a calls meter.
        The Tasks it stopped run again."""
        request = operations_pb2.RaiseMeterRequest(meter=meter, name=name, limit=limit)
        return from_proto(_call(self._ops.RaiseMeter, request, self._metadata), MeterUsage)
