"""The model gateway: a per-run Anthropic Messages endpoint for external runtimes (Claude Code, opencode).

A runtime never sees the provider key. It calls this endpoint with a per-run token as its API key;
the gateway, in the run's supervisor outside the sandbox, checks the token, applies the routed
member's model and the tier's output cap, reserves the call on every meter (ReserveModelCall, through
the run's ControlPlane), forwards it with the real credential, reads the usage from the JSON answer
or the SSE stream as it passes, and settles the exact cost. A budget refusal is answered with an
Anthropic-shaped 403 `permission_error`, which runtimes do not retry, and is remembered so the run
ends with the refusal's reason.

HTTP/1.1 on an asyncio stream, parsed by h11 (keep-alive, chunked answers); forwarding by httpx2,
anthropic's own HTTP client. Every request is answered, never dropped: a bad body with an
Anthropic-shaped 400 `invalid_request_error` naming the field, an unknown path 404, another method
405, a body over MAX_BODY 413, headers over MAX_HEAD 431, a failure of the gateway itself 500. The
provider is called on the route's own path (`MESSAGES` or `COUNT_TOKENS`): nothing of the request
target, such as a query string, is forwarded."""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import json
import logging
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import Any

import h11
import httpx2

from agentd.errors import ModelCallRefused
from agentd.run.control_plane import ControlPlane, ModelCall
from agentd.run.messages_request import COUNT_TOKENS, MESSAGES, body_problem, rewrite
from drover.core.usage import Usage

log = logging.getLogger("agentd.gateway")

QUESTIONS = "/drover/v1/questions"
"""The session's questions (agentd/run/questions_mcp.py posts here with the run token)."""
MAX_BODY = 32 << 20
"""A request body larger than this is refused (413): a conversation is far smaller."""
MAX_HEAD = 64 << 10
"""A request line and headers larger than this are refused (431)."""
ROUTES = (MESSAGES, COUNT_TOKENS, QUESTIONS)
FORWARDED_HEADERS = ("anthropic-version", "anthropic-beta", "content-type", "accept", "user-agent")
ANSWER_HEADERS = ("content-type", "request-id", "retry-after", "x-should-retry", "cache-control")
OAUTH_BETA = "oauth-2025-04-20"


@dataclasses.dataclass
class Upstream:
    base_url: str
    """The routed member's Messages API, e.g. https://api.anthropic.com."""
    credential: str
    """Its API key (PayPerApi) or OAuth token (Subscription)."""
    billing: str = "PayPerApi"
    timeout_seconds: float = 120.0
    """A read that waits longer than this ends the call (the harness's stall timeout)."""
    workspace_id: str = ""
    """Sent as the anthropic-workspace-id header on every call; "": not sent."""


class UsageReader:
    """The usage and error of one answer, read from its bytes as they pass (JSON or SSE)."""

    def __init__(self, streaming: bool) -> None:
        self.streaming = streaming
        self._buffer = b""
        self.usage: Usage | None = None
        self.error = ""

    def feed(self, data: bytes) -> None:
        self._buffer += data
        if not self.streaming:
            return
        while b"\n\n" in self._buffer:
            event, self._buffer = self._buffer.split(b"\n\n", 1)
            for line in event.replace(b"\r\n", b"\n").split(b"\n"):
                if line.startswith(b"data:"):
                    self._sse(line[5:].strip())

    def finish(self, status: int) -> None:
        if not self.streaming:
            try:
                answer = json.loads(self._buffer or b"{}")
            except ValueError:
                answer = {}
            if isinstance(answer, dict):
                if isinstance(answer.get("usage"), dict):
                    self.usage = _usage(answer["usage"])
                if answer.get("type") == "error":
                    self.error = str((answer.get("error") or {}).get("type") or "api_error")
        if status >= 400 and not self.error:
            self.error = f"http_{status}"

    def _sse(self, data: bytes) -> None:
        try:
            event = json.loads(data)
        except ValueError:
            return
        if not isinstance(event, dict):
            return
        kind = event.get("type")
        if kind == "message_start" and isinstance((event.get("message") or {}).get("usage"), dict):
            self.usage = _usage(event["message"]["usage"])
        elif kind == "message_delta" and isinstance(event.get("usage"), dict):
            seen = dataclasses.asdict(self.usage or Usage())
            seen.update({k: v for k, v in event["usage"].items() if k in seen and isinstance(v, int)})
            self.usage = Usage(**seen)
        elif kind == "error":
            self.error = str((event.get("error") or {}).get("type") or "api_error")


def _usage(raw: dict[str, Any]) -> Usage:
    fields = {f.name for f in dataclasses.fields(Usage)}
    return Usage(**{k: int(v) for k, v in raw.items() if k in fields and isinstance(v, int)})


LINGER_SECONDS = 5.0
LINGER_BYTES = 2 * MAX_BODY


