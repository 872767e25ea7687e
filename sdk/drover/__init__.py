"""Drover SDK: `from drover import Client`."""

from typing import TYPE_CHECKING, Any

from drover.errors import (
    AlreadyExists,
    DroverError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
)

if TYPE_CHECKING:
    from drover.client import Client


def __getattr__(name: str) -> Any:
    """`Client` is imported on first use: the console scripts and the daemons import `drover.*` modules
    that need no gRPC channel, and start faster without one."""
    if name == "Client":
        from drover.client import Client

        return Client
    raise AttributeError(f"module 'drover' has no attribute {name!r}")


__all__ = [
    "AlreadyExists",
    "Client",
    "DroverError",
    "FailedPrecondition",
    "InvalidArgument",
    "NotFound",
    "PermissionDenied",
    "ResourceExhausted",
    "Unauthenticated",
    "Unavailable",
]
