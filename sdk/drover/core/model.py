"""The model client of the harness: one streamed Messages API call, retried per seed 002.

The SDK's own retries are off (`max_retries=0`): this module owns the policy so
that every attempt is seen, and settled, by the caller through `on_attempt`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import email.utils
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import tenacity

from drover.core.retry import (
    PERMANENT,
    RETRY,
    SPEND_LIMITED,
    RetryPolicy,
    classify,
    retry_delay,
)
from drover.core.usage import Usage


@dataclasses.dataclass(frozen=True)
class ModelReply:
    """The assistant message of a successful call. `content` holds API-shaped block dicts."""

    content: list[dict[str, Any]]
    stop_reason: str
    usage: Usage
    attempts: int


class ModelError(Exception):
    """A model call that failed. `outcome` is the run outcome it implies."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        error_type: str = "",
        attempts: int = 0,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status  # HTTP status; None for transport errors and in-stream errors
        self.error_type = error_type  # the API's error.type, "" when there was none
        self.attempts = attempts  # attempts made so far, this one included
        self.retry_after = retry_after  # the provider's Retry-After in seconds, if it sent one
        self.partial = ""
        """The text an interrupted stream had sent (the last attempt's that sent any); never a reply."""

    @property
    def outcome(self) -> str:
        return "failed"


class PermanentModelError(ModelError):
    """Never worth repeating: authentication, permission, invalid request, context limit."""


class SpendLimited(ModelError):
    """The provider refuses for money: billing or quota."""

    @property
    def outcome(self) -> str:
        return "spend_limited"


class TransientModelError(ModelError):
    """Worth repeating (rate limit, overload, 5xx, transport, stall); raised once attempts run out."""

    @property
    def outcome(self) -> str:
        rate_limited = self.status == 429 or self.error_type == "rate_limit_error"
        return "rate_limited" if rate_limited else "transient"


OnAttempt = Callable[[int, "Usage | None", "ModelError | None"], Awaitable[object]]

_ERROR_CLASS = {RETRY: TransientModelError, SPEND_LIMITED: SpendLimited, PERMANENT: PermanentModelError}


WORKSPACE_HEADER = "anthropic-workspace-id"
"""Names the Anthropic workspace a call is made in ([anthropic] workspace_id)."""


class _Interrupted(Exception):
    """The stream stalled, ran over the attempt ceiling, or ended before message_stop."""


