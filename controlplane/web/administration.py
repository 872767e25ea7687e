"""The console's projects and tokens: /projects and /projects/NAME show a project's settings and which
git credential it has (kind, fingerprint; never the secret), /tokens lists the tokens the visitor may see,
revokes them and mints new ones (the token shown once, on the page that answers the form), and
/notifications lists what was sent to the [[notify]] targets and how it went; an admin of
every project adds one from /projects, with its workspace preparation, which an admin of the project
edits on /projects/NAME. Each is one API call as the signed-in user, so the API's rules hold here as
with grpcurl."""

from __future__ import annotations

from google.protobuf import field_mask_pb2
from starlette.responses import RedirectResponse, Response

from controlplane.web.project_form import FORGE, PREPARATION, env_text, forge_link, number, preparation, spans_lines
from controlplane.web.visit import Handler, Visit
from drover.models import CreatedToken, Project, Token, from_proto
from drover.notifications import NotificationDelivery
from drover.v1 import operations_pb2, project_pb2, token_pb2


async def projects(v: Visit) -> Response:
    answer = await v.call("ProjectService/ListProjects", project_pb2.ListProjectsRequest(page_size=1000))
    found = [from_proto(p, Project) for p in answer.projects]
    return v.render("projects.html", projects=found, title="Projects")


async def project(v: Visit) -> Response:
    name = v.request.path_params["name"]
    found = from_proto(await v.call("ProjectService/GetProject", project_pb2.GetProjectRequest(name=name)), Project)
    split = spans_lines(found.setup, found.env)
    return v.render("project.html", project=found, env_text=env_text(found.env), split=split, title=f"Project {name}")


async def create_project(v: Visit) -> Response:
    """A project from the form's name, repository, branch and workspace preparation; its pool, budget and
    the rest through the CLI or API."""
    f = v.form
    wanted = project_pb2.Project(
        name=f.get("name", "").strip(),
        repo=f.get("repo", "").strip(),
        branch=f.get("branch", "").strip(),
        **preparation(f),
    )
    made = await v.call("ProjectService/CreateProject", project_pb2.CreateProjectRequest(project=wanted))
    return RedirectResponse(f"/projects/{made.name}", status_code=303)


async def update_preparation(v: Visit) -> Response:
    """The project's workspace preparation as the form on its page sets it: the mask names exactly those
    settings, so its repository, branch, pool, budget and the rest stay as they are."""
    wanted = project_pb2.Project(name=v.request.path_params["name"], **preparation(v.form))
    mask = field_mask_pb2.FieldMask(paths=PREPARATION)
    made = await v.call(
        "ProjectService/UpdateProject", project_pb2.UpdateProjectRequest(project=wanted, update_mask=mask)
    )
    return RedirectResponse(f"/projects/{made.name}", status_code=303)


async def update_forge(v: Visit) -> Response:
    """The project's forge link as the forge form sets it (the mask names exactly FORGE)."""
    wanted = project_pb2.Project(name=v.request.path_params["name"], **forge_link(v.form))
    mask = field_mask_pb2.FieldMask(paths=FORGE)
    made = await v.call(
        "ProjectService/UpdateProject", project_pb2.UpdateProjectRequest(project=wanted, update_mask=mask)
    )
    return RedirectResponse(f"/projects/{made.name}", status_code=303)


ADMISSION = {"max_active_runs_per_change": 8, "max_open_sandboxes_per_change": 4, "weight": 1}
"""The admission form's settings and their defaults (an empty input)."""


async def update_admission(v: Visit) -> Response:
    """The project's per-Change cap and weight as the admission form sets them (the mask names exactly the
    ones the form sent)."""
    given = {key: number(v.form, key, int, default, "project.") for key, default in ADMISSION.items() if key in v.form}
    wanted = project_pb2.Project(name=v.request.path_params["name"], **given)
    mask = field_mask_pb2.FieldMask(paths=sorted(given))
    made = await v.call(
        "ProjectService/UpdateProject", project_pb2.UpdateProjectRequest(project=wanted, update_mask=mask)
    )
    return RedirectResponse(f"/projects/{made.name}", status_code=303)


