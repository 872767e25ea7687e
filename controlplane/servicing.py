"""Maps domain errors to gRPC status codes at the edge of every servicer method."""

from __future__ import annotations

import functools
import inspect
import logging
from typing import Any, Callable

import grpc

from controlplane.errors import DroverError

log = logging.getLogger("drover.rpc")


def grpc_code(err: DroverError) -> grpc.StatusCode:
    return getattr(grpc.StatusCode, err.code, grpc.StatusCode.INTERNAL)


def reporting(method: Callable[..., Any]) -> Callable[..., Any]:
    """Turn a DroverError raised by the domain into `context.abort(code, message)`."""
    if inspect.isasyncgenfunction(method):
        @functools.wraps(method)
        async def stream(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                async for item in method(self, request, context):
                    yield item
            except DroverError as err:
                await context.abort(grpc_code(err), str(err))
        return stream

    @functools.wraps(method)
    async def unary(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await method(self, request, context)
        except DroverError as err:
            await context.abort(grpc_code(err), str(err))
    return unary
