"""Requests that are not protobuf: INVALID_ARGUMENT, on every method of every service, streams too.

gRPC decodes a request before any servicer code runs, and a DecodeError there answered UNKNOWN
("Unexpected DecodeError"). RequestDecoding wraps each method's deserializer so that bytes that do
not decode become an `Undecodable` instead of an exception, and wraps the method so that it ends
the call with INVALID_ARGUMENT when it meets one: a unary request before the servicer runs; a
streamed one when the servicer reads it, from its request iterator or `context.read()` (the agent
stream), which ends the stream. Nothing has been read or written for it.

It sits inside AuthInterceptor: a caller without a valid token is UNAUTHENTICATED whatever it sent.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import grpc

INVALID = grpc.StatusCode.INVALID_ARGUMENT


@dataclasses.dataclass(frozen=True)
class Undecodable:
    """A request whose bytes are not a `type_name` message."""

    type_name: str
    why: str

    def __str__(self) -> str:
        return f"the request is not a valid {self.type_name} message ({self.why})"


def safe(deserializer: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    """`deserializer`, answering an Undecodable for bytes it cannot decode."""
    message_type = getattr(deserializer, "__self__", None)
    type_name = getattr(getattr(message_type, "DESCRIPTOR", None), "full_name", "request")

    def decode(raw: bytes) -> Any:
        try:
            return deserializer(raw)
        except Exception as err:  # DecodeError, or anything else its bytes make the parser raise
            return Undecodable(type_name, str(err).rsplit(": ", 1)[-1].lower() or type(err).__name__)

    return decode


class RequestDecoding(grpc.aio.ServerInterceptor):
    async def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(details)
        if handler is None or handler.request_deserializer is None:
            return handler
        return guarded(handler)


class _Reading:
    """A servicer context whose `read()` ends the call on an Undecodable; the rest is the context's."""

    def __init__(self, context: grpc.aio.ServicerContext) -> None:
        self._context = context

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)

    async def read(self) -> Any:
        message = await self._context.read()
        if isinstance(message, Undecodable):
            await self._context.abort(INVALID, str(message))
        return message


async def _checked(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
    async for request in requests:
        if isinstance(request, Undecodable):
            await context.abort(INVALID, str(request))
        yield request


def _checked_sync(requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
    for request in requests:
        if isinstance(request, Undecodable):
            context.abort(INVALID, str(request))
        yield request


def guarded(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """`handler` with a deserializer that never raises and a behaviour that refuses what it could not
    decode."""
    kind = (
        "unary_unary"
        if handler.unary_unary
        else "unary_stream"
        if handler.unary_stream
        else "stream_unary"
        if handler.stream_unary
        else "stream_stream"
    )
    inner = getattr(handler, kind)
    streamed = kind.startswith("stream")
    if inspect.isasyncgenfunction(inner):
        behaviour = _async_generator(inner, streamed)
    elif inspect.iscoroutinefunction(inner):
        behaviour = _coroutine(inner, streamed)
    else:  # a method served on grpc's threads (health's List)
        behaviour = _sync(inner, streamed)
    make = getattr(grpc, f"{kind}_rpc_method_handler")
    return make(
        behaviour,
        request_deserializer=safe(handler.request_deserializer),
        response_serializer=handler.response_serializer,
    )


def _async_generator(inner: Any, streamed: bool) -> Any:
    async def behaviour(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if streamed:
            request, context = _checked(request, context), _Reading(context)
        elif isinstance(request, Undecodable):
            await context.abort(INVALID, str(request))
        async for item in inner(request, context):
            yield item

    return behaviour


def _coroutine(inner: Any, streamed: bool) -> Any:
    async def behaviour(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if streamed:
            request, context = _checked(request, context), _Reading(context)
        elif isinstance(request, Undecodable):
            await context.abort(INVALID, str(request))
        return await inner(request, context)

    return behaviour


def _sync(inner: Any, streamed: bool) -> Any:
    def behaviour(request: Any, context: grpc.ServicerContext) -> Any:
        if streamed:
            request = _checked_sync(request, context)
        elif isinstance(request, Undecodable):
            context.abort(INVALID, str(request))
        return inner(request, context)

    return behaviour
