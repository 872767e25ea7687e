"""Drover SDK: `from drover import Client`."""

from drover.client import Client
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
