"""Drover SDK: `from drover import Client`.

Every name here is imported on first use (PEP 562): `import drover` loads no gRPC, no protobuf and
no YAML, so the control plane's domain (which raises `drover.errors`) and the console scripts start
without them."""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
_HOME = {name: "drover.client" if name == "Client" else "drover.errors" for name in __all__}
"""Where each public name lives."""


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'drover' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # the next lookup does not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME})
