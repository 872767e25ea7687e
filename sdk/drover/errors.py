"""Typed SDK errors, mapped from gRPC status codes (STYLE.md row 6)."""

from __future__ import annotations

import grpc


class DroverError(Exception):
    """Base of every error the SDK raises. `code` is the gRPC status name."""

    code = "UNKNOWN"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


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


class Unavailable(DroverError):
    code = "UNAVAILABLE"


_BY_CODE = {
    cls.code: cls
    for cls in (
        InvalidArgument,
        NotFound,
        AlreadyExists,
        FailedPrecondition,
        Unauthenticated,
        PermissionDenied,
        ResourceExhausted,
        Unavailable,
    )
}


def from_rpc_error(err: grpc.RpcError) -> DroverError:
    code = err.code() if hasattr(err, "code") else None
    name = code.name if code is not None else "UNKNOWN"
    details = err.details() if hasattr(err, "details") else str(err)
    error = _BY_CODE.get(name, DroverError)(details or name)
    if type(error) is DroverError:
        error.code = name
    return error
