"""Ids for unexpected errors. The errors themselves are the classes of `drover.errors`, the one hierarchy
the SDK raises too; `controlplane.api.status` reports each as its gRPC status, with its field."""

from __future__ import annotations

import secrets


def error_id() -> str:
    """An id for an unexpected error: the caller gets it, the log has it with the traceback."""
    return f"err_{secrets.token_hex(6)}"
