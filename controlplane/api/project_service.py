"""drover.v1.ProjectService: projects and their git credential through the API, with the same service
functions as the host's `controlplane project` commands. A project-scoped token sees only its projects
(another is NOT_FOUND); creating or deleting a project needs an admin token not scoped to projects."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import pathlib
import re
from collections.abc import Iterable, Iterator
from typing import Any

import grpc
from sqlalchemy.orm import Session

from controlplane.api import auth
from controlplane.api.status import reporting
from controlplane.context import canonical_tree
from controlplane.domain import forge, scheduling
from controlplane.services import credentials, paging, projects, tenancy
from controlplane.store.engine import Store, aware
from controlplane.store.models import Project
from drover.core.workspace import redact_url
from drover.errors import AlreadyExists, FailedPrecondition, InvalidArgument
from drover.v1 import project_pb2, project_pb2_grpc

_USERINFO = re.compile(r"^[a-z][a-z0-9+.-]*://[^/@]*:[^/@]*@", re.IGNORECASE)


def rfc3339(value: dt.datetime | None) -> str:
    value = aware(value)
    return value.isoformat().replace("+00:00", "Z") if value else ""


def admission_message(p: Project) -> project_pb2.Project:
    """The project's admission settings (its per-Change caps and weight) as the API shows them; a row not
    flushed yet shows the defaults."""
    return project_pb2.Project(
        max_active_runs_per_change=p.max_active_runs_per_change or scheduling.DEFAULT_MAX_ACTIVE_RUNS_PER_CHANGE,
        weight=p.weight or scheduling.DEFAULT_WEIGHT,
        max_open_sandboxes_per_change=p.max_open_sandboxes_per_change or scheduling.DEFAULT_OPEN_SANDBOXES_PER_CHANGE,
    )


def project_message(p: Project) -> project_pb2.Project:
    """A project as the API shows it: its settings and what credential is set, never the secret."""
    out = project_pb2.Project(
        name=p.name,
        repo=redact_url(p.repo or ""),
        branch=p.branch,
        pool=p.pool or "",
        commands=list(p.commands or []),
        network=bool(p.network),
        monthly_budget_usd=p.monthly_budget_usd or 0.0,
        answer_window_minutes=p.answer_window_minutes,
        build_outputs=list(p.build_outputs or []),
        git_token_file=p.git_token_file or "",
        setup=list(p.setup or []),
        setup_network=bool(p.setup_network),
        env=dict(p.env or {}),
        git_name=p.git_name or "",
        git_email=p.git_email or "",
        branch_template=p.branch_template or "",
        cache_key_files=list(p.cache_key_files or []),
        created_at=rfc3339(p.created_at),
        updated_at=rfc3339(p.updated_at),
        forge=p.forge or "",
        forge_repo=p.forge_repo or "",
        forge_api_url=p.forge_api_url or "",
        forge_label=p.forge_label or "",
        max_fix_rounds=p.max_fix_rounds or 0,
        forge_budget_usd=p.forge_budget_usd or 0.0,
        forge_branch_template=p.forge_branch_template or "",
        forge_check_command=p.forge_check_command or "",
    )
    out.MergeFrom(admission_message(p))
    if p.git_credential_kind:
        out.git_credential.CopyFrom(
            project_pb2.GitCredential(
                kind=p.git_credential_kind,
                set_at=rfc3339(p.git_credential_set_at),
                set_by=p.git_credential_set_by or "",
                fingerprint=p.git_credential_fingerprint or "",
            )
        )
    if p.forge_credential_kind:
        out.forge_credential.CopyFrom(
            project_pb2.ForgeCredential(
                kind=p.forge_credential_kind,
                app_id=p.forge_app_id or 0,
                installation_id=p.forge_installation_id or 0,
                set_at=rfc3339(p.forge_credential_set_at),
                set_by=p.forge_credential_set_by or "",
                fingerprint=p.forge_credential_fingerprint or "",
            )
        )
    if p.webhook_secret_sealed:
        out.webhook_secret.CopyFrom(
            project_pb2.WebhookSecret(
                set=True, set_at=rfc3339(p.webhook_secret_set_at), set_by=p.webhook_secret_set_by or ""
            )
        )
    return out


def settings_from(message: project_pb2.Project, paths: Iterable[str]) -> dict[str, Any]:
    """The settings `paths` name, read from `message` (INVALID_ARGUMENT naming an unknown one)."""
    out: dict[str, Any] = {}
    for path in paths:
        if path not in projects.FIELDS:
            raise InvalidArgument(f"{path!r} is not a setting of a project", field="update_mask")
        value = getattr(message, path)
        if path == "setup_network":
            value = message.setup_network if message.HasField("setup_network") else True
        elif path == "max_fix_rounds":  # unset: the default; 0 is a setting (no fix rounds)
            value = message.max_fix_rounds if message.HasField("max_fix_rounds") else forge.DEFAULT_FIX_ROUNDS
        elif path == "max_active_runs_per_change":  # unset: the default; 0 is refused, naming it
            value = (
                message.max_active_runs_per_change
                if message.HasField(path)
                else scheduling.DEFAULT_MAX_ACTIVE_RUNS_PER_CHANGE
            )
        elif path == "weight":  # unset: the default; 0 is refused, naming it
            value = message.weight if message.HasField(path) else scheduling.DEFAULT_WEIGHT
        elif path == "max_open_sandboxes_per_change":  # likewise
            value = (
                message.max_open_sandboxes_per_change
                if message.HasField(path)
                else scheduling.DEFAULT_OPEN_SANDBOXES_PER_CHANGE
            )
        elif path == "env":
            value = dict(value)
        elif not isinstance(value, str | bool | float | int):
            value = tuple(value)
        out[path] = value
    if "git_token_file" in out:
        raise InvalidArgument(
            "a file on the control plane's host is set there (`controlplane project add --git-token-file`); "
            "through the API send the credential with SetGitCredential",
            field="project.git_token_file",
        )
    if _USERINFO.match(out.get("repo", "")):
        raise InvalidArgument(
            "credentials in the URL would be stored as they are; send them with SetGitCredential",
            field="project.repo",
        )
    if out.get("repo") and "://" not in out["repo"] and not out["repo"].startswith(("/", "git@")):
        raise InvalidArgument("must be a URL or an absolute path on the control plane's host", field="project.repo")
    return out


@contextlib.contextmanager
def in_project() -> Iterator[None]:
    """A setting refused by the service functions (which name `pool`, `setup[1]`) named as the request's
    field (`project.pool`, `project.setup[1]`)."""
    try:
        yield
    except (InvalidArgument, AlreadyExists, FailedPrecondition) as err:
        if not err.field or err.field.startswith(("project.", "update_mask")):
            raise
        raise type(err)(err.message.removeprefix(f"{err.field}: "), field=f"project.{err.field}") from None


def _repo_change(project: Project, changes: dict[str, Any]) -> None:
    """A credential goes to the project's repository: moving the repository while one is set would send
    it elsewhere, so the credential is deleted (or the file unset on the host) first."""
    if changes.get("repo", project.repo) != project.repo and (project.git_credential_kind or project.git_token_file):
        raise FailedPrecondition(
            "the project has a git credential, which would be sent to the new repository; delete it first",
            field="project.repo",
        )


class ProjectService(project_pb2_grpc.ProjectServiceServicer):
    def __init__(self, store: Store, sealer: credentials.Sealer) -> None:
        self.store, self.sealer = store, sealer

    @reporting
    async def CreateProject(
        self, request: project_pb2.CreateProjectRequest, context: grpc.aio.ServicerContext
    ) -> project_pb2.Project:
        who = auth.current()
        tenancy.unscoped(who.projects, "creating a project")
        name = request.project.name
        paths = [f for f in projects.FIELDS if f != "git_token_file" or request.project.git_token_file]
        with in_project():
            given = settings_from(request.project, paths)
            # proto3 cannot tell an unset double from 0: creating, 0 is the default (update sets 0: never park)
            given["answer_window_minutes"] = (
                given["answer_window_minutes"] or projects.ProjectSettings.answer_window_minutes
            )
            given["forge_branch_template"] = (  # unset when creating: the default (update refuses "")
                given["forge_branch_template"] or projects.ProjectSettings.forge_branch_template
            )
            want = projects.ProjectSettings(**given)
            # The repository is read before the transaction: a slow remote never holds the writer.
            branch, _ = await asyncio.to_thread(canonical_tree.checked_branch, want.repo, request.project.branch)
            want = dataclasses.replace(want, branch=branch)
            return await self.store.run(lambda s: project_message(projects.create_project(s, name, want, who.name)))

    @reporting
    async def UpdateProject(
        self, request: project_pb2.UpdateProjectRequest, context: grpc.aio.ServicerContext
    ) -> project_pb2.Project:
        who = auth.current()
        paths = sorted(set(request.update_mask.paths))
        if not paths:
            raise InvalidArgument("name the settings to change", field="update_mask")
        with in_project():
            return await self._update(who, request.project.name, settings_from(request.project, paths))

    async def _update(self, who: Any, name: str, changes: dict[str, Any]) -> project_pb2.Project:
        if "repo" in changes or "branch" in changes:

            def look(s: Session) -> tuple[str, str, str]:
                row = tenancy.visible_project(s, name, who.projects, field="project.name")
                _repo_change(row, changes)
                return row.repo, row.branch, self._credential(row)

            repo, branch, secret = await self.store.read(look)
            repo, branch = changes.get("repo", repo), changes.get("branch", branch)
            changes["branch"], _ = await asyncio.to_thread(canonical_tree.checked_branch, repo, branch, secret)

        def update(s: Session) -> project_pb2.Project:
            row = tenancy.visible_project(s, name, who.projects, field="project.name")
            _repo_change(row, changes)
            if changes.get("pool", row.pool) != row.pool:  # whose agents run its Tasks is the fleet's to say
                tenancy.unscoped(who.projects, "moving a project to another pool", "project.pool")
            return project_message(projects.update_project(s, row, changes, who.name))

        return await self.store.run(update)

    def _credential(self, project: Project) -> str:
        """What reads the project's repository: its token or deploy key (drover.core.git_auth tells them
        apart), else the token file on this host, else nothing."""
        try:
            kind, secret = credentials.git_credential(project, self.sealer)
        except ValueError as err:
            raise FailedPrecondition(str(err), field="project.repo") from None
        if not kind and project.git_token_file:  # the older way: the file on this host
            with contextlib.suppress(OSError):
                return pathlib.Path(project.git_token_file).read_text().strip()
        return secret

    @reporting
    async def GetProject(
        self, request: project_pb2.GetProjectRequest, context: grpc.aio.ServicerContext
    ) -> project_pb2.Project:
        scope = auth.current().projects
        return await self.store.read(lambda s: project_message(tenancy.visible_project(s, request.name, scope)))

    @reporting
    async def ListProjects(
        self, request: project_pb2.ListProjectsRequest, context: grpc.aio.ServicerContext
    ) -> project_pb2.ListProjectsResponse:
        scope = auth.current().projects
        size = paging.page_size(request.page_size, 100, 1000)
        after = paging.decode(request.page_token, (str,))[0] if request.page_token else ""

        def page(s: Session) -> paging.Page[project_pb2.Project]:
            rows = projects.list_projects(s, scope, after, size + 1)
            return paging.take(rows, size, project_message, lambda m: m.ByteSize(), lambda r: paging.encode(r.name))

        found = await self.store.read(page)
        return project_pb2.ListProjectsResponse(projects=found.items, next_page_token=found.next_token)

    @reporting
    async def DeleteProject(
        self, request: project_pb2.DeleteProjectRequest, context: grpc.aio.ServicerContext
    ) -> project_pb2.DeleteProjectResponse:
        who = auth.current()

        def delete(s: Session) -> None:
            tenancy.visible_project(s, request.name, who.projects)
            tenancy.unscoped(who.projects, "deleting a project")
            projects.remove_project(s, request.name, who.name)

        await self.store.run(delete)
        return project_pb2.DeleteProjectResponse()

    @reporting
    async def SetGitCredential(
        self, request: project_pb2.SetGitCredentialRequest, context: grpc.aio.ServicerContext
    ) -> project_pb2.Project:
        who = auth.current()

        def put(s: Session) -> project_pb2.Project:
            tenancy.visible_project(s, request.project, who.projects, field="project")
            row = credentials.set_git_credential(
                s, self.sealer, request.project, request.kind, request.secret, who.name
            )
            return project_message(row)

        return await self.store.run(put)

    @reporting
    async def DeleteGitCredential(
        self, request: project_pb2.DeleteGitCredentialRequest, context: grpc.aio.ServicerContext
    ) -> project_pb2.Project:
        who = auth.current()

        def delete(s: Session) -> project_pb2.Project:
            tenancy.visible_project(s, request.project, who.projects, field="project")
            return project_message(credentials.delete_git_credential(s, request.project, who.name))

        return await self.store.run(delete)

    @reporting
    async def SetForgeCredential(
        self, request: project_pb2.SetForgeCredentialRequest, context: grpc.aio.ServicerContext
    ) -> project_pb2.Project:
        who = auth.current()
        r = request

        def put(s: Session) -> project_pb2.Project:
            tenancy.visible_project(s, r.project, who.projects, field="project")
            row = credentials.set_forge_credential(
                s, self.sealer, r.project, r.kind, r.secret, who.name, r.app_id, r.installation_id
            )
            return project_message(row)

        return await self.store.run(put)

    @reporting
    async def DeleteForgeCredential(
        self, request: project_pb2.DeleteForgeCredentialRequest, context: grpc.aio.ServicerContext
    ) -> project_pb2.Project:
        who = auth.current()

        def delete(s: Session) -> project_pb2.Project:
            tenancy.visible_project(s, request.project, who.projects, field="project")
            return project_message(credentials.delete_forge_credential(s, request.project, who.name))

        return await self.store.run(delete)

    @reporting
    async def RotateWebhookSecret(
        self, request: project_pb2.RotateWebhookSecretRequest, context: grpc.aio.ServicerContext
    ) -> project_pb2.RotateWebhookSecretResponse:
        """The new secret is in this answer and nowhere else: the row holds it sealed."""
        who = auth.current()

        def rotate(s: Session) -> project_pb2.RotateWebhookSecretResponse:
            tenancy.visible_project(s, request.project, who.projects, field="project")
            row, secret = credentials.rotate_webhook_secret(s, self.sealer, request.project, who.name)
            return project_pb2.RotateWebhookSecretResponse(project=project_message(row), secret=secret)

        return await self.store.run(rotate)