async def set_forge_credential(v: Visit) -> Response:
    """A fine-grained token, or a GitHub App's ids and private key, pasted into the form; sealed by the
    API, never shown again (the page shows its kind and fingerprint)."""
    f = v.form
    request = project_pb2.SetForgeCredentialRequest(
        project=v.request.path_params["name"],
        kind=f.get("kind", ""),
        secret=f.get("secret", "").replace("\r\n", "\n").strip() + ("\n" if f.get("kind") == "app" else ""),
        app_id=number(f, "app_id", int),
        installation_id=number(f, "installation_id", int),
    )
    made = await v.call("ProjectService/SetForgeCredential", request)
    return RedirectResponse(f"/projects/{made.name}", status_code=303)


async def rotate_webhook_secret(v: Visit) -> Response:
    """A new webhook secret, shown on this answer only, to paste into the forge's webhook settings."""
    name = v.request.path_params["name"]
    answer = await v.call("ProjectService/RotateWebhookSecret", project_pb2.RotateWebhookSecretRequest(project=name))
    found = from_proto(answer.project, Project)
    split = spans_lines(found.setup, found.env)
    return v.render(
        "project.html", project=found, env_text=env_text(found.env), split=split, secret=answer.secret, title=name
    )


async def _tokens(v: Visit) -> list[Token]:
    request = token_pb2.ListTokensRequest(include_revoked=v.request.query_params.get("revoked") == "1", page_size=1000)
    return [from_proto(t, Token) for t in (await v.call("TokenService/ListTokens", request)).tokens]


async def tokens(v: Visit) -> Response:
    return v.render("tokens.html", tokens=await _tokens(v), created=None, title="Tokens")


async def create_token(v: Visit) -> Response:
    """Mint a token; the page that answers is the only place its secret is ever shown."""
    f = v.form
    request = token_pb2.CreateTokenRequest(
        name=f.get("name", "").strip(),
        role=f.get("role", ""),
        projects=[p.strip() for p in f.get("projects", "").split(",") if p.strip()],
        expires_in=f.get("expires_in", "").strip(),
    )
    created = from_proto(await v.call("TokenService/CreateToken", request), CreatedToken)
    return v.render("tokens.html", tokens=await _tokens(v), created=created, title="Tokens")


async def revoke_token(v: Visit) -> Response:
    request = token_pb2.RevokeTokenRequest(name=v.request.path_params["name"], kind=v.form.get("kind", ""))
    await v.call("TokenService/RevokeToken", request)
    return RedirectResponse("/tokens", status_code=303)


async def notifications(v: Visit) -> Response:
    """The newest notifications sent to [[notify]] targets (run.manage), of one state or target if asked."""
    state, target = v.request.query_params.get("state", ""), v.request.query_params.get("target", "")
    request = operations_pb2.ListNotificationDeliveriesRequest(state=state, target=target, page_size=200)
    answer = await v.call("OperationsService/ListNotificationDeliveries", request)
    found = [from_proto(d, NotificationDelivery) for d in answer.deliveries]
    return v.render("notifications.html", deliveries=found, state=state, target=target, title="Notifications")


PAGES: dict[str, Handler] = {
    "/projects": projects,
    "/projects/{name}": project,
    "/tokens": tokens,
    "/notifications": notifications,
}
ACTIONS: dict[str, Handler] = {
    "/projects": create_project,
    "/projects/{name}/preparation": update_preparation,
    "/projects/{name}/forge": update_forge,
    "/projects/{name}/admission": update_admission,
    "/projects/{name}/forge-credential": set_forge_credential,
    "/projects/{name}/webhook-secret": rotate_webhook_secret,
    "/tokens": create_token,
    "/tokens/{name}/revoke": revoke_token,
}
