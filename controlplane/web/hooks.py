"""`POST /hooks/github` on the console's listener: a machine endpoint (no sign-in, no CSRF) that reads at
most MAX_WEBHOOK_BYTES of the body (more: 413, the rest left unread), parses nothing, and forwards the raw
body with X-GitHub-Event, X-GitHub-Delivery and X-Hub-Signature-256 to the control plane over the private
socket (`Gateway.forge_delivery`). The control plane checks the signature and answers the status."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response

from controlplane.domain.webhooks import MAX_WEBHOOK_BYTES
from controlplane.web.gateway import Gateway, http_status
from controlplane.web.limits import Gate, Refused, too_slow
from controlplane.web.visit import SECURITY_HEADERS
from drover.errors import DroverError

HEADERS = ("x-github-event", "x-github-delivery", "x-hub-signature-256")
MAX_HEADER = 200


class TooLarge(Exception):
    pass


def header(request: Request, name: str) -> str:
    """The header as sent when it can travel as gRPC metadata (printable ASCII, at most MAX_HEADER
    characters); "" otherwise, which the control plane answers as missing."""
    value = request.headers.get(name, "")
    return value if len(value) <= MAX_HEADER and all(" " <= c <= "~" for c in value) else ""


async def read_body(request: Request, gate: Gate) -> bytes:
    """The body, read no further than MAX_WEBHOOK_BYTES (TooLarge beyond), within the gate's limits."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_WEBHOOK_BYTES:
        raise TooLarge
    body = bytearray()
    with gate.upload():
        try:
            async with asyncio.timeout(gate.limits.body_timeout_seconds):
                async for chunk in request.stream():
                    body += chunk
                    if len(body) > MAX_WEBHOOK_BYTES:
                        raise TooLarge
        except TimeoutError:
            raise Refused(too_slow(gate.limits)) from None
    return bytes(body)


def answer(status: int, message: str) -> Response:
    close = {"Connection": "close"} if status in (408, 413) else {}
    content = b"" if status == 204 else (message + "\n").encode()
    return Response(content, status_code=status, media_type="text/plain", headers={**SECURITY_HEADERS, **close})


def github_route(gateway: Gateway, gate: Gate) -> Callable[[Request], Awaitable[Response]]:
    async def github(request: Request) -> Response:
        try:
            body = await read_body(request, gate)
        except TooLarge:
            return answer(413, f"a delivery is at most {MAX_WEBHOOK_BYTES} bytes")
        except Refused as err:
            return answer(err.refusal.status, err.refusal.message)
        try:
            status, message = await gateway.forge_delivery({name: header(request, name) for name in HEADERS}, body)
        except DroverError as err:  # the control plane is unreachable (restarting): the forge retries later
            return answer(http_status(err), f"{err.code}: {err}")
        return answer(status, message)

    return github
