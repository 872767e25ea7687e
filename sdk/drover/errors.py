"""The one error hierarchy of Drover (STYLE.md row 6): the control plane raises these and reports each
as its gRPC status; the SDK raises the same classes from the status it receives.

`code` is the gRPC status name. `field` names the request field at fault (e.g. `tasks[2].depends_on`)
when there is one; it travels in the `drover-field` trailing metadata, and the message starts with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import grpc

FIELD_METADATA = "drover-field"


class DroverError(Exception):
    """Base of every error the control plane reports and the SDK raises."""

    code = "UNKNOWN"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        self.field = field or None
        self.message = f"{field}: {message}" if field else message
        super().__init__(self.message)


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


def trailing_metadata(err: DroverError) -> tuple[tuple[str, str], ...]:
    """What the control plane sends with the status of `err`."""
    return ((FIELD_METADATA, err.field),) if err.field else ()


def from_rpc_error(err: grpc.RpcError) -> DroverError:
    """The DroverError a failed call reported: its class by status code, its field from the metadata."""
    code = err.code() if hasattr(err, "code") else None
    name = code.name if code is not None else "UNKNOWN"
    details = (err.details() if hasattr(err, "details") else str(err)) or name
    metadata = err.trailing_metadata() if hasattr(err, "trailing_metadata") else None
    field = next((str(v) for k, v in metadata or () if k == FIELD_METADATA), None)
    if field and details.startswith(f"{field}: "):
        details = details[len(field) + 2 :]
    error = _BY_CODE.get(name, DroverError)(details, field=field)
    if type(error) is DroverError:
        error.code = name
    return error
