"""Domain errors. One base class; `grpc_code` maps each to a gRPC status (STYLE.md row 6)."""

from __future__ import annotations

import secrets


class DroverError(Exception):
    """Base of every error the control plane reports to a caller."""

    code = "INTERNAL"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        self.field = field
        super().__init__(f"{field}: {message}" if field else message)


class InvalidArgument(DroverError):
    code = "INVALID_ARGUMENT"


class NotFound(DroverError):
    code = "NOT_FOUND"


class AlreadyExists(DroverError):
    code = "ALREADY_EXISTS"


class FailedPrecondition(DroverError):
    code = "FAILED_PRECONDITION"


class Unauthenticated(DroverError):
    code = "UNAUTHENTICATED"


class PermissionDenied(DroverError):
    code = "PERMISSION_DENIED"


class ResourceExhausted(DroverError):
    code = "RESOURCE_EXHAUSTED"


def error_id() -> str:
    """An id for an unexpected error: the caller gets it, the log has it with the traceback."""
    return f"err_{secrets.token_hex(6)}"
