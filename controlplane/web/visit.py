"""What every console handler gets: the request, the signed-in user, and the gateway into the API; and
how it renders a page (templates escape everything; strict security headers on every answer)."""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from controlplane.services import tenancy
from controlplane.services.tokens import Principal
from controlplane.web import filters, session
from controlplane.web.gateway import Gateway

HERE = pathlib.Path(__file__).parent
TEMPLATES = jinja2.Environment(
    loader=jinja2.FileSystemLoader(HERE / "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)
TEMPLATES.filters.update(filters.FILTERS)


@dataclasses.dataclass
class Visit:
    request: Request
    who: Principal
    token: str
    gateway: Gateway
    secure: bool
    form: dict[str, str] = dataclasses.field(default_factory=dict)

    async def call(self, method: str, request: Any) -> Any:
        return await self.gateway.call(self.token, method, request)

    def stream(self, method: str, request: Any) -> AsyncIterator[Any]:
        return self.gateway.stream(self.token, method, request)

    def may(self, method: str) -> bool:
        return self.gateway.allowed(self.who, method)

    def may_act_on(self, method: str, submitted_by: str) -> bool:
        """Whether the API lets the visitor call `method` on a Change `submitted_by`: the method's role,
        then the Change's ownership (the API's own two checks), so a page offers no action it refuses."""
        manages = self.who.has_role("run.manage")
        return self.may(method) and tenancy.may_act_on(submitted_by, self.who.name, manages)

    def render(self, template: str, status: int = 200, **values: Any) -> HTMLResponse:
        values.setdefault("title", "Drover")
        page = TEMPLATES.get_template(template).render(
            who=self.who,
            csrf=session.csrf_token(self.token),
            may=self.may,
            may_act_on=self.may_act_on,
            path=self.request.url.path,
            **values,
        )
        return HTMLResponse(page, status_code=status, headers=SECURITY_HEADERS)


Handler = Callable[[Visit], Awaitable[Response]]
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; "
    "script-src 'self'; frame-ancestors 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
