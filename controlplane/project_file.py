"""`controlplane project apply FILE`: the projects a team keeps as a reviewed TOML file (issue 28). Each
`[projects.NAME]` table names settings of `project add` (the keys of ProjectSettings, `allow` for its
`commands`) and the files holding the project's secrets, never a secret itself. A project not in the
database is added; one that is gets the settings the file names, the others stay; one the file leaves
out is never removed. Every project of the file is written in one transaction, so a bad file changes
nothing; the checks are the services' (`put_project`, `set_forge_credential`, `set_webhook_secret`)."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import tomllib
from typing import TYPE_CHECKING, Any

from controlplane.services.projects import ProjectSettings
from drover.errors import DroverError, InvalidArgument

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from controlplane.services.credentials import Sealer
    from controlplane.store.engine import Store

SETTINGS = {("allow" if f.name == "commands" else f.name): f for f in dataclasses.fields(ProjectSettings)}
"""A table's setting keys and the ProjectSettings field each sets: the one mapping of file to settings."""
PATHS = ("git_token_file",)
"""Settings that name a file on this host: resolved against the TOML file's directory, and read here."""
SECRET_KEYS = {
    "forge_token_file": str,
    "forge_app_id": int,
    "forge_installation_id": int,
    "forge_app_key_file": str,
    "webhook_secret_file": str,
}
"""Keys for the project's sealed secrets: each file is read once and its content sealed, never stored."""
CREDENTIAL_FIELDS = {  # set_forge_credential's fields; its `secret` is the key of the file it came from
    "kind": "forge_token_file",
    "app_id": "forge_app_id",
    "installation_id": "forge_installation_id",
    "project": "forge",
}


@dataclasses.dataclass(frozen=True)
class ForgeCredential:
    kind: str
    """"token" or "app"."""
    secret: str
    key: str
    """The file's key in the table (`forge_token_file` or `forge_app_key_file`), for errors."""
    app_id: int = 0
    installation_id: int = 0


@dataclasses.dataclass(frozen=True)
class ProjectEntry:
    """One `[projects.NAME]` table, decoded and its files read."""

    name: str
    settings: dict[str, Any]
    """ProjectSettings field -> value, only those the table names."""
    forge_credential: ForgeCredential | None = None
    webhook_secret: str | None = None

    @property
    def needs_key(self) -> bool:
        return self.forge_credential is not None or self.webhook_secret is not None


def key_of(field: str) -> str:
    """The file's key for a service's field name (`commands` -> `allow`, `env[X]` stays)."""
    head, bracket, rest = field.partition("[")
    key = next((k for k, f in SETTINGS.items() if f.name == head), head)
    return key + bracket + rest


def at(err: DroverError, where: str) -> DroverError:
    """`err` again, its field the place in the file (`projects.web.forge_repo`)."""
    message = err.message.removeprefix(f"{err.field}: ") if err.field else err.message
    return type(err)(message, field=where)


