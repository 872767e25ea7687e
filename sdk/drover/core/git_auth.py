"""How git is given a project's secret: a token as HTTP Basic user:password for https URLs, an SSH
deploy key for ssh URLs, told apart by its armour (`is_ssh_key`). Only ever through pygit2's credential
callback, in memory: never in a URL, a file, the environment of a command or a message."""

from __future__ import annotations

import pygit2
from pygit2.enums import CredentialType

Credential = pygit2.UserPass | pygit2.KeypairFromMemory


def is_ssh_key(secret: str) -> bool:
    """A git secret is an SSH private key (OpenSSH or PEM armour), else a token (which has no whitespace)."""
    return "PRIVATE KEY-----" in secret


def git_credential(secret: str, username: str | None, allowed: CredentialType) -> Credential:
    """The credential git asks for with `secret`; pygit2.Passthrough when the URL takes another kind."""
    if secret and is_ssh_key(secret) and allowed & CredentialType.SSH_KEY:
        return pygit2.KeypairFromMemory(username or "git", None, secret, "")  # the public key derived from it
    if secret and not is_ssh_key(secret) and allowed & CredentialType.USERPASS_PLAINTEXT:
        return pygit2.UserPass("x-access-token", secret)
    raise pygit2.Passthrough


class GitCallbacks(pygit2.RemoteCallbacks):
    """The secret's credential, offered once (a refused one fails, as a GitError the caller words,
    instead of looping), and the remote's per-reference push rejections."""

    def __init__(self, secret: str) -> None:
        super().__init__()
        self._secret = secret
        self._offered = False
        self.rejected: dict[str, str] = {}

    def credentials(self, url: str, username_from_url: str | None, allowed_types: CredentialType) -> Credential:
        if not self._secret:
            raise pygit2.Passthrough
        if self._offered:
            raise pygit2.GitError("the git credential was refused")
        self._offered = True
        return git_credential(self._secret, username_from_url, allowed_types)

    def push_update_reference(self, refname: str, message: str | None) -> None:
        if message:
            self.rejected[refname] = message


def git_callbacks(secret: str) -> GitCallbacks | None:
    """Callbacks offering `secret`; None without one."""
    return GitCallbacks(secret) if secret else None
