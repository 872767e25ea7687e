"""A project linked to its repository on a forge (issue 28's first slice), on a real control plane with
real tokens: the forge settings through Create/Update/GetProject, each refusal naming its field and
changing nothing; the forge credential (a token, or a GitHub App's RSA key) and the webhook secret
sealed like the git credential, the webhook secret answered once; and a token scoped to another
project reaching none of it. The secrets are looked for in every table, every file of the data
directory (the database, its WAL, the control plane's log) and every event."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import subprocess

import pytest
from cryptography.fernet import Fernet
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import (
    BestAvailableEncryption,
    Encoding,
    NoEncryption,
    PrivateFormat,
)

import drover
from tests.conftest import ControlPlane, Fleet
from tests.controlplane.api.test_projects_and_tokens import events, refusal
from tests.secrets_at_rest import files_holding
from tests.security.test_git_credentials import table_dump

TOKEN = "github_pat_11FORGE0fine9grained7token5x3q1z8w6v4"


def pem(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey, password: bytes = b"") -> str:
    encryption = BestAvailableEncryption(password) if password else NoEncryption()
    return key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, encryption).decode()


def keyed_plane(fleet: Fleet) -> ControlPlane:
    fleet.plane.extra_env["DROVER_CREDENTIAL_KEY"] = Fernet.generate_key().decode()
    return fleet.start_plane()


def settings(p: drover.Project) -> dict[str, object]:
    """What a refused call must leave as it was: every setting and when the project last changed."""
    return dataclasses.asdict(p)


def test_the_forge_settings_are_set_read_and_checked_by_field(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    with plane.client() as admin:
        made = admin.projects.create("web", forge="github", forge_repo="octo-org/web.app")
        # Defaults: GitHub's API, the label drover, 3 fix rounds; nothing of a credential or webhook secret.
        assert (made.forge, made.forge_repo, made.forge_api_url, made.forge_label, made.max_fix_rounds) == (
            "github",
            "octo-org/web.app",
            "https://api.github.com",
            "drover",
            3,
        )
        assert made.forge_credential.kind == "" and made.webhook_secret.set is False
        plain = admin.projects.create("plain")
        assert (plain.forge, plain.forge_repo, plain.forge_api_url, plain.max_fix_rounds) == ("", "", "", 3)

        changed = admin.projects.update("web", max_fix_rounds=0, forge_api_url="http://127.0.0.1:8765/api/v3/")
        assert (changed.max_fix_rounds, changed.forge_api_url) == (0, "http://127.0.0.1:8765/api/v3")
        assert (changed.forge_repo, changed.forge_label) == ("octo-org/web.app", "drover")  # not in the mask: kept
        changed = admin.projects.update("web", forge_label="ai: fix me", forge_api_url="https://ghe.example.com/api/v3")
        assert admin.projects.get("web") == changed and changed.forge_label == "ai: fix me"

        before = settings(admin.projects.get("web"))
        for given, field in (
            ({"forge_repo": "no-slash"}, "project.forge_repo"),
            ({"forge_repo": "-octo/web"}, "project.forge_repo"),
            ({"forge_repo": "octo--org/web"}, "project.forge_repo"),
            ({"forge_repo": "octo/web/extra"}, "project.forge_repo"),
            ({"forge_repo": "octo/.."}, "project.forge_repo"),
            ({"forge_repo": "octo/web.git"}, "project.forge_repo"),
            ({"forge_repo": "o" * 40 + "/web"}, "project.forge_repo"),
            ({"forge_repo": ""}, "project.forge_repo"),  # github needs a repository
            ({"forge_api_url": "http://api.example.com"}, "project.forge_api_url"),  # a token in the clear
            ({"forge_api_url": "https://bob:hunter2@ghe.example.com"}, "project.forge_api_url"),
            ({"forge_api_url": "ftp://ghe.example.com"}, "project.forge_api_url"),
            ({"forge_api_url": "https://ghe.example.com/?x=1"}, "project.forge_api_url"),
            ({"forge_api_url": "not a url"}, "project.forge_api_url"),
            ({"max_fix_rounds": 21}, "project.max_fix_rounds"),
            ({"max_fix_rounds": -1}, "project.max_fix_rounds"),
            ({"forge": "gitlab"}, "project.forge"),
            ({"forge_label": " drover"}, "project.forge_label"),
            ({"forge": ""}, "project.forge_repo"),  # unlinking leaves a repository with no forge: named
        ):
            refused = refusal(drover.InvalidArgument, admin.projects.update, "web", **given)
            assert refused.field == field, (given, refused)
            assert settings(admin.projects.get("web")) == before, given
        # Creating: the same checks, and no project is stored.
        assert refusal(drover.InvalidArgument, admin.projects.create, "api", forge_repo="octo/api").field == (
            "project.forge_repo"
        )
        bad_url = refusal(
            drover.InvalidArgument, admin.projects.create, "api", forge="github", forge_repo="o/a", forge_api_url="x:"
        )
        assert bad_url.field == "project.forge_api_url"
        assert [p.name for p in admin.projects.list()] == ["plain", "web"]
        # Unlinking names the three settings together.
        gone = admin.projects.update("web", forge="", forge_repo="", forge_api_url="")
        assert (gone.forge, gone.forge_repo, gone.forge_api_url) == ("", "", "")
    assert [d["fields"] for d in events(plane, "project.updated")] == [
        ["forge_api_url", "max_fix_rounds"],
        ["forge_api_url", "forge_label"],
        ["forge", "forge_api_url", "forge_repo"],
    ]


def test_the_forge_credential_and_webhook_secret_are_sealed_and_the_secret_shown_once(
    fleet: Fleet, tmp_path: pathlib.Path
) -> None:
    plane = keyed_plane(fleet)
    app_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    key_pem = pem(app_key)
    with plane.client() as admin:
        admin.projects.create("web", forge="github", forge_repo="octo/web")
        admin.projects.create("plain")

        shown = admin.projects.set_forge_credential("web", "token", TOKEN + "\n").forge_credential
        assert (shown.kind, shown.set_by, shown.app_id, len(shown.fingerprint)) == ("token", "admin", 0, 12)
        assert shown.set_at
        app = admin.projects.set_forge_credential("web", "app", key_pem, app_id=123456, installation_id=987654321)
        assert (app.forge_credential.kind, app.forge_credential.app_id, app.forge_credential.installation_id) == (
            "app",
            123456,
            987654321,
        )
        assert app.forge_credential.fingerprint != shown.fingerprint
        assert app.git_credential.kind == ""  # the git credential is another thing

        # Refused, naming the field, and the App credential stays as it was.
        ec_key = pem(ec.generate_private_key(ec.SECP256R1()))
        small = pem(rsa.generate_private_key(public_exponent=65537, key_size=1024))
        locked = pem(app_key, password=b"pw")
        for kind, secret, ids, field in (
            ("app", ec_key, (1, 2), "secret"),
            ("app", "-----BEGIN PRIVATE KEY-----\nZ2FyYmFnZQ==\n-----END PRIVATE KEY-----", (1, 2), "secret"),
            ("app", "garbage", (1, 2), "secret"),
            ("app", small, (1, 2), "secret"),
            ("app", locked, (1, 2), "secret"),
            ("app", key_pem, (0, 2), "app_id"),
            ("app", key_pem, (1, 0), "installation_id"),
            ("token", "two words", (0, 0), "secret"),
            ("token", TOKEN, (5, 0), "app_id"),
        ):
            call = admin.projects.set_forge_credential
            refused = refusal(drover.InvalidArgument, call, "web", kind, secret, app_id=ids[0], installation_id=ids[1])
            assert refused.field == field, (kind, secret[:40], refused)
            assert "PRIVATE KEY" not in refused.message and TOKEN not in refused.message
        assert refusal(drover.InvalidArgument, admin.projects.set_forge_credential, "web", "ssh_key", TOKEN).field == (
            "kind"
        )
        assert admin.projects.get("web").forge_credential == app.forge_credential
        unlinked = refusal(drover.FailedPrecondition, admin.projects.set_forge_credential, "plain", "token", TOKEN)
        assert unlinked.field == "project" and "not linked to a forge" in unlinked.message
        # The API URL moving would send the credential to another host: refused until it is deleted.
        moved = refusal(
            drover.FailedPrecondition, admin.projects.update, "web", forge_api_url="https://ghe.example.com"
        )
        assert moved.field == "project.forge_api_url"
        assert admin.projects.update("web", forge_label="ai").forge_api_url == "https://api.github.com"

        # The webhook secret: answered by the rotation, once; afterwards only that one is set, and when.
        rotated = admin.projects.rotate_webhook_secret("web")
        hook = rotated.secret
        assert len(hook) >= 43 and rotated.project.webhook_secret.set and rotated.project.webhook_secret.set_at
        again = admin.projects.rotate_webhook_secret("web")
        assert again.secret != hook and again.project.webhook_secret.set_by == "admin"
        read = admin.projects.get("web")
        assert read.webhook_secret == again.project.webhook_secret
        everything = repr(read) + repr(admin.projects.list())
        for secret in (TOKEN, hook, again.secret, key_pem.splitlines()[5]):
            assert secret not in everything
        assert refusal(drover.FailedPrecondition, admin.projects.rotate_webhook_secret, "plain").field == "project"

        assert admin.projects.delete_forge_credential("web").forge_credential.kind == ""
        assert refusal(drover.FailedPrecondition, admin.projects.delete_forge_credential, "web").field == "project"
        admin.projects.set_forge_credential("web", "token", TOKEN)
        admin.projects.set_forge_credential("web", "app", key_pem, app_id=7, installation_id=8)

    # Every change is an event naming who made it, and none holds a secret.
    kinds = ("project.forge_credential_set", "project.forge_credential_deleted", "project.webhook_secret_rotated")
    found = {kind: events(plane, kind) for kind in kinds}
    assert [(d["credential_kind"], d["by"]) for d in found[kinds[0]]] == [
        ("token", "admin"),
        ("app", "admin"),
        ("token", "admin"),
        ("app", "admin"),
    ]
    assert [d["by"] for d in found[kinds[1]]] == ["admin"] and len(found[kinds[2]]) == 2
    body = key_pem.splitlines()[5]  # a line from the middle of the key: no form of the key is stored
    needles = [TOKEN, hook, again.secret, body]
    assert all(n not in str(found) for n in needles)
    # Nowhere at rest: every row of every table, every file of the data directory (the database and its
    # WAL, the control plane's log, the tokens).
    dump = table_dump(f"sqlite:///{plane.data_dir / 'drover.db'}")
    assert "forge_credential_set" in dump and all(n not in dump for n in needles)
    assert files_holding(plane.data_dir, [n.encode() for n in needles]) == []
    assert list(plane.data_dir.glob("controlplane-*.log"))


def test_without_a_credential_key_the_forge_secrets_are_refused_naming_the_field(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    with plane.client() as admin:
        admin.projects.create("web", forge="github", forge_repo="octo/web")
        refused = refusal(drover.FailedPrecondition, admin.projects.set_forge_credential, "web", "token", TOKEN)
        assert refused.field == "secret" and "credential key" in refused.message
        assert refusal(drover.FailedPrecondition, admin.projects.rotate_webhook_secret, "web").field == "secret"
        shown = admin.projects.get("web")
        assert shown.forge_credential.kind == "" and not shown.webhook_secret.set
    assert events(plane, "project.forge_credential_set") == events(plane, "project.webhook_secret_rotated") == []


def test_a_token_of_another_project_reaches_none_of_the_forge_link(fleet: Fleet) -> None:
    plane = keyed_plane(fleet)
    with plane.client() as admin:
        admin.projects.create("a", forge="github", forge_repo="octo/a")
        admin.projects.create("b", forge="github", forge_repo="octo/b")
        ann = admin.tokens.create("ann", role="admin", projects=["a"]).secret
        rae = admin.tokens.create("rae", role="submit", projects=["a"]).secret
    with plane.client(ann) as scoped, plane.client(rae) as submitter:
        for call, args in (
            (scoped.projects.set_forge_credential, ("b", "token", TOKEN)),
            (scoped.projects.delete_forge_credential, ("b",)),
            (scoped.projects.rotate_webhook_secret, ("b",)),
        ):
            refused = refusal(drover.NotFound, call, *args)
            assert refused.field == "project" and refused.message == "project: no project 'b'"
        assert refusal(drover.NotFound, scoped.projects.update, "b", max_fix_rounds=1).field == "project.name"
        # Its own project: yes, as for the git credential.
        assert scoped.projects.set_forge_credential("a", "token", TOKEN).forge_credential.set_by == "ann"
        assert scoped.projects.rotate_webhook_secret("a").project.webhook_secret.set_by == "ann"
        assert scoped.projects.update("a", max_fix_rounds=5).max_fix_rounds == 5
        # A user token without the admin role reads the project, and changes none of it.
        assert submitter.projects.get("a").forge_credential.kind == "token"
        refusal(drover.PermissionDenied, submitter.projects.set_forge_credential, "a", "token", TOKEN)
        refusal(drover.PermissionDenied, submitter.projects.delete_forge_credential, "a")
        refusal(drover.PermissionDenied, submitter.projects.rotate_webhook_secret, "a")
        refusal(drover.PermissionDenied, submitter.projects.update, "a", forge_label="x")
    with plane.client() as admin:
        b = admin.projects.get("b")
        assert b.forge_credential.kind == "" and not b.webhook_secret.set and b.max_fix_rounds == 3
        assert admin.projects.get("a").forge_label == "drover"


@pytest.mark.parametrize("rounds", [0, 20])
def test_the_edges_of_max_fix_rounds_are_accepted(fleet: Fleet, rounds: int) -> None:
    plane = fleet.start_plane()
    with plane.client() as admin:
        made = admin.projects.create("web", forge="github", forge_repo="octo/web", max_fix_rounds=rounds)
        assert made.max_fix_rounds == rounds == admin.projects.get("web").max_fix_rounds


def test_the_hosts_project_add_takes_the_forge_settings_and_keeps_them_on_a_second_add(fleet: Fleet) -> None:
    """Re-running `controlplane project add` sets every setting; without the forge flags it would unlink."""
    plane = fleet.start_plane()
    link = ("--forge", "github", "--forge-repo", "octo/web", "--forge-label", "bot", "--max-fix-rounds", "5")
    plane.cli("project", "add", "web", *link)
    plane.cli("project", "add", "web", *link, "--setup", "make")
    shown = json.loads(plane.cli("project", "show", "web").stdout)
    assert (shown["forge"], shown["forge_repo"], shown["forge_api_url"], shown["forge_label"]) == (
        "github",
        "octo/web",
        "https://api.github.com",
        "bot",
    )
    assert (shown["max_fix_rounds"], shown["forge_credential"], shown["webhook_secret"]) == (5, "", False)
    with pytest.raises(subprocess.CalledProcessError) as refused:
        plane.cli("project", "add", "web", "--forge", "github", "--forge-repo", "octo/web.git")
    assert "forge_repo" in refused.value.stderr
    with plane.client() as admin:
        assert admin.projects.get("web").forge_repo == "octo/web"  # the refused add changed nothing
        assert [d["by"] for d in events(plane, "project.updated")] == ["host"]