def read_file(path: pathlib.Path) -> list[ProjectEntry]:
    """The projects of the TOML file at `path`; InvalidArgument naming the key at fault."""
    try:
        doc = tomllib.loads(path.read_text())
    except OSError as err:
        raise InvalidArgument(f"cannot read {path}: {err.strerror or err}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise InvalidArgument(f"{path} is not TOML: {err}") from None
    for key in doc:
        if key != "projects":
            raise InvalidArgument("unknown key (the file holds [projects.NAME] tables)", field=key)
    tables = doc.get("projects", {})
    if not isinstance(tables, dict):
        raise InvalidArgument("must be a table of [projects.NAME] tables", field="projects")
    for name, table in tables.items():
        if not isinstance(table, dict):
            raise InvalidArgument(f"must be a table, not {_type(table)}", field=f"projects.{name}")
    return [entry(name, table, path.resolve().parent) for name, table in tables.items()]


def entry(name: str, table: dict[str, Any], here: pathlib.Path) -> ProjectEntry:
    where = f"projects.{name}"
    for key, value in table.items():
        if key not in SETTINGS and key not in SECRET_KEYS:
            raise InvalidArgument(_unknown(key), field=f"{where}.{key}")
        _check_type(f"{where}.{key}", value, SECRET_KEYS.get(key) or _kind(SETTINGS.get(key)))
    settings: dict[str, Any] = {}
    for key, value in table.items():
        if key in SETTINGS:
            settings[SETTINGS[key].name] = value
    for key in PATHS:
        if settings.get(key):
            path = here / settings[key]
            _secret(path, f"{where}.{key}")  # readable now, read again when a run starts
            settings[key] = str(path.resolve())
    repo = settings.get("repo", "")
    if repo and "://" not in repo and not repo.startswith("git@") and (here / repo).exists():
        settings["repo"] = str((here / repo).resolve())
    webhook = table.get("webhook_secret_file")
    return ProjectEntry(
        name,
        settings,
        _forge_credential(table, here, where),
        _secret(here / webhook, f"{where}.webhook_secret_file") if webhook else None,
    )


def _forge_credential(table: dict[str, Any], here: pathlib.Path, where: str) -> ForgeCredential | None:
    token, key = table.get("forge_token_file"), table.get("forge_app_key_file")
    app_id, installation_id = table.get("forge_app_id", 0), table.get("forge_installation_id", 0)
    if token and key:
        raise InvalidArgument(
            "give forge_token_file or forge_app_key_file, not both", field=f"{where}.forge_token_file"
        )
    if token:
        for name in ("forge_app_id", "forge_installation_id"):
            if name in table:
                raise InvalidArgument("only with forge_app_key_file (a GitHub App)", field=f"{where}.{name}")
        return ForgeCredential("token", _secret(here / token, f"{where}.forge_token_file"), "forge_token_file")
    if key:
        for name in ("forge_app_id", "forge_installation_id"):
            if name not in table:
                raise InvalidArgument("a GitHub App needs its id and its installation's", field=f"{where}.{name}")
        pem = _secret(here / key, f"{where}.forge_app_key_file")
        return ForgeCredential("app", pem, "forge_app_key_file", app_id, installation_id)
    for name in ("forge_app_id", "forge_installation_id"):
        if name in table:
            raise InvalidArgument("only with forge_app_key_file (a GitHub App)", field=f"{where}.{name}")
    return None


def _secret(path: pathlib.Path, where: str) -> str:
    """The file's text; InvalidArgument naming the key and the path (never the content) when unreadable."""
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        why = err.strerror if isinstance(err, OSError) and err.strerror else "not a readable text file"
        raise InvalidArgument(f"cannot read {path}: {why}", field=where) from None


def _unknown(key: str) -> str:
    if any(word in key for word in ("token", "secret", "key", "password")) and not key.endswith("_file"):
        return "unknown key (a secret is never written in the file: name the file holding it, e.g. forge_token_file)"
    return "unknown key"


def _kind(field: dataclasses.Field[Any] | None) -> type:
    """The TOML type a setting takes, from its default in ProjectSettings."""
    assert field is not None
    factory = field.default_factory
    default = factory() if callable(factory) else field.default
    return dict if isinstance(default, dict) else type(default)


def _check_type(where: str, value: Any, kind: type) -> None:
    ok = {
        str: isinstance(value, str),
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, int | float) and not isinstance(value, bool),
        tuple: isinstance(value, list) and all(isinstance(v, str) for v in value),
        dict: isinstance(value, dict) and all(isinstance(v, str) for v in value.values()),
    }[kind]
    if not ok:
        wanted = {
            str: "a string",
            bool: "true or false",
            int: "an integer",
            float: "a number",
            tuple: "a list of strings",
            dict: "a table of strings",
        }[kind]
        raise InvalidArgument(f"must be {wanted}, not {_type(value)}", field=where)


def _type(value: Any) -> str:
    return {dict: "a table", list: "a list", str: "a string", bool: "a boolean"}.get(type(value), type(value).__name__)


class _DryRun(Exception):
    def __init__(self, outcome: list[str]) -> None:
        self.outcome = outcome


