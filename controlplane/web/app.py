"""The web console (`controlplane serve --http-listen HOST:PORT`): server-rendered pages over the API's own
services, signed in with a Drover user token. No build step and nothing from a CDN: templates and a small
script ship in the package.

Every page and action is a handler taking a `Visit` (the request, the signed-in user, the gateway);
`signed_in` sends visitors without a valid token to /login, and answers an action without its CSRF
field with 403 before anything runs."""

from __future__ import annotations

import asyncio
import functools
import html
import urllib.parse
from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from controlplane.config import ConsoleLimits
from controlplane.web import actions, administration, hooks, pages, session
from controlplane.web.gateway import Gateway, http_status
from controlplane.web.limits import Gate, Refusal, Refused, session_key, too_slow
from controlplane.web.visit import HERE, SECURITY_HEADERS, TEMPLATES, Handler, Visit
from drover.errors import DroverError

CSRF_REFUSED = "the form's CSRF field is missing or wrong: reload the page and try again"


async def bounded_body(request: Request, gate: Gate) -> bytes:
    """The request's body, read no further than a form may be (ValueError beyond), by no more than the
    gate's number of senders at once and within its time (Refused)."""
    body = bytearray()
    with gate.upload():
        try:
            async with asyncio.timeout(gate.limits.body_timeout_seconds):
                async for chunk in request.stream():
                    body += chunk
                    if len(body) > session.MAX_FORM_BYTES:
                        raise ValueError(f"a form is at most {session.MAX_FORM_BYTES} bytes")
        except TimeoutError:
            raise Refused(too_slow(gate.limits)) from None
    return bytes(body)


def refused(refusal: Refusal) -> Response:
    headers = {**SECURITY_HEADERS, "Retry-After": "5"} if refusal.status in (429, 503) else SECURITY_HEADERS
    connection = {"Connection": "close"} if refusal.status == 408 else {}
    return HTMLResponse(refusal.message, status_code=refusal.status, headers={**headers, **connection})


def streaming(handler: Handler, gate: Gate) -> Handler:
    """A server-sent event page, admitted within the gate's limits and counted until the visitor leaves."""

    @functools.wraps(handler)
    async def admitted(v: Visit) -> Response:
        session = session_key(v.token)
        refusal = gate.open_stream(session)
        if refusal is not None:
            return refused(refusal)
        try:
            answer = await handler(v)
        except BaseException:
            gate.close_stream(session)
            raise
        if not isinstance(answer, StreamingResponse):
            gate.close_stream(session)
            return answer
        return _Counted(answer, lambda: gate.close_stream(session))

    return admitted


class _Counted(Response):
    """A streaming answer that tells the gate when it ends, however it ends (done, failed, or left)."""

    def __init__(self, inner: StreamingResponse, done: Callable[[], None]) -> None:
        self.inner, self.done = inner, done
        self.status_code, self.raw_headers, self.background = inner.status_code, inner.raw_headers, None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await self.inner(scope, receive, send)
        finally:
            self.done()


def signed_in(handler: Handler, gateway: Gateway, gate: Gate, secure: bool, action: bool = False) -> Callable[..., Any]:
    @functools.wraps(handler)
    async def endpoint(request: Request) -> Response:
        token = urllib.parse.unquote(request.cookies.get(session.COOKIE, ""))
        try:
            who = await gateway.principal(token)
        except DroverError as err:  # the API is unreachable (restarting): say so, not 500
            message = html.escape(f"{err.code}: {err}")
            return HTMLResponse(message, status_code=http_status(err), headers=SECURITY_HEADERS)
        if who is None:
            if action:
                return HTMLResponse("sign in first", status_code=401, headers=SECURITY_HEADERS)
            target = urllib.parse.quote(request.url.path + (f"?{request.url.query}" if request.url.query else ""))
            return RedirectResponse(f"/login?next={target}", status_code=303)
        visit = Visit(request, who, token, gateway, secure)
        if action:
            try:
                visit.form = session.parse_form(await bounded_body(request, gate))
            except ValueError as err:
                return visit.render("error.html", 413, message=str(err))
            except Refused as err:
                return refused(err.refusal)
            if not session.csrf_ok(token, visit.form.get("csrf", "")):
                return visit.render("error.html", 403, message=CSRF_REFUSED)
        try:
            return await handler(visit)
        except DroverError as err:
            field = f" ({err.field})" if err.field and err.field not in str(err) else ""
            return visit.render("error.html", http_status(err), message=f"{err.code}: {err}{field}")

    return endpoint


