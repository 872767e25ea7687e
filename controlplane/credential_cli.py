"""`controlplane credential-key | credential-reseal | project credential set | delete`: the operator's
key that seals git credentials, its rotation, and a project's credential set on the host (bootstrap, the
same service functions as the API's SetGitCredential and DeleteGitCredential).

Rotation without downtime: prepend a new key to the key file, SIGHUP the control plane (or restart it),
`controlplane credential-reseal`, then remove the old key and SIGHUP again."""

from __future__ import annotations

import argparse
import getpass
import os
import pathlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from drover.errors import AlreadyExists

if TYPE_CHECKING:
    from controlplane.services.credentials import Sealer
    from controlplane.store.data_dir import DataDir
    from controlplane.store.engine import Store

Command = Callable[["Store", "DataDir", argparse.Namespace], None]
KEY_FILE_ENV = "DROVER_CREDENTIAL_KEY_FILE"


def cmd_credential_key(store: Store | None, config: DataDir | None, args: argparse.Namespace) -> None:
    from controlplane.services.credentials import new_key

    key = new_key()
    if not args.out:
        print(key)
        return
    path = pathlib.Path(args.out)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise AlreadyExists(
            f"{path} exists; a key file is never overwritten (to rotate, prepend a key to it)", field="out"
        ) from None
    with os.fdopen(fd, "w") as out:
        out.write(key + "\n")
    print(f"wrote a new credential key to {path} (mode 0600)")


def cmd_credential_reseal(store: Store, config: DataDir, args: argparse.Namespace) -> None:
    from controlplane.services.credentials import reseal_all

    done = store.transaction(reseal_all, _sealer(args), host_account())
    print(f"resealed {len(done)} git credential{'s' if len(done) != 1 else ''} with the newest key")


def cmd_credential_set(store: Store, config: DataDir, args: argparse.Namespace) -> None:
    from controlplane.services.credentials import set_git_credential

    secret = pathlib.Path(args.secret_file).read_text()
    sealer = _sealer(args)
    row = store.transaction(lambda s: set_git_credential(s, sealer, args.name, args.kind, secret, host_account()))
    print(f"project {args.name}: git credential set ({args.kind}, fingerprint {row.git_credential_fingerprint})")


def cmd_credential_delete(store: Store, config: DataDir, args: argparse.Namespace) -> None:
    from controlplane.services.credentials import delete_git_credential

    store.transaction(lambda s: delete_git_credential(s, args.name, host_account()))
    print(f"project {args.name}: git credential deleted")


def _sealer(args: argparse.Namespace) -> Sealer:
    from controlplane.services.credentials import Sealer

    return Sealer.from_config(args.credential_key_file)


def host_account() -> str:
    """Who set it, for the event: the host account (these commands need the host, not a token)."""
    try:
        return f"host:{getpass.getuser()}"
    except (KeyError, OSError):
        return f"host:uid {os.getuid()}"


def key_file_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--credential-key-file",
        default=os.environ.get(KEY_FILE_ENV, ""),
        help=f"the control plane's credential key file, newest key first (env {KEY_FILE_ENV}; "
        "default: env DROVER_CREDENTIAL_KEY)",
    )


def credential_parsers(sub: Any, projects: Any, command: Callable[..., argparse.ArgumentParser]) -> None:
    """The top-level key commands on `sub`, `credential set | delete` under `project` (`projects`)."""
    key = sub.add_parser("credential-key", help="print a new key for --credential-key-file")
    key.add_argument("--out", default="", help="write it to this new file (mode 0600) instead of printing it")
    key.set_defaults(func=cmd_credential_key, needs_store=False)
    reseal = command(sub, "credential-reseal", cmd_credential_reseal, "seal every git credential with the newest key")
    key_file_flag(reseal)
    cr = projects.add_parser("credential", help="a project's git credential")
    cs = cr.add_subparsers(dest="credential_command", required=True)
    cset = command(cs, "set", cmd_credential_set, "store a project's git credential, sealed")
    cset.add_argument("name")
    cset.add_argument("--kind", choices=("token", "ssh_key"), required=True, help="an https token or an SSH deploy key")
    cset.add_argument("--secret-file", required=True, help="the file holding it (read once; never stored in the clear)")
    key_file_flag(cset)
    command(cs, "delete", cmd_credential_delete, "delete a project's git credential").add_argument("name")
