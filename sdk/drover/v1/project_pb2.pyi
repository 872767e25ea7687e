from google.protobuf import field_mask_pb2 as _field_mask_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Project(_message.Message):
    __slots__ = ("name", "repo", "branch", "pool", "commands", "network", "monthly_budget_usd", "answer_window_minutes", "build_outputs", "git_token_file", "git_credential", "setup", "setup_network", "env", "git_name", "git_email", "branch_template", "cache_key_files", "created_at", "updated_at", "forge", "forge_repo", "forge_api_url", "forge_label", "max_fix_rounds", "forge_credential", "webhook_secret", "forge_budget_usd", "forge_branch_template", "forge_check_command", "max_active_runs_per_change", "weight", "max_open_sandboxes_per_change")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    REPO_FIELD_NUMBER: _ClassVar[int]
    BRANCH_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    COMMANDS_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    MONTHLY_BUDGET_USD_FIELD_NUMBER: _ClassVar[int]
    ANSWER_WINDOW_MINUTES_FIELD_NUMBER: _ClassVar[int]
    BUILD_OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    GIT_TOKEN_FILE_FIELD_NUMBER: _ClassVar[int]
    GIT_CREDENTIAL_FIELD_NUMBER: _ClassVar[int]
    SETUP_FIELD_NUMBER: _ClassVar[int]
    SETUP_NETWORK_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    GIT_NAME_FIELD_NUMBER: _ClassVar[int]
    GIT_EMAIL_FIELD_NUMBER: _ClassVar[int]
    BRANCH_TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    CACHE_KEY_FILES_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    FORGE_FIELD_NUMBER: _ClassVar[int]
    FORGE_REPO_FIELD_NUMBER: _ClassVar[int]
    FORGE_API_URL_FIELD_NUMBER: _ClassVar[int]
    FORGE_LABEL_FIELD_NUMBER: _ClassVar[int]
    MAX_FIX_ROUNDS_FIELD_NUMBER: _ClassVar[int]
    FORGE_CREDENTIAL_FIELD_NUMBER: _ClassVar[int]
    WEBHOOK_SECRET_FIELD_NUMBER: _ClassVar[int]
    FORGE_BUDGET_USD_FIELD_NUMBER: _ClassVar[int]
    FORGE_BRANCH_TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    FORGE_CHECK_COMMAND_FIELD_NUMBER: _ClassVar[int]
    MAX_ACTIVE_RUNS_PER_CHANGE_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    MAX_OPEN_SANDBOXES_PER_CHANGE_FIELD_NUMBER: _ClassVar[int]
    name: str
    repo: str
    branch: str
    pool: str
    commands: _containers.RepeatedScalarFieldContainer[str]
    network: bool
    monthly_budget_usd: float
    answer_window_minutes: float
    build_outputs: _containers.RepeatedScalarFieldContainer[str]
    git_token_file: str
    git_credential: GitCredential
    setup: _containers.RepeatedScalarFieldContainer[str]
    setup_network: bool
    env: _containers.ScalarMap[str, str]
    git_name: str
    git_email: str
    branch_template: str
    cache_key_files: _containers.RepeatedScalarFieldContainer[str]
    created_at: str
    updated_at: str
    forge: str
    forge_repo: str
    forge_api_url: str
    forge_label: str
    max_fix_rounds: int
    forge_credential: ForgeCredential
    webhook_secret: WebhookSecret
    forge_budget_usd: float
    forge_branch_template: str
    forge_check_command: str
    max_active_runs_per_change: int
    weight: int
    max_open_sandboxes_per_change: int
    def __init__(self, name: _Optional[str] = ..., repo: _Optional[str] = ..., branch: _Optional[str] = ..., pool: _Optional[str] = ..., commands: _Optional[_Iterable[str]] = ..., network: _Optional[bool] = ..., monthly_budget_usd: _Optional[float] = ..., answer_window_minutes: _Optional[float] = ..., build_outputs: _Optional[_Iterable[str]] = ..., git_token_file: _Optional[str] = ..., git_credential: _Optional[_Union[GitCredential, _Mapping]] = ..., setup: _Optional[_Iterable[str]] = ..., setup_network: _Optional[bool] = ..., env: _Optional[_Mapping[str, str]] = ..., git_name: _Optional[str] = ..., git_email: _Optional[str] = ..., branch_template: _Optional[str] = ..., cache_key_files: _Optional[_Iterable[str]] = ..., created_at: _Optional[str] = ..., updated_at: _Optional[str] = ..., forge: _Optional[str] = ..., forge_repo: _Optional[str] = ..., forge_api_url: _Optional[str] = ..., forge_label: _Optional[str] = ..., max_fix_rounds: _Optional[int] = ..., forge_credential: _Optional[_Union[ForgeCredential, _Mapping]] = ..., webhook_secret: _Optional[_Union[WebhookSecret, _Mapping]] = ..., forge_budget_usd: _Optional[float] = ..., forge_branch_template: _Optional[str] = ..., forge_check_command: _Optional[str] = ..., max_active_runs_per_change: _Optional[int] = ..., weight: _Optional[int] = ..., max_open_sandboxes_per_change: _Optional[int] = ...) -> None: ...