def login_routes(gateway: Gateway, gate: Gate, secure: bool) -> list[Route]:
    async def login_page(request: Request) -> Response:
        return _login(request.query_params.get("next", "/"), "")

    async def login(request: Request) -> Response:
        try:
            form = session.parse_form(await bounded_body(request, gate))
        except ValueError as err:
            return _login("/", str(err), 413)
        except Refused as err:
            return refused(err.refusal)
        token = form.get("token", "").strip()
        target = form.get("next", "/")
        try:
            who = await gateway.principal(token)
        except DroverError as err:
            return _login(target, f"{err.code}: {err}", http_status(err))
        if who is None:
            return _login(target, "That token is unknown, expired, revoked, or not a user token.", 401)
        if not target.startswith("/") or target.startswith("//"):
            target = "/"  # only back into the console
        headers = {"Set-Cookie": session.cookie_header(token, secure)}
        return RedirectResponse(target, status_code=303, headers=headers)

    async def logout(request: Request) -> Response:
        token = urllib.parse.unquote(request.cookies.get(session.COOKIE, ""))
        try:
            form = session.parse_form(await bounded_body(request, gate))
        except ValueError:
            form = {}
        except Refused as err:
            return refused(err.refusal)
        if not session.csrf_ok(token, form.get("csrf", "")):
            return HTMLResponse(CSRF_REFUSED, status_code=403, headers=SECURITY_HEADERS)
        return RedirectResponse("/login", status_code=303, headers={"Set-Cookie": session.cookie_header("", secure)})

    return [
        Route("/login", login_page, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
    ]


def _login(target: str, error: str, status: int = 200) -> HTMLResponse:
    page = TEMPLATES.get_template("login.html").render(next=target, error=error)
    return HTMLResponse(page, status_code=status, headers=SECURITY_HEADERS)


async def favicon(request: Request) -> Response:
    """The icon browsers ask for by this name: the console's SVG (pages also link it)."""
    headers = {**SECURITY_HEADERS, "Cache-Control": "max-age=86400"}
    return FileResponse(HERE / "static" / "favicon.svg", media_type="image/svg+xml", headers=headers)


def console(gateway: Gateway, secure: bool, limits: ConsoleLimits) -> Starlette:
    gate = Gate(limits)

    def page(handler: Handler) -> Callable[..., Any]:
        return signed_in(handler, gateway, gate, secure)

    def act(handler: Handler) -> Callable[..., Any]:
        return signed_in(handler, gateway, gate, secure, action=True)

    routes = [
        *login_routes(gateway, gate, secure),
        Route("/", lambda request: RedirectResponse("/fleet", status_code=303)),
        Route("/favicon.ico", favicon),
        Route("/hooks/github", hooks.github_route(gateway, gate), methods=["POST"]),
        *(Route(path, page(handler)) for path, handler in {**pages.PAGES, **administration.PAGES}.items()),
        Route("/runs/{run_id}/stream", page(streaming(pages.run_stream, gate))),
        Route("/changes/{change_id}/stream", page(streaming(pages.change_stream, gate))),
        *(
            Route(path, act(handler), methods=["POST"])
            for path, handler in {**actions.ACTIONS, **administration.ACTIONS}.items()
        ),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return Starlette(routes=routes)
