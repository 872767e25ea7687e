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
    "Client",
    "DroverError",
    "InvalidArgument",
    "NotFound",
    "AlreadyExists",
    "FailedPrecondition",
    "Unauthenticated",
    "PermissionDenied",
    "ResourceExhausted",
    "Unavailable",
]
