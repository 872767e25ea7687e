"""Recovery after a stop, as methods of `drover.Client`: raise the meter that stopped work, or run a
failed or stopped Task again (docs/operations.md, "Recovery after a stop")."""

from __future__ import annotations

from typing import Any

from drover.admin import Metadata, _call
from drover.models import Change, MeterUsage, from_proto
from drover.v1 import change_pb2, operations_pb2


class Recovery:
    """Mixed into `drover.Client`, whose stubs and metadata these calls use."""

    _changes: Any
    _ops: Any
    _metadata: Metadata

    def retry_task(self, task_id: str, tier: str = "") -> Change:
        """Run a failed or stopped Task again (at `tier`, a configured tier, when named); answers its Change."""
        request = change_pb2.RetryTaskRequest(task_id=task_id, tier=tier)
        return from_proto(_call(self._changes.RetryTask, request, self._metadata), Change)

    def raise_meter(self, meter: str, limit: float, name: str = "") -> MeterUsage:
        """Raise a meter in its current window: provider_month, agent_calls_day or classifier_calls_day
        (the fleet's), project or user (the one `name`d); `limit` in USD, or calls for a calls meter.
        The Tasks it stopped run again."""
        request = operations_pb2.RaiseMeterRequest(meter=meter, name=name, limit=limit)
        return from_proto(_call(self._ops.RaiseMeter, request, self._metadata), MeterUsage)