def apply_file(store: Store, path: pathlib.Path, key_file: str, by: str, dry_run: bool = False) -> list[str]:
    """Add or update the projects of the file at `path` in one transaction (`dry_run`: checked the
    same way, then rolled back); a line per project: `web: added`, `api: updated (forge_repo)`,
    `docs: unchanged`. `key_file` is the credential key file (the secrets are sealed with it)."""
    from controlplane.services.credentials import NO_KEY, Sealer

    entries = read_file(path)
    branches = _branches(store, entries)
    sealer = Sealer.from_config(key_file) if any(e.needs_key for e in entries) else NO_KEY

    def apply(s: Session) -> list[str]:
        outcome = [_apply_one(s, sealer, e, branches.get(e.name), by) for e in entries]
        if dry_run:
            raise _DryRun(outcome)  # everything checked as for real; the transaction rolls back
        return outcome

    try:
        return store.transaction(apply)
    except _DryRun as done:
        return done.outcome


def _branches(store: Store, entries: list[ProjectEntry]) -> dict[str, str]:
    """For each project whose repository or branch the file sets anew (or that is new), its branch checked
    against the repository (the file's, else the one its HEAD names), as `project add` does; read outside
    the transaction, as reading a repository may take a while."""
    from controlplane.context.canonical_tree import checked_branch
    from controlplane.services.projects import settings_of
    from controlplane.store.models import Project

    def stored(s: Session) -> dict[str, tuple[str, str, str]]:
        rows = [s.get(Project, e.name) for e in entries]
        return {r.name: (settings_of(r).repo, settings_of(r).branch, r.git_token_file or "") for r in rows if r}

    now = store.transaction(stored)
    found = {}
    for e in entries:
        old = now.get(e.name)
        repo = e.settings.get("repo", old[0] if old else "")
        branch = e.settings.get("branch", old[1] if old else "")
        if old and (repo, branch) == old[:2]:
            continue
        token_file = e.settings.get("git_token_file", old[2] if old else "")
        token = pathlib.Path(token_file).read_text().strip() if token_file and os.path.exists(token_file) else ""
        try:
            found[e.name] = checked_branch(repo, branch, token)[0]
        except DroverError as err:
            raise at(err, f"projects.{e.name}.{err.field or 'repo'}") from None
    return found


def _apply_one(s: Session, sealer: Sealer, e: ProjectEntry, branch: str | None, by: str) -> str:
    """One project's settings, then its secrets; its line of the output."""
    from controlplane.services import credentials
    from controlplane.services.projects import put_project
    from controlplane.store.models import Project

    wanted = dict(e.settings) | ({"branch": branch} if branch else {})
    try:
        done, changed = put_project(s, e.name, wanted, by)
    except DroverError as err:
        raise at(err, f"projects.{e.name}.{key_of(err.field or 'name')}") from None
    keys = [key_of(field) for field in changed]
    row = s.get(Project, e.name)
    assert row is not None
    c = e.forge_credential
    if c and not credentials.forge_credential_is(row, c.kind, c.secret, c.app_id, c.installation_id):
        try:
            credentials.set_forge_credential(s, sealer, e.name, c.kind, c.secret, by, c.app_id, c.installation_id)
        except DroverError as err:
            raise at(err, f"projects.{e.name}.{CREDENTIAL_FIELDS.get(err.field or '', c.key)}") from None
        keys.append(c.key)
    if e.webhook_secret is not None and not _webhook_secret_is(row, sealer, e.webhook_secret):
        try:
            credentials.set_webhook_secret(s, sealer, e.name, e.webhook_secret, by)
        except DroverError as err:
            field = "forge" if err.field == "project" else "webhook_secret_file"
            raise at(err, f"projects.{e.name}.{field}") from None
        keys.append("webhook_secret_file")
    if done == "added" or not keys:
        return f"{e.name}: {done}"
    return f"{e.name}: updated ({', '.join(keys)})"


def _webhook_secret_is(row: Any, sealer: Sealer, secret: str) -> bool:
    from controlplane.services.credentials import webhook_secret

    try:
        return webhook_secret(row, sealer) == secret.strip().encode()
    except ValueError:  # sealed with a key this sealer lacks: set it again
        return False
