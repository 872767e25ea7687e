"""Which credential git is given for a project's secret (drover/core/git_auth.py): a token as Basic
user:password for https, an SSH deploy key from memory for ssh, nothing of the wrong kind; and what is
redacted for a multi-line key."""

from __future__ import annotations

import pathlib
import subprocess

import pygit2
import pytest
from pygit2.enums import CredentialType

from drover.core.git_auth import GitCallbacks, git_credential, is_ssh_key
from drover.core.workspace import WorkspaceError, secret_parts

TOKEN = "ghp_0123456789abcdef"


@pytest.fixture(scope="module")
def ssh_key(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("key") / "deploy"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path.read_text()


SSH = CredentialType.SSH_KEY | CredentialType.SSH_CUSTOM
HTTPS = CredentialType.USERPASS_PLAINTEXT


@pytest.mark.parametrize(
    "kind, allowed, expected",
    [
        ("token", HTTPS, pygit2.UserPass),
        ("token", SSH, None),  # a token is never offered to an ssh URL
        ("ssh_key", SSH, pygit2.KeypairFromMemory),
        ("ssh_key", HTTPS, None),  # nor a key to an https one
    ],
)
def test_the_credential_matches_the_url(kind: str, allowed: int, expected: type | None, ssh_key: str) -> None:
    secret = TOKEN if kind == "token" else ssh_key
    if expected is None:
        with pytest.raises(pygit2.Passthrough):
            git_credential(secret, "git", allowed)
        return
    credential = git_credential(secret, "git", allowed)
    assert isinstance(credential, expected)
    if isinstance(credential, pygit2.KeypairFromMemory):
        assert credential.credential_tuple[2] == ssh_key and credential.credential_tuple[1] is None
    else:
        assert credential.credential_tuple == ("x-access-token", TOKEN)


def test_a_secret_is_offered_once(ssh_key: str) -> None:
    callbacks = GitCallbacks(ssh_key)
    callbacks.credentials("ssh://git@example.invalid/r.git", "git", SSH)
    with pytest.raises(pygit2.GitError, match="refused"):
        callbacks.credentials("ssh://git@example.invalid/r.git", "git", SSH)


def test_every_line_of_a_key_is_redacted(ssh_key: str) -> None:
    assert is_ssh_key(ssh_key) and not is_ssh_key(TOKEN)
    parts = secret_parts(ssh_key)
    body = [line for line in ssh_key.splitlines() if "-----" not in line]
    assert ssh_key in parts and all(line in parts for line in body)
    assert secret_parts(TOKEN) == [TOKEN] and secret_parts("") == []


def test_a_key_is_never_written_by_a_clone_that_uses_it(tmp_path: pathlib.Path, ssh_key: str) -> None:
    """An ssh clone that cannot connect fails with a sentence free of the key, and leaves no file of it."""
    from drover.core.workspace import prepare

    with pytest.raises(WorkspaceError) as err:
        prepare(tmp_path / "ws", "ssh://git@127.0.0.1:1/r.git", "main", ssh_key)
    assert not any(line in str(err.value) for line in secret_parts(ssh_key))
    for path in tmp_path.rglob("*"):
        assert not path.is_file() or ssh_key.splitlines()[1] not in path.read_text(errors="replace")