class GitCredential(_message.Message):
    __slots__ = ("kind", "set_at", "set_by", "fingerprint")
    KIND_FIELD_NUMBER: _ClassVar[int]
    SET_AT_FIELD_NUMBER: _ClassVar[int]
    SET_BY_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    kind: str
    set_at: str
    set_by: str
    fingerprint: str
    def __init__(self, kind: _Optional[str] = ..., set_at: _Optional[str] = ..., set_by: _Optional[str] = ..., fingerprint: _Optional[str] = ...) -> None: ...

class ForgeCredential(_message.Message):
    __slots__ = ("kind", "app_id", "installation_id", "set_at", "set_by", "fingerprint")
    KIND_FIELD_NUMBER: _ClassVar[int]
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    INSTALLATION_ID_FIELD_NUMBER: _ClassVar[int]
    SET_AT_FIELD_NUMBER: _ClassVar[int]
    SET_BY_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    kind: str
    app_id: int
    installation_id: int
    set_at: str
    set_by: str
    fingerprint: str
    def __init__(self, kind: _Optional[str] = ..., app_id: _Optional[int] = ..., installation_id: _Optional[int] = ..., set_at: _Optional[str] = ..., set_by: _Optional[str] = ..., fingerprint: _Optional[str] = ...) -> None: ...

class WebhookSecret(_message.Message):
    __slots__ = ("set", "set_at", "set_by")
    SET_FIELD_NUMBER: _ClassVar[int]
    SET_AT_FIELD_NUMBER: _ClassVar[int]
    SET_BY_FIELD_NUMBER: _ClassVar[int]
    set: bool
    set_at: str
    set_by: str
    def __init__(self, set: _Optional[bool] = ..., set_at: _Optional[str] = ..., set_by: _Optional[str] = ...) -> None: ...

class CreateProjectRequest(_message.Message):
    __slots__ = ("project",)
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    project: Project
    def __init__(self, project: _Optional[_Union[Project, _Mapping]] = ...) -> None: ...

class UpdateProjectRequest(_message.Message):
    __slots__ = ("project", "update_mask")
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    UPDATE_MASK_FIELD_NUMBER: _ClassVar[int]
    project: Project
    update_mask: _field_mask_pb2.FieldMask
    def __init__(self, project: _Optional[_Union[Project, _Mapping]] = ..., update_mask: _Optional[_Union[_field_mask_pb2.FieldMask, _Mapping]] = ...) -> None: ...

class GetProjectRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListProjectsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListProjectsResponse(_message.Message):
    __slots__ = ("projects", "next_page_token")
    PROJECTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    projects: _containers.RepeatedCompositeFieldContainer[Project]
    next_page_token: str
    def __init__(self, projects: _Optional[_Iterable[_Union[Project, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DeleteProjectRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteProjectResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SetGitCredentialRequest(_message.Message):
    __slots__ = ("project", "kind", "secret")
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    project: str
    kind: str
    secret: str
    def __init__(self, project: _Optional[str] = ..., kind: _Optional[str] = ..., secret: _Optional[str] = ...) -> None: ...

class DeleteGitCredentialRequest(_message.Message):
    __slots__ = ("project",)
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    project: str
    def __init__(self, project: _Optional[str] = ...) -> None: ...

class SetForgeCredentialRequest(_message.Message):
    __slots__ = ("project", "kind", "secret", "app_id", "installation_id")
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    INSTALLATION_ID_FIELD_NUMBER: _ClassVar[int]
    project: str
    kind: str
    secret: str
    app_id: int
    installation_id: int
    def __init__(self, project: _Optional[str] = ..., kind: _Optional[str] = ..., secret: _Optional[str] = ..., app_id: _Optional[int] = ..., installation_id: _Optional[int] = ...) -> None: ...

class DeleteForgeCredentialRequest(_message.Message):
    __slots__ = ("project",)
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    project: str
    def __init__(self, project: _Optional[str] = ...) -> None: ...

class RotateWebhookSecretRequest(_message.Message):
    __slots__ = ("project",)
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    project: str
    def __init__(self, project: _Optional[str] = ...) -> None: ...

class RotateWebhookSecretResponse(_message.Message):
    __slots__ = ("project", "secret")
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    project: Project
    secret: str
    def __init__(self, project: _Optional[_Union[Project, _Mapping]] = ..., secret: _Optional[str] = ...) -> None: ...
