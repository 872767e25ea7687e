"""A project's git credential sent through the API (seed 003 `PUT .../credentials/git`): sealed with
the operator's key (Fernet: AES-128-CBC with HMAC-SHA256, from `cryptography`) before it is stored,
never returned, logged or put in an event; opened only to hand it to a run of the project's pool.

The key is the operator's: the file `credential_key_file` names, or DROVER_CREDENTIAL_KEY (a Fernet
key: 32 url-safe base64 bytes, `controlplane credential-key` makes one). Several keys may be given,
newest first, one per line (or comma-separated): sealing uses the first, opening tries each, so an
operator rotates the key by prepending a new one and, later, `controlplane credential-reseal`."""

from __future__ import annotations

import hashlib
import os
import pathlib
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from controlplane.store.events import add_event
from controlplane.store.models import Project, utcnow
from drover.errors import FailedPrecondition, InvalidArgument, NotFound

KINDS = ("token", "ssh_key")
SECRET_ENV = {"token": "DROVER_GIT_TOKEN", "ssh_key": "DROVER_GIT_SSH_KEY"}
"""The name each kind of git secret travels under in a run's secret_env (agentd/run/supervisor.py)."""
MAX_SECRET = 16 * 1024
KEY_ENV = "DROVER_CREDENTIAL_KEY"


class CredentialLocked(FailedPrecondition):
    """A project's stored git credential does not open with the configured key (lost or replaced)."""


class Sealer:
    """Seals and opens credentials with the operator's keys (None: no key configured). One instance is
    shared by everything in a control plane that opens credentials; `load` swaps its keys in place
    (SIGHUP), so a rotation reaches them all at once."""

    def __init__(self, keys: list[bytes]) -> None:
        self._fernet = _fernet(keys)

    def load(self, key_file: str = "") -> None:
        """Take the keys `from_config` reads; ValueError (the keys in use kept) when they are not valid."""
        self._fernet = Sealer.from_config(key_file)._fernet

    @classmethod
    def from_config(cls, key_file: str = "") -> Sealer:
        """The keys of `key_file`, else of DROVER_CREDENTIAL_KEY; ValueError naming the source when a
        key is not a Fernet key."""
        text, source = "", ""
        if key_file:
            try:
                text, source = pathlib.Path(key_file).read_text(), key_file
            except OSError as err:
                raise ValueError(f"credential key file {key_file}: {err.strerror or err}") from None
        elif os.environ.get(KEY_ENV):
            text, source = os.environ[KEY_ENV], KEY_ENV
        return cls.from_text(text, source)

    @classmethod
    def from_text(cls, text: str, source: str = "the key") -> Sealer:
        """The keys in `text`, newest first, one a line or comma-separated; ValueError naming `source`."""
        keys = [k.strip().encode() for k in text.replace(",", "\n").splitlines() if k.strip()]
        try:
            return cls(keys)
        except ValueError:
            raise ValueError(
                f"{source}: not a Fernet key (32 url-safe base64 bytes; `controlplane credential-key` makes one)"
            ) from None

    @property
    def configured(self) -> bool:
        return self._fernet is not None

    def seal(self, secret: str) -> str:
        if self._fernet is None:
            raise FailedPrecondition(
                f"no credential key: set credential_key_file or {KEY_ENV} on the control plane", field="secret"
            )
        return self._fernet.encrypt(secret.encode()).decode()

    def open(self, sealed: str) -> str:
        """The secret; ValueError when no key opens it (a lost or wrong key)."""
        from cryptography.fernet import InvalidToken

        if self._fernet is None:
            raise ValueError(f"no credential key to open the stored credential ({KEY_ENV})")
        try:
            return self._fernet.decrypt(sealed.encode()).decode()
        except InvalidToken:
            raise ValueError("the stored git credential does not open with the configured key") from None

    def reseal(self, sealed: str) -> str:
        """Sealed again with the newest key (key rotation)."""
        assert self._fernet is not None
        return self._fernet.rotate(sealed.encode()).decode()


