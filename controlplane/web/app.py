"""The web console (`controlplane serve --http-listen HOST:PORT`): server-rendered pages over the API's own
services, signed in with a Drover user token. No build step and nothing from a CDN: templates and a small
script ship in the package.

Every page and action is a handler taking a `Visit` (the request, the signed-in user, the gateway);
`signed_in` sends visitors without a valid token to /login, and answers an action without its CSRF
field with 403 before anything runs."""

from __future__ import annotations

import functools
import urllib.parse
from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from controlplane.web import actions, pages, session
from controlplane.web.gateway import Gateway, http_status
from controlplane.web.visit import HERE, SECURITY_HEADERS, TEMPLATES, Handler, Visit
from drover.errors import DroverError

CSRF_REFUSED = "the form's CSRF field is missing or wrong: reload the page and try again"


async def bounded_body(request: Request) -> bytes:
    """The request's body, read no further than a form may be (ValueError beyond)."""
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > session.MAX_FORM_BYTES:
            raise ValueError(f"a form is at most {session.MAX_FORM_BYTES} bytes")
    return bytes(body)


def signed_in(handler: Handler, gateway: Gateway, secure: bool, action: bool = False) -> Callable[..., Any]:
    @functools.wraps(handler)
    async def endpoint(request: Request) -> Response:
        token = urllib.parse.unquote(request.cookies.get(session.COOKIE, ""))
        who = await gateway.principal(token)
        if who is None:
            if action:
                return HTMLResponse("sign in first", status_code=401, headers=SECURITY_HEADERS)
            target = urllib.parse.quote(request.url.path + (f"?{request.url.query}" if request.url.query else ""))
            return RedirectResponse(f"/login?next={target}", status_code=303)
        visit = Visit(request, who, token, gateway, secure)
        if action:
            try:
                visit.form = session.parse_form(await bounded_body(request))
            except ValueError as err:
                return visit.render("error.html", 413, message=str(err))
            if not session.csrf_ok(token, visit.form.get("csrf", "")):
                return visit.render("error.html", 403, message=CSRF_REFUSED)
        try:
            return await handler(visit)
        except DroverError as err:
            field = f" ({err.field})" if err.field and err.field not in str(err) else ""
            return visit.render("error.html", http_status(err), message=f"{err.code}: {err}{field}")

    return endpoint


def login_routes(gateway: Gateway, secure: bool) -> list[Route]:
    async def login_page(request: Request) -> Response:
        return _login(request.query_params.get("next", "/"), "")

    async def login(request: Request) -> Response:
        try:
            form = session.parse_form(await bounded_body(request))
        except ValueError as err:
            return _login("/", str(err), 413)
        token = form.get("token", "").strip()
        target = form.get("next", "/")
        if await gateway.principal(token) is None:
            return _login(target, "That token is unknown, expired, revoked, or not a user token.", 401)
        if not target.startswith("/") or target.startswith("//"):
            target = "/"  # only back into the console
        headers = {"Set-Cookie": session.cookie_header(token, secure)}
        return RedirectResponse(target, status_code=303, headers=headers)

    async def logout(request: Request) -> Response:
        token = urllib.parse.unquote(request.cookies.get(session.COOKIE, ""))
        try:
            form = session.parse_form(await bounded_body(request))
        except ValueError:
            form = {}
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


def console(gateway: Gateway, secure: bool) -> Starlette:
    def page(handler: Handler) -> Callable[..., Any]:
        return signed_in(handler, gateway, secure)

    def act(handler: Handler) -> Callable[..., Any]:
        return signed_in(handler, gateway, secure, action=True)

    routes = [
        *login_routes(gateway, secure),
        Route("/", lambda request: RedirectResponse("/fleet", status_code=303)),
        *(Route(path, page(handler)) for path, handler in pages.PAGES.items()),
        Route("/runs/{run_id}/stream", page(pages.run_stream)),
        Route("/changes/{change_id}/stream", page(pages.change_stream)),
        *(Route(path, act(handler), methods=["POST"]) for path, handler in actions.ACTIONS.items()),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return Starlette(routes=routes)
