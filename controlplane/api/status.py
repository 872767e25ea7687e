"""The edge of every servicer method: validate the request, then map what went wrong to a gRPC status.

A DroverError becomes its status with its message. Anything else is a bug or a fault below us: the
caller gets INTERNAL with an error id and nothing more (never SQL, parameters or a traceback), and the
server log has the id with the whole traceback.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from typing import Any

import grpc

from controlplane.api import validation
from controlplane.domain.error_ids import error_id
from drover.errors import DroverError, trailing_metadata

log = logging.getLogger("drover.rpc")


def grpc_code(err: DroverError) -> grpc.StatusCode:
    return getattr(grpc.StatusCode, err.code, grpc.StatusCode.INTERNAL)


async def abort(context: grpc.aio.ServicerContext, err: DroverError) -> None:
    """End the call with the status of `err`: its code, its message, and its field in the metadata."""
    await context.abort(grpc_code(err), str(err), trailing_metadata=trailing_metadata(err))


async def _internal(context: grpc.aio.ServicerContext, method: str) -> None:
    eid = error_id()
    log.exception("%s failed with an unexpected error, id %s", method, eid)
    await context.abort(grpc.StatusCode.INTERNAL, f"internal error {eid}; the control plane's log has the details")


def reporting(method: Callable[..., Any]) -> Callable[..., Any]:
    """Check the request against validation's rules, run the method, report its failure as a status."""
    name = method.__name__
    if inspect.isasyncgenfunction(method):

        @functools.wraps(method)
        async def stream(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                validation.check(request, getattr(self, "limits", validation.Limits()))
                async for item in method(self, request, context):
                    yield item
            except DroverError as err:
                await abort(context, err)
            except grpc.aio.AbortError:
                raise
            except Exception:
                await _internal(context, name)

        return stream

    @functools.wraps(method)
    async def unary(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            validation.check(request, getattr(self, "limits", validation.Limits()))
            return await method(self, request, context)
        except DroverError as err:
            await abort(context, err)
        except grpc.aio.AbortError:
            raise
        except Exception:
            await _internal(context, name)

    return unary