def _fernet(keys: list[bytes]) -> Any:
    if not keys:
        return None
    from cryptography.fernet import Fernet, MultiFernet

    return MultiFernet([Fernet(k) for k in keys])


NO_KEY = Sealer([])
"""No key configured: a sealed credential does not open."""


def new_key() -> str:
    from cryptography.fernet import Fernet

    return Fernet.generate_key().decode()


def fingerprint(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()[:12]


def set_git_credential(s: Session, sealer: Sealer, project: str, kind: str, secret: str, by: str) -> Project:
    """Store (or replace) the project's git credential, sealed. The event names who, never what."""
    row = s.get(Project, project)
    if row is None:
        raise NotFound(f"no project {project!r}", field="project")
    if kind not in KINDS:
        raise InvalidArgument(f"must be one of {', '.join(KINDS)}", field="kind")
    secret = secret.strip() + ("\n" if kind == "ssh_key" else "")
    if not secret.strip() or len(secret) > MAX_SECRET or "\x00" in secret:
        raise InvalidArgument(f"must be 1 to {MAX_SECRET} bytes, without NUL", field="secret")
    if kind == "token" and any(c.isspace() for c in secret):
        raise InvalidArgument("a token has no whitespace", field="secret")
    if kind == "ssh_key" and "PRIVATE KEY-----" not in secret:
        raise InvalidArgument("must be a private key in OpenSSH or PEM form", field="secret")
    row.git_credential_sealed = sealer.seal(secret)
    row.git_credential_kind = kind
    row.git_credential_fingerprint = fingerprint(secret)
    row.git_credential_set_at = utcnow()
    row.git_credential_set_by = by
    row.updated_at = utcnow()
    add_event(
        s, "project.credential_set", project=project, credential_kind=kind, by=by, fingerprint=fingerprint(secret)
    )
    return row


def delete_git_credential(s: Session, project: str, by: str) -> Project:
    row = s.get(Project, project)
    if row is None:
        raise NotFound(f"no project {project!r}", field="project")
    if not row.git_credential_kind:
        raise FailedPrecondition(f"project {project!r} has no git credential", field="project")
    row.git_credential_sealed, row.git_credential_kind, row.git_credential_fingerprint = "", "", ""
    row.git_credential_set_at, row.git_credential_set_by = None, ""
    row.updated_at = utcnow()
    add_event(s, "project.credential_deleted", project=project, by=by)
    return row


def git_credential(project: Project, sealer: Sealer) -> tuple[str, str]:
    """(kind, secret) of the project's credential sent through the API; ("", "") when none is set.
    ValueError when it is set but does not open (the run then fails saying so)."""
    if not project.git_credential_kind or not project.git_credential_sealed:
        return "", ""
    return project.git_credential_kind, sealer.open(project.git_credential_sealed)


FORGE_KINDS = ("token", "app")
MAX_APP_ID = 2**53
"""GitHub's app and installation ids are JSON numbers: at most 2**53 keeps them exact everywhere."""


def set_forge_credential(
    s: Session, sealer: Sealer, project: str, kind: str, secret: str, by: str, app_id: int = 0, installation_id: int = 0
) -> Project:
    """Store (or replace) the credential Drover uses on the project's forge, sealed: a fine-grained token
    (`token`), or a GitHub App (`app`: its id, its installation's id and its RSA private key in PEM).
    The event names who, the kind and a fingerprint, never the secret."""
    row = s.get(Project, project)
    if row is None:
        raise NotFound(f"no project {project!r}", field="project")
    if kind not in FORGE_KINDS:
        raise InvalidArgument(f"must be one of {', '.join(FORGE_KINDS)}", field="kind")
    secret = forge_secret_as_stored(kind, secret)
    if not secret.strip() or len(secret) > MAX_SECRET or "\x00" in secret:
        raise InvalidArgument(f"must be 1 to {MAX_SECRET} bytes, without NUL", field="secret")
    if kind == "token":
        if any(c.isspace() for c in secret):
            raise InvalidArgument("a token has no whitespace", field="secret")
        if app_id or installation_id:
            raise InvalidArgument("only for kind app", field="app_id" if app_id else "installation_id")
    else:
        for field, value in (("app_id", app_id), ("installation_id", installation_id)):
            if not 0 < value <= MAX_APP_ID:
                raise InvalidArgument("must be the GitHub App's number (1 or more)", field=field)
        check_rsa_private_key(secret)
    if not row.forge:
        raise FailedPrecondition(
            f"project {project!r} is not linked to a forge; set its forge and forge_repo first", field="project"
        )
    row.forge_credential_sealed = sealer.seal(secret)
    row.forge_credential_kind = kind
    row.forge_credential_fingerprint = fingerprint(secret)
    row.forge_app_id, row.forge_installation_id = (app_id, installation_id) if kind == "app" else (0, 0)
    row.forge_credential_set_at = utcnow()
    row.forge_credential_set_by = by
    row.updated_at = utcnow()
    add_event(
        s,
        "project.forge_credential_set",
        project=project,
        credential_kind=kind,
        app_id=row.forge_app_id,
        installation_id=row.forge_installation_id,
        by=by,
        fingerprint=row.forge_credential_fingerprint,
    )
    return row


def forge_secret_as_stored(kind: str, secret: str) -> str:
    """The forge secret as `set_forge_credential` seals and fingerprints it."""
    return secret.strip() + ("\n" if kind == "app" else "")


def forge_credential_is(project: Project, kind: str, secret: str, app_id: int = 0, installation_id: int = 0) -> bool:
    """Whether the project already holds this forge credential (by its fingerprint, never by opening it)."""
    held = (project.forge_credential_kind, project.forge_credential_fingerprint)
    ids = (project.forge_app_id or 0, project.forge_installation_id or 0)
    return held == (kind, fingerprint(forge_secret_as_stored(kind, secret))) and ids == (app_id, installation_id)


def check_rsa_private_key(pem: str) -> None:
    """A GitHub App signs its JWTs with RS256: the key must be an unencrypted RSA private key in PEM, of
    at least 2048 bits. The error never quotes the key."""
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        key = load_pem_private_key(pem.encode(), password=None)
    except (ValueError, TypeError):
        raise InvalidArgument(
            "must be the GitHub App's private key: an unencrypted RSA private key in PEM", field="secret"
        ) from None
    except Exception:  # cryptography's UnsupportedAlgorithm and the like: not a key it can use
        raise InvalidArgument("must be an RSA private key in PEM", field="secret") from None
    if not isinstance(key, rsa.RSAPrivateKey):
        raise InvalidArgument(f"must be an RSA private key, not {type(key).__name__}", field="secret")
    if key.key_size < 2048:
        raise InvalidArgument(f"an RSA key of {key.key_size} bits; at least 2048", field="secret")


def delete_forge_credential(s: Session, project: str, by: str) -> Project:
    row = s.get(Project, project)
    if row is None:
        raise NotFound(f"no project {project!r}", field="project")
    if not row.forge_credential_kind:
        raise FailedPrecondition(f"project {project!r} has no forge credential", field="project")
    row.forge_credential_sealed, row.forge_credential_kind, row.forge_credential_fingerprint = "", "", ""
    row.forge_app_id, row.forge_installation_id = 0, 0
    row.forge_credential_set_at, row.forge_credential_set_by = None, ""
    row.updated_at = utcnow()
    add_event(s, "project.forge_credential_deleted", project=project, by=by)
    return row


def forge_credential(project: Project, sealer: Sealer) -> tuple[str, str]:
    """(kind, secret) of the project's forge credential: the token, or the App's private key (its ids are
    on the row); ("", "") when none is set. ValueError when it is set but does not open."""
    if not project.forge_credential_kind or not project.forge_credential_sealed:
        return "", ""
    return project.forge_credential_kind, sealer.open(project.forge_credential_sealed)


def rotate_webhook_secret(s: Session, sealer: Sealer, project: str, by: str) -> tuple[Project, str]:
    """A new random webhook secret for the project, stored sealed; answered to the caller once (the row
    keeps only the sealed text). The event names who, never the secret."""
    import secrets

    secret = secrets.token_urlsafe(32)
    return set_webhook_secret(s, sealer, project, secret, by), secret


def set_webhook_secret(s: Session, sealer: Sealer, project: str, secret: str, by: str) -> Project:
    """Store the project's webhook secret, sealed (a rotation, or one an operator keeps in a file for
    `controlplane project apply`); the old one stops verifying at once. The event names who, never it."""
    row = s.get(Project, project)
    if row is None:
        raise NotFound(f"no project {project!r}", field="project")
    if not row.forge:
        raise FailedPrecondition(
            f"project {project!r} is not linked to a forge; set its forge and forge_repo first", field="project"
        )
    secret = secret.strip()
    if not secret or len(secret) > MAX_SECRET or not secret.isprintable():
        raise InvalidArgument(f"must be 1 to {MAX_SECRET} printable characters on one line", field="secret")
    row.webhook_secret_sealed = sealer.seal(secret)
    row.webhook_secret_set_at = utcnow()
    row.webhook_secret_set_by = by
    row.updated_at = utcnow()
    add_event(s, "project.webhook_secret_rotated", project=project, by=by)
    return row


def webhook_secret(project: Project, sealer: Sealer) -> bytes:
    """The project's webhook secret for checking a delivery's signature; b"" when none is set (then no
    delivery verifies). ValueError when it is set but does not open."""
    if not project.webhook_secret_sealed:
        return b""
    return sealer.open(project.webhook_secret_sealed).encode()


SEALED_COLUMNS = ("git_credential_sealed", "forge_credential_sealed", "webhook_secret_sealed")
"""Every column holding a secret sealed with the operator's key."""


def reseal_all(s: Session, sealer: Sealer, by: str) -> list[str]:
    """Seal every stored secret again with the newest key (the second step of a rotation): git and forge
    credentials and webhook secrets; the projects resealed. ValueError naming the project and what when
    one does not open with any key given."""
    from cryptography.fernet import InvalidToken

    if not sealer.configured:
        raise ValueError(f"no credential key: give --credential-key-file or set {KEY_ENV}")
    done = []
    held = or_(*(getattr(Project, column) != "" for column in SEALED_COLUMNS))
    for row in s.scalars(select(Project).where(held).order_by(Project.name)):
        for column in SEALED_COLUMNS:
            if not getattr(row, column):
                continue
            try:
                setattr(row, column, sealer.reseal(getattr(row, column)))
            except InvalidToken:
                what = column.removesuffix("_sealed").replace("_", " ")
                raise ValueError(f"project {row.name!r}: its {what} does not open with any key given") from None
        add_event(s, "project.credential_resealed", project=row.name, by=by)
        done.append(row.name)
    return done


def token_file_secret(project: Project) -> str:
    """The token in the project's `git_token_file` (the host-file way), read when needed, never stored."""
    if not project.git_token_file:
        return ""
    try:
        return pathlib.Path(project.git_token_file).read_text().strip()
    except OSError:
        return ""


def git_secret(project: Project, sealer: Sealer | None) -> tuple[str, str]:
    """(kind, secret) git fetches and pushes the project's repository with: the credential sent through
    the API when one is set, else the token of its `git_token_file`; ("", "") when it has neither.
    FailedPrecondition, naming the project and never the sealed text, when the stored credential does
    not open (the key was lost or replaced): runs then fail saying so."""
    if project.git_credential_kind and project.git_credential_sealed:
        try:
            return git_credential(project, sealer or NO_KEY)
        except ValueError as err:
            why = f"project {project.name!r}: {err}; restore the key or set the credential again"
            raise CredentialLocked(why) from None
    token = token_file_secret(project)
    return ("token", token) if token else ("", "")


def secret_env(project: Project, sealer: Sealer | None) -> dict[str, str]:
    """The project's git secret as a run's secret_env entry (empty without one)."""
    kind, secret = git_secret(project, sealer)
    return {SECRET_ENV[kind]: secret} if secret else {}
