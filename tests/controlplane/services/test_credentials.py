"""A project's git secret (services/credentials.py `git_secret`): the credential sent through the API
when set, else the git_token_file token; key rotation (old key opens until resealed); a credential that
does not open fails with a sentence, never the sealed text. On SQLite and PostgreSQL."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from controlplane.services.credentials import (
    CredentialLocked,
    Sealer,
    forge_credential,
    git_secret,
    new_key,
    reseal_all,
    rotate_webhook_secret,
    secret_env,
    set_forge_credential,
    set_git_credential,
    webhook_secret,
)
from controlplane.services.projects import add_project, update_project
from controlplane.store.engine import Store
from controlplane.store.models import Event, Project

TOKEN = "ghp_api-credential-0123456789"
HOST_TOKEN = "ghp_host-file-token-9876543210"
SSH_KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "-----END OPENSSH PRIVATE KEY-----\n"
)


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Store]:
    url = f"sqlite:///{tmp_path / 't.db'}" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    s = Store(url)
    s.migrate()
    (tmp_path / "host.token").write_text(HOST_TOKEN + "\n")
    s.transaction(lambda db: add_project(db, "web", "", git_token_file=str(tmp_path / "host.token")))
    s.transaction(lambda db: add_project(db, "plain", ""))
    yield s
    s.close()


def project(store: Store, name: str = "web") -> Project:
    found = store.transaction(lambda s: s.get(Project, name))
    assert found is not None
    return found


def test_the_host_file_token_is_used_until_a_credential_is_set(store: Store) -> None:
    sealer = Sealer.from_text(new_key())
    assert git_secret(project(store), sealer) == ("token", HOST_TOKEN)
    assert git_secret(project(store, "plain"), sealer) == ("", "")
    assert secret_env(project(store, "plain"), sealer) == {}
    store.transaction(lambda s: set_git_credential(s, sealer, "web", "token", TOKEN, "admin"))
    assert git_secret(project(store), sealer) == ("token", TOKEN)
    assert secret_env(project(store), sealer) == {"DROVER_GIT_TOKEN": TOKEN}
    store.transaction(lambda s: set_git_credential(s, sealer, "web", "ssh_key", SSH_KEY, "admin"))
    assert secret_env(project(store), sealer) == {"DROVER_GIT_SSH_KEY": SSH_KEY}


def test_a_credential_that_does_not_open_fails_with_a_sentence(store: Store) -> None:
    store.transaction(lambda s: set_git_credential(s, Sealer.from_text(new_key()), "web", "token", TOKEN, "a"))
    sealed = project(store).git_credential_sealed
    for sealer in (Sealer.from_text(new_key()), Sealer([]), None):
        with pytest.raises(CredentialLocked) as err:
            git_secret(project(store), sealer)
        assert "'web'" in str(err.value) and sealed not in str(err.value) and TOKEN not in str(err.value)


def test_rotation_the_old_key_opens_until_reseal_then_only_the_new_one(store: Store) -> None:
    old, new = new_key(), new_key()
    store.transaction(lambda s: set_git_credential(s, Sealer.from_text(old), "web", "token", TOKEN, "a"))
    both = Sealer.from_text(f"{new}\n{old}\n")  # the new key prepended
    assert git_secret(project(store), both) == ("token", TOKEN)
    assert store.transaction(reseal_all, both, "host:ops") == ["web"]
    assert git_secret(project(store), Sealer.from_text(new)) == ("token", TOKEN)
    with pytest.raises(CredentialLocked):
        git_secret(project(store), Sealer.from_text(old))
    kinds = store.transaction(lambda s: [e.kind for e in s.query(Event).order_by(Event.id)])
    assert kinds[-2:] == ["project.credential_set", "project.credential_resealed"]


def test_reseal_with_no_key_that_opens_names_the_project(store: Store) -> None:
    store.transaction(lambda s: set_git_credential(s, Sealer.from_text(new_key()), "web", "token", TOKEN, "a"))
    with pytest.raises(ValueError, match="'web'"):
        store.transaction(reseal_all, Sealer.from_text(new_key()), "host:ops")


def test_reseal_takes_the_forge_credential_and_the_webhook_secret_to_the_new_key(store: Store) -> None:
    """A rotation that resealed only git credentials would leave the forge's secrets to the old key, lost
    when it is removed."""
    old, new = new_key(), new_key()
    with_old = Sealer.from_text(old)
    store.transaction(
        lambda s: update_project(s, s.get(Project, "plain"), {"forge": "github", "forge_repo": "o/r"}, "a")
    )
    store.transaction(lambda s: set_forge_credential(s, with_old, "plain", "token", TOKEN, "a"))
    _, hook = store.transaction(lambda s: rotate_webhook_secret(s, with_old, "plain", "a"))
    assert store.transaction(reseal_all, Sealer.from_text(f"{new}\n{old}"), "host:ops") == ["plain"]
    only_new = Sealer.from_text(new)
    assert forge_credential(project(store, "plain"), only_new) == ("token", TOKEN)
    assert webhook_secret(project(store, "plain"), only_new) == hook.encode()
    with pytest.raises(ValueError):
        forge_credential(project(store, "plain"), with_old)
    with pytest.raises(ValueError):
        webhook_secret(project(store, "plain"), with_old)
    with pytest.raises(ValueError, match="'plain': its forge credential does not open"):
        store.transaction(reseal_all, Sealer.from_text(new_key()), "host:ops")


def test_a_key_file_is_read_again_in_place(tmp_path: pathlib.Path) -> None:
    """SIGHUP: everything holding the one Sealer sees the new keys; a bad file keeps the keys in use."""
    first, second = new_key(), new_key()
    key_file = tmp_path / "keys"
    key_file.write_text(first + "\n")
    sealer = Sealer.from_config(str(key_file))
    sealed = sealer.seal(TOKEN)
    key_file.write_text(f"{second}\n{first}\n")
    sealer.load(str(key_file))
    assert sealer.open(sealed) == TOKEN and Sealer.from_text(second).open(sealer.seal("x")) == "x"
    key_file.write_text("not a key\n")
    with pytest.raises(ValueError, match="not a Fernet key"):
        sealer.load(str(key_file))
    assert sealer.open(sealed) == TOKEN
    with pytest.raises(ValueError, match="No such file"):
        Sealer.from_config(str(tmp_path / "missing"))
