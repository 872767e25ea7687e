"""Projects and tokens through the API (`client.projects`, `client.tokens`): what an admin does from
anywhere the control plane is reachable, with the same checks as the host's `controlplane` commands."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import grpc
from google.protobuf import field_mask_pb2

from drover.errors import InvalidArgument, from_rpc_error
from drover.models import CreatedToken, Project, Token, WebhookSecretRotated, from_proto
from drover.v1 import project_pb2, project_pb2_grpc, token_pb2, token_pb2_grpc

Metadata = tuple[tuple[str, str], ...]
ProjectList = list[Project]  # named here: inside the classes `list` is their method
TokenList = list[Token]
SETTINGS = frozenset(f.name for f in project_pb2.Project.DESCRIPTOR.fields) - {
    "name",
    "git_credential",
    "forge_credential",
    "webhook_secret",
    "created_at",
    "updated_at",
}
"""What a project is set to (the keyword arguments of `create` and `update`)."""


def _call(fn: Callable[..., Any], request: Any, metadata: Metadata) -> Any:
    try:
        return fn(request, metadata=metadata)
    except grpc.RpcError as err:
        raise from_rpc_error(err) from None


def project_message(name: str, settings: dict[str, Any]) -> project_pb2.Project:
    """A Project message with `settings` set (InvalidArgument naming an unknown one)."""
    unknown = sorted(set(settings) - SETTINGS)
    if unknown:
        raise InvalidArgument(f"no setting {unknown[0]!r}; known: {', '.join(sorted(SETTINGS))}", field="project")
    out = project_pb2.Project(name=name)
    for key, value in settings.items():
        field = getattr(out, key)
        if key == "env":
            field.update({str(k): str(v) for k, v in dict(value).items()})
        elif isinstance(value, (list, tuple)):
            field.extend(str(v) for v in value)
        else:
            setattr(out, key, value)
    return out


class Projects:
    """ProjectService: `client.projects.create("web", repo="https://...")`."""

    def __init__(self, channel: grpc.Channel, metadata: Metadata) -> None:
        self._stub = project_pb2_grpc.ProjectServiceStub(channel)
        self._metadata = metadata

    def create(self, name: str, **settings: Any) -> Project:
        """A new project; the control plane reads the repository and checks the branch first."""
        request = project_pb2.CreateProjectRequest(project=project_message(name, settings))
        return from_proto(_call(self._stub.CreateProject, request, self._metadata), Project)

    def update(self, name: str, **settings: Any) -> Project:
        """Set the given settings; the others stay (`update("web", setup=["pip install -e ."])`)."""
        mask = field_mask_pb2.FieldMask(paths=sorted(settings))
        request = project_pb2.UpdateProjectRequest(project=project_message(name, settings), update_mask=mask)
        return from_proto(_call(self._stub.UpdateProject, request, self._metadata), Project)

    def get(self, name: str) -> Project:
        answer = _call(self._stub.GetProject, project_pb2.GetProjectRequest(name=name), self._metadata)
        return from_proto(answer, Project)

    def list(self) -> ProjectList:
        """Every project this token may use, by name."""
        found: ProjectList = []
        token = ""
        while True:
            answer = _call(self._stub.ListProjects, project_pb2.ListProjectsRequest(page_token=token), self._metadata)
            found += [from_proto(p, Project) for p in answer.projects]
            token = answer.next_page_token
            if not token:
                return found

    def delete(self, name: str) -> None:
        _call(self._stub.DeleteProject, project_pb2.DeleteProjectRequest(name=name), self._metadata)

    def set_git_credential(self, name: str, kind: str, secret: str) -> Project:
        """Send the project's git credential once (`token` or `ssh_key`); it is never answered back."""
        request = project_pb2.SetGitCredentialRequest(project=name, kind=kind, secret=secret)
        return from_proto(_call(self._stub.SetGitCredential, request, self._metadata), Project)

    def delete_git_credential(self, name: str) -> Project:
        request = project_pb2.DeleteGitCredentialRequest(project=name)
        return from_proto(_call(self._stub.DeleteGitCredential, request, self._metadata), Project)

    def set_forge_credential(
        self, name: str, kind: str, secret: str, *, app_id: int = 0, installation_id: int = 0
    ) -> Project:
        """Send the credential Drover uses on the project's forge once: `token` (a fine-grained token) or
        `app` (a GitHub App: its id, installation id and private key PEM as `secret`); never answered back."""
        request = project_pb2.SetForgeCredentialRequest(
            project=name, kind=kind, secret=secret, app_id=app_id, installation_id=installation_id
        )
        return from_proto(_call(self._stub.SetForgeCredential, request, self._metadata), Project)

    def delete_forge_credential(self, name: str) -> Project:
        request = project_pb2.DeleteForgeCredentialRequest(project=name)
        return from_proto(_call(self._stub.DeleteForgeCredential, request, self._metadata), Project)

    def rotate_webhook_secret(self, name: str) -> WebhookSecretRotated:
        """A new webhook secret for the project: in this answer only, to paste into the forge's settings."""
        request = project_pb2.RotateWebhookSecretRequest(project=name)
        return from_proto(_call(self._stub.RotateWebhookSecret, request, self._metadata), WebhookSecretRotated)


class Tokens:
    """TokenService: `client.tokens.create("ci", role="submit", projects=["web"]).secret`."""

    def __init__(self, channel: grpc.Channel, metadata: Metadata) -> None:
        self._stub = token_pb2_grpc.TokenServiceStub(channel)
        self._metadata = metadata

    def create(
        self,
        name: str,
        *,
        kind: str = "user",
        role: str = "",
        pool: str = "",
        projects: Sequence[str] = (),
        monthly_budget_usd: float = 0.0,
        expires_in: str = "",
    ) -> CreatedToken:
        """Mint a token no stronger than this client's; its secret is in the answer, and only there."""
        request = token_pb2.CreateTokenRequest(
            name=name,
            kind=kind,
            role=role,
            pool=pool,
            projects=list(projects),
            monthly_budget_usd=monthly_budget_usd,
            expires_in=expires_in,
        )
        return from_proto(_call(self._stub.CreateToken, request, self._metadata), CreatedToken)

    def list(self, include_revoked: bool = False) -> TokenList:
        found: TokenList = []
        token = ""
        while True:
            request = token_pb2.ListTokensRequest(include_revoked=include_revoked, page_token=token)
            answer = _call(self._stub.ListTokens, request, self._metadata)
            found += [from_proto(t, Token) for t in answer.tokens]
            token = answer.next_page_token
            if not token:
                return found

    def revoke(self, name: str, kind: str = "") -> int:
        """Revoke every live token of this name (and kind); answers how many."""
        request = token_pb2.RevokeTokenRequest(name=name, kind=kind)
        return int(_call(self._stub.RevokeToken, request, self._metadata).revoked)
