"""Which credential git is given for a project's secret (drover/core/git_auth.py): a token as Basic
user:password for https, an SSH deploy key from memory for ssh, nothing of the wrong kind; and what is
redacted for a multi-line key."""

from __future__ import annotations

import pathlib
import subprocess

import pygit2
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat
from pygit2.enums import CredentialType

from drover.core.git_auth import GitCallbacks, git_credential, is_ssh_key
from drover.core.gitspace import open_workspace
from drover.core.workspace import WorkspaceError, git_dir, prepare, secret_parts
from tests.conftest import make_repo
from tests.git_ssh import GitSshServer

TOKEN = "ghp_0123456789abcdef"


@pytest.fixture(scope="module")
def keypair() -> tuple[str, str]:
    """A deploy key: the private key in OpenSSH form, and its public line for the server."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(Encoding.PEM, PrivateFormat.OpenSSH, NoEncryption()).decode()
    return private, key.public_key().public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH).decode()


@pytest.fixture(scope="module")
def ssh_key(keypair: tuple[str, str]) -> str:
    return keypair[0]


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


def test_a_workspace_clones_and_publishes_over_ssh_with_a_deploy_key(
    tmp_path: pathlib.Path, keypair: tuple[str, str]
) -> None:
    """What agentd does with DROVER_GIT_SSH_KEY: clone, then push the ChangeSet, to a server that takes
    that key alone; the key in no file of the workspace or its git directory, nor in a message."""
    private, public = keypair
    (tmp_path / "forge").mkdir()
    origin = make_repo(tmp_path / "origin", {"a.txt": "a\n"})
    subprocess.run(["git", "clone", "-q", "--bare", str(origin), str(tmp_path / "forge" / "calc.git")], check=True)
    with GitSshServer(tmp_path / "forge", public) as server:
        with pytest.raises(WorkspaceError, match="cannot clone ssh://"):  # no key: refused
            prepare(tmp_path / "none", server.url("calc"), "main", "")
        other = Ed25519PrivateKey.generate().private_bytes(Encoding.PEM, PrivateFormat.OpenSSH, NoEncryption())
        with pytest.raises(WorkspaceError) as refused:  # another key: refused, and not shown
            prepare(tmp_path / "other", server.url("calc"), "main", other.decode())
        assert not any(part in str(refused.value) for part in secret_parts(other.decode()))
        ws = open_workspace(tmp_path / "ws", server.url("calc"), "main", [], private)
        (ws.path / "b.txt").write_text("b\n")
        published = ws.publish("ch1", "t1", "b")
        assert server.commands[-2:] == ["git-upload-pack '/calc.git'", "git-receive-pack '/calc.git'"]
    branches = subprocess.run(
        ["git", "--git-dir", str(tmp_path / "forge" / "calc.git"), "branch", "--list", published.branch],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert published.branch in branches
    body = [line for line in private.splitlines() if "-----" not in line]
    for root in (ws.path, git_dir(ws.path)):
        for path in root.rglob("*"):
            assert not path.is_file() or not any(line.encode() in path.read_bytes() for line in body), path