class AnthropicModel:
    """Streams Messages API calls and retries them per `policy`."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        model: str,
        policy: RetryPolicy,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        on_attempt: OnAttempt | None = None,
        before_attempt: Callable[[int], Awaitable[object]] | None = None,
        workspace_id: str = "",
        effort: str = "",
    ) -> None:
        self.model = model
        self.effort = effort  # output_config.effort of every call; "": none
        self._headers = {WORKSPACE_HEADER: workspace_id} if workspace_id else {}
        self._before_attempt = before_attempt  # the run's meter: it may raise to stop the call
        self.policy = policy
        self._sleep = sleep
        self._on_attempt = on_attempt
        self._base_url, self._api_key = base_url, api_key
        self._made: Any = None

    @property
    def _client(self) -> Any:
        """The SDK's client, made at the first call: importing anthropic costs about a second, which the
        control plane (holding a model it calls rarely) would otherwise pay at every start."""
        if self._made is None:
            import anthropic

            self._made = anthropic.AsyncAnthropic(
                base_url=self._base_url, api_key=self._api_key, max_retries=0, default_headers=self._headers
            )
        return self._made

    async def close(self) -> None:
        if self._made is not None:
            await self._made.close()

    async def __aenter__(self) -> AnthropicModel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def complete(
        self,
        *,
        system: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        messages: list[dict[str, Any]],
        max_tokens: int,
        thinking: dict[str, Any] | None = None,
    ) -> ModelReply:
        """One assistant message; raises a ModelError subclass when the policy gives up."""
        params: dict[str, Any] = {
            "model": self.model,
            "max_tokens": max_tokens,
            "system": system,
            "tools": tools,
            "messages": messages,
        }
        if thinking is not None:
            params["thinking"] = thinking
        if self.effort:
            params["output_config"] = {"effort": self.effort}
        partials: list[str] = []  # what each interrupted attempt had streamed, in order
        try:
            async for attempt in tenacity.AsyncRetrying(
                retry=tenacity.retry_if_exception_type(TransientModelError),
                stop=tenacity.stop_after_attempt(self.policy.max_attempts),
                wait=self._wait,
                sleep=self._sleep,
                reraise=True,
            ):
                with attempt:
                    return await self._one(params, attempt.retry_state.attempt_number, partials)
        except ModelError as err:
            err.partial = next((p for p in reversed(partials) if p), "")
            raise
        raise AssertionError("tenacity re-raises the last failure")

    def _wait(self, state: tenacity.RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome else None
        retry_after = error.retry_after if isinstance(error, ModelError) else None
        return retry_delay(state.attempt_number, retry_after, self.policy)

    async def _one(self, params: dict[str, Any], attempt: int, partials: list[str]) -> ModelReply:
        """One attempt: the reply, or the ModelError it ended with (both reported to `on_attempt`)."""
        partial: list[Usage] = []  # usage seen so far in this attempt, for accounting a failure
        streams: list[Any] = []  # the attempt's stream, for the text it sent before it broke off
        if self._before_attempt is not None:
            await self._before_attempt(attempt)
        import anthropic
        import httpx2  # anthropic 2.x's HTTP client; its transport errors escape mid-stream unwrapped

        try:
            message = await self._attempt(params, partial, streams)
        except (anthropic.APIError, httpx2.TransportError, _Interrupted) as err:
            partials.append(_text_so_far(streams))
            error = _model_error(err, attempt)
            await self._notify(attempt, partial[-1] if partial else None, error)
            raise error from err
        reply = ModelReply(
            [_block(b) for b in message.content], message.stop_reason or "", _usage(message.usage), attempt
        )
        await self._notify(attempt, reply.usage, None)
        return reply

    async def _attempt(self, params: dict[str, Any], partial: list[Usage], streams: list[Any]) -> Any:
        loop = asyncio.get_running_loop()
        client = self._client  # made (anthropic imported) before the clocks start
        stall, ceiling = self.policy.stall_timeout, self.policy.attempt_ceiling
        over = loop.time() + ceiling  # the attempt's ceiling, however steadily it streams
        stopped = False
        try:
            async with asyncio.timeout_at(min(loop.time() + stall, over)) as timer:
                async with client.messages.stream(**params) as stream:
                    streams.append(stream)
                    async for event in stream:
                        timer.reschedule(min(loop.time() + stall, over))
                        if event.type in ("message_start", "message_delta"):
                            partial.append(_usage(stream.current_message_snapshot.usage))
                        stopped = stopped or event.type == "message_stop"
                    if not stopped:
                        raise _Interrupted("the stream ended before message_stop")
                    return await stream.get_final_message()
        except TimeoutError as err:
            if timer.expired() and timer.when() == over:  # the ceiling, not a silence, came first
                raise _Interrupted(f"the attempt ran over its {ceiling:g} s ceiling") from err
            if timer.expired():
                raise _Interrupted(f"no stream event for {stall:g} s") from err
            raise

    async def _notify(self, attempt: int, usage: Usage | None, error: ModelError | None) -> None:
        if self._on_attempt is not None:
            await self._on_attempt(attempt, usage, error)


def _model_error(err: Exception, attempt: int) -> ModelError:
    status: int | None = None
    error_type = ""
    retry_after = None
    message = str(err)
    import anthropic

    if isinstance(err, anthropic.APIStatusError):
        # An `error` event inside a stream arrives as a status error carrying the 200 of the stream.
        status = err.status_code if err.status_code >= 400 else None
        error_type = getattr(err, "type", None) or _body_type(err.body)
        message = getattr(err, "api_message", None) or err.message
        retry_after = _retry_after(err.response.headers) if status is not None else None
        verdict = classify(status, error_type, transport=False)
    else:
        verdict = classify(None, "", transport=True)
    label = f"{status} {error_type}".strip() if status or error_type else type(err).__name__
    error = _ERROR_CLASS[verdict](
        f"{label}: {message}", status=status, error_type=error_type, attempts=attempt, retry_after=retry_after
    )
    error.__cause__ = err  # on_attempt sees it too, before anything is raised
    return error


def _text_so_far(streams: list[Any]) -> str:
    """The text blocks an attempt's stream had received when it broke off ("" before any)."""
    if not streams:
        return ""
    try:
        snapshot = streams[-1].current_message_snapshot
    except Exception:  # no message_start yet: nothing was said
        return ""
    return "".join(getattr(b, "text", "") for b in snapshot.content if b.type == "text")


def _body_type(body: object) -> str:
    error = body.get("error") if isinstance(body, dict) else None
    return str(error.get("type") or "") if isinstance(error, dict) else ""


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds from retry-after-ms, retry-after in seconds, or retry-after as an HTTP date."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return float(value) * scale
        except ValueError:
            pass
        if name == "retry-after":
            try:
                return email.utils.parsedate_to_datetime(value).timestamp() - time.time()
            except (TypeError, ValueError):
                pass
    return None


def _usage(usage: Any) -> Usage:
    return Usage(
        input_tokens=usage.input_tokens or 0,
        output_tokens=usage.output_tokens or 0,
        cache_creation_input_tokens=usage.cache_creation_input_tokens or 0,
        cache_read_input_tokens=usage.cache_read_input_tokens or 0,
    )


def _block(block: Any) -> dict[str, Any]:
    if block.type == "text":
        return {"type": "text", "text": block.text}
    if block.type == "tool_use":
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    return block.to_dict(exclude_none=True)  # thinking, redacted_thinking, server tool blocks