async def _linger(reader: Any, writer: Any) -> None:
    """After an early answer (413, 431), read and drop what the client still sends, for a while, so
    closing does not reset the connection before the client has read the answer."""
    try:
        writer.write_eof()
        left = LINGER_BYTES
        async with asyncio.timeout(LINGER_SECONDS):
            while left > 0 and (data := await reader.read(65536)):
                left -= len(data)
    except (TimeoutError, ConnectionError, OSError):
        pass


def error_body(kind: str, message: str) -> bytes:
    return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()


class Gateway:
    """One run's gateway. `serve(reader, writer)` handles one client connection (asyncio.start_server)."""

    def __init__(
        self,
        *,
        token: str,
        model: str,
        max_output_tokens: int,
        upstream: Upstream,
        control_plane: ControlPlane,
        key_prefix: str = "gw",
        ask: Callable[[str, bool], Awaitable[str]] | None = None,
        say: Callable[[str], None] = lambda line: None,
    ) -> None:
        self.token, self.model, self.max_output_tokens = token, model, max_output_tokens
        self.upstream, self.control_plane = upstream, control_plane
        self.key_prefix = key_prefix
        self.ask = ask
        self.say = say
        """Writes a line to the run's system log (a refusal)."""
        self.calls = 0
        """Model calls forwarded (reserved) so far."""
        self.refused: ModelCallRefused | None = None
        """The first refusal, if the control plane refused a call."""
        self.rejected_tokens = 0
        """Requests with a missing or wrong token."""
        self._client = httpx2.AsyncClient(
            timeout=httpx2.Timeout(upstream.timeout_seconds, connect=10.0), follow_redirects=False
        )

    async def close(self) -> None:
        await self._client.aclose()

    # --- one connection ---------------------------------------------------------------------------

    async def serve(self, reader: Any, writer: Any) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        try:
            while True:
                try:
                    request, body = await self._read_request(conn, reader)
                except h11.RemoteProtocolError as err:  # answered, then the connection ends
                    await self._protocol_error(conn, writer, err)
                    return await _linger(reader, writer)
                if request is None:
                    return
                await self._answer_safely(conn, writer, request, body)
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return
                conn.start_next_cycle()
        except (h11.ProtocolError, ConnectionError, OSError) as err:
            log.debug("gateway connection closed: %s", err)
        finally:
            writer.close()

    async def _read_request(self, conn: h11.Connection, reader: Any) -> tuple[h11.Request | None, bytes]:
        request: h11.Request | None = None
        chunks: list[bytes] = []
        size = 0
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await reader.read(65536)
                conn.receive_data(data)
                if not data and conn.their_state is h11.IDLE:
                    return None, b""
                continue
            if isinstance(event, h11.Request):
                request = event
                if len(event.target) + sum(len(k) + len(v) + 4 for k, v in event.headers) > MAX_HEAD:
                    raise h11.RemoteProtocolError("request headers too large", error_status_hint=431)
                length = dict(event.headers).get(b"content-length", b"0")
                if length.isdigit() and int(length) > MAX_BODY:
                    raise h11.RemoteProtocolError("request body too large", error_status_hint=413)
            elif isinstance(event, h11.Data):
                size += len(event.data)
                if size > MAX_BODY:
                    raise h11.RemoteProtocolError("request body too large", error_status_hint=413)
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                return request, b"".join(chunks)
            elif isinstance(event, h11.ConnectionClosed):
                return None, b""

    async def _protocol_error(self, conn: h11.Connection, writer: Any, err: h11.RemoteProtocolError) -> None:
        """A request h11 could not take (too large, malformed): answered with its status if nothing was sent."""
        log.debug("gateway refused a request: %s", err)
        if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        status = err.error_status_hint
        kind = {413: "request_too_large"}.get(status, "invalid_request_error")
        message = {413: f"request body: at most {MAX_BODY} bytes", 431: f"request headers: at most {MAX_HEAD} bytes"}
        await self._send(conn, writer, status, error_body(kind, message.get(status, f"malformed request: {err}")))

    async def _answer_safely(self, conn: h11.Connection, writer: Any, request: h11.Request, body: bytes) -> None:
        """Answer; a failure of the gateway itself (the control plane unreachable, ...) is a 500, not a
        dropped connection, while nothing of the answer was sent."""
        try:
            await self._answer(conn, writer, request, body)
        except (h11.ProtocolError, ConnectionError, OSError):
            raise
        except Exception as err:  # any failure is answered: the runtime decides whether to retry
            log.exception("the gateway failed a request")
            if conn.our_state is not h11.SEND_RESPONSE:
                raise ConnectionError("the gateway failed mid-answer") from err
            await self._send(
                conn, writer, 500, error_body("api_error", f"the Drover gateway failed: {type(err).__name__}")
            )

    async def _answer(self, conn: h11.Connection, writer: Any, request: h11.Request, body: bytes) -> None:
        headers = {k.decode().lower(): v.decode(errors="replace") for k, v in request.headers}
        path = urllib.parse.urlsplit(request.target.decode(errors="replace")).path
        if not self._authorised(headers):
            self.rejected_tokens += 1
            return await self._send(conn, writer, 401, error_body("authentication_error", "invalid x-api-key"))
        if path not in ROUTES or (path == QUESTIONS and self.ask is None):
            return await self._send(conn, writer, 404, error_body("not_found_error", f"no route {path[:200]}"))
        if request.method != b"POST":
            return await self._send(conn, writer, 405, error_body("invalid_request_error", f"{path}: POST only"))
        if path == QUESTIONS:
            return await self._question(conn, writer, body)
        try:
            payload = json.loads(body)
        except ValueError:
            return await self._send(conn, writer, 400, error_body("invalid_request_error", "body: not JSON"))
        if problem := body_problem(payload, path):
            return await self._send(conn, writer, 400, error_body("invalid_request_error", problem))
        payload = rewrite(payload, self.model, self.max_output_tokens)
        if path == COUNT_TOKENS:  # free: forwarded, not metered
            payload.pop("max_tokens", None)
            return await self._forward(conn, writer, path, headers, payload, reservation="")
        if self.refused is not None:  # a refusal ends the run: every later call is refused too
            return await self._refuse(conn, writer, self.refused)
        self.calls += 1
        key = f"{self.key_prefix}:{self.calls}"
        try:
            call = ModelCall(key, self.model, "agent", int(payload["max_tokens"]), len(body) // 4)
            reservation = (await self.control_plane.reserve(call)).id
        except ModelCallRefused as refused:
            self.say(f"model gateway: {refused}")
            self.refused = refused
            return await self._refuse(conn, writer, refused)
        await self._forward(conn, writer, path, headers, payload, reservation)

    async def _question(self, conn: h11.Connection, writer: Any, body: bytes) -> None:
        assert self.ask is not None
        try:
            asked = json.loads(body)
        except ValueError:
            asked = None
        if not isinstance(asked, dict) or not str(asked.get("question") or "").strip():
            return await self._send(conn, writer, 400, error_body("invalid_request_error", "question: required"))
        question_id = await self.ask(str(asked["question"])[:16384], bool(asked.get("blocking", True)))
        await self._send(conn, writer, 200, json.dumps({"id": question_id}).encode())

    def _authorised(self, headers: dict[str, str]) -> bool:
        given = headers.get("x-api-key", "")
        bearer = headers.get("authorization", "")
        if not given and bearer.lower().startswith("bearer "):
            given = bearer[7:].strip()
        return bool(given) and hmac.compare_digest(given.encode(), self.token.encode())

    async def _refuse(self, conn: h11.Connection, writer: Any, refused: ModelCallRefused) -> None:
        message = f"Drover refused the model call: {refused.code}. {refused} The run stops here."
        await self._send(conn, writer, 403, error_body("permission_error", message))

    async def _forward(
        self,
        conn: h11.Connection,
        writer: Any,
        path: str,
        headers: dict[str, str],
        payload: dict[str, Any],
        reservation: str,
    ) -> None:
        """Forward to the provider on `path` (one of the routes; the client's target is never used)."""
        out = {k: headers[k] for k in FORWARDED_HEADERS if k in headers}
        if self.upstream.billing == "Subscription":
            out["authorization"] = f"Bearer {self.upstream.credential}"
            betas = [b for b in out.get("anthropic-beta", "").split(",") if b.strip()]
            out["anthropic-beta"] = ",".join([*betas, OAUTH_BETA] if OAUTH_BETA not in betas else betas)
        else:
            out["x-api-key"] = self.upstream.credential
        if self.upstream.workspace_id:
            out["anthropic-workspace-id"] = self.upstream.workspace_id
        out["accept-encoding"] = "identity"  # the bytes pass as they come, and their usage is read on the way
        url = self.upstream.base_url.rstrip("/") + path
        reader = UsageReader(bool(payload.get("stream")))
        status = 0
        try:
            async with self._client.stream("POST", url, headers=out, content=json.dumps(payload).encode()) as answer:
                status = answer.status_code
                kept = [(k, v) for k, v in answer.headers.items() if k.lower() in ANSWER_HEADERS]
                writer.write(conn.send(h11.Response(status_code=status, headers=kept)))
                async for chunk in answer.aiter_raw():
                    reader.feed(chunk)
                    writer.write(conn.send(h11.Data(data=chunk)))
                    await writer.drain()
                writer.write(conn.send(h11.EndOfMessage()))
                await writer.drain()
            reader.finish(status)
        except httpx2.HTTPError as err:
            reader.error = reader.error or type(err).__name__
            if status == 0:  # nothing sent yet: answer like the API does when it is unreachable
                await self._send(conn, writer, 502, error_body("api_error", f"the model provider: {err}"))
            else:
                raise ConnectionError("the provider's answer broke off") from err
        finally:
            if reservation:
                await self.control_plane.settle(reservation, reader.usage, reader.error)

    async def _send(self, conn: h11.Connection, writer: Any, status: int, body: bytes) -> None:
        headers = [("content-type", "application/json"), ("content-length", str(len(body)))]
        writer.write(conn.send(h11.Response(status_code=status, headers=headers)))
        writer.write(conn.send(h11.Data(data=body)))
        writer.write(conn.send(h11.EndOfMessage()))
        await writer.drain()
