"""ProjectService and TokenService on a real control plane, with real tokens: what an admin does from
anywhere, checked as `controlplane project add` checks it; a project-scoped token sees and changes only its
projects; a token never mints one with more than it holds; a revoked admin creates nothing from the next
call; and a git credential goes in once and never comes back out."""

from __future__ import annotations

import pathlib
import sqlite3

import pytest
from cryptography.fernet import Fernet

import drover
from drover.errors import DroverError
from tests.conftest import ControlPlane, Fleet, make_repo


def refusal(cls: type[DroverError], call, *args, **kwargs) -> DroverError:  # type: ignore[no-untyped-def]
    with pytest.raises(cls) as caught:
        call(*args, **kwargs)
    return caught.value


def events(plane: ControlPlane, kind: str) -> list[dict]:  # type: ignore[type-arg]
    with plane.client() as admin:
        return [e.data for e in admin.list_events(kind=kind, limit=1000) if e.kind == kind]


def test_an_admin_creates_reads_updates_and_deletes_a_project(fleet: Fleet, tmp_path: pathlib.Path) -> None:
    plane = fleet.start_plane()
    repo = make_repo(tmp_path / "web-origin", {"app.py": "print(1)\n"})
    with plane.client() as admin:
        made = admin.projects.create("web", repo=str(repo), setup=["pip install -e ."], env={"MODE": "test"})
        assert (made.name, made.repo, made.branch, made.setup_network) == ("web", str(repo), "main", True)
        assert made.env == {"MODE": "test"} and made.git_credential.kind == ""
        assert made.answer_window_minutes == 15  # unset in the request: the default, as on the host
        assert [p.name for p in admin.projects.list()] == ["web"]

        changed = admin.projects.update("web", pool="gpu", setup_network=False, git_name="Bot")
        assert (changed.pool, changed.setup_network, changed.git_name, changed.setup) == (
            "gpu",
            False,
            "Bot",
            ["pip install -e ."],  # not in the mask: kept
        )
        assert changed.updated_at

        # Refusals name the request's field, and nothing is stored.
        missing = refusal(drover.InvalidArgument, admin.projects.create, "api", repo=str(repo), branch="nope")
        assert missing.field == "project.branch" and "no branch 'nope'" in missing.message
        gone = refusal(drover.InvalidArgument, admin.projects.create, "api", repo=str(tmp_path / "none"))
        assert gone.field == "project.repo"
        assert refusal(drover.InvalidArgument, admin.projects.create, "api", repo="relative/path").field == (
            "project.repo"
        )
        secret_url = "https://bob:hunter2@example.com/r.git"
        assert refusal(drover.InvalidArgument, admin.projects.create, "api", repo=secret_url).field == "project.repo"
        assert refusal(drover.InvalidArgument, admin.projects.create, "api", env={"DROVER_X": "1"}).field.startswith(
            "project.env"
        )
        assert refusal(drover.InvalidArgument, admin.projects.create, "api", git_token_file="/etc/passwd").field == (
            "project.git_token_file"
        )
        assert refusal(drover.InvalidArgument, admin.projects.create, "bad name").field == "project.name"
        assert refusal(drover.AlreadyExists, admin.projects.create, "web").field == "project.name"
        assert refusal(drover.InvalidArgument, admin.projects.update, "web").field == "update_mask"
        assert refusal(drover.InvalidArgument, admin.projects.update, "web", branch="nope").field == "project.branch"
        assert [p.name for p in admin.projects.list()] == ["web"]
        assert admin.projects.get("web").pool == "gpu"

        admin.projects.delete("web")
        assert refusal(drover.NotFound, admin.projects.get, "web").message == "name: no project 'web'"
    # Every change is an event naming who made it, the host's commands included.
    plane.add_project("hosted")
    assert [(d["project"], d["by"]) for d in events(plane, "project.added")] == [("web", "admin"), ("hosted", "host")]
    assert [d["by"] for d in events(plane, "project.updated")] == ["admin"]
    assert [d["by"] for d in events(plane, "project.removed")] == ["admin"]


def test_a_scoped_token_sees_and_changes_only_its_projects(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    plane.add_project("a")
    plane.add_project("b")
    with plane.client() as admin:
        scoped = admin.tokens.create("ann", role="admin", projects=["a"]).secret
        reader = admin.tokens.create("rae", role="submit", projects=["a"]).secret
    with plane.client(scoped) as ann, plane.client(reader) as rae:
        assert [p.name for p in ann.projects.list()] == ["a"]
        never = refusal(drover.NotFound, ann.projects.get, "never-was").message.split(": ", 1)[1]
        # b does not exist for ann: the very message of a project that was never there, whatever the call.
        for call, args in (
            (ann.projects.get, ("b",)),
            (ann.projects.delete, ("b",)),
            (ann.projects.delete_git_credential, ("b",)),
        ):
            assert refusal(drover.NotFound, call, *args).message.split(": ", 1)[1] == never.replace("never-was", "b")
        assert refusal(drover.NotFound, ann.projects.update, "b", pool="x").field == "project.name"
        assert refusal(drover.NotFound, ann.projects.set_git_credential, "b", "token", "t0k").field == "project"

        assert ann.projects.update("a", setup=["make"]).setup == ["make"]  # its own: yes
        assert refusal(drover.PermissionDenied, ann.projects.update, "a", pool="gpu").field == "project.pool"
        assert refusal(drover.PermissionDenied, ann.projects.delete, "a")  # but deleting needs every project
        assert refusal(drover.PermissionDenied, ann.projects.create, "c")

        assert [p.name for p in rae.projects.list()] == ["a"]  # any user token reads its projects
        assert refusal(drover.PermissionDenied, rae.projects.update, "a", pool="x")
        assert refusal(drover.PermissionDenied, rae.tokens.list)
    with plane.client() as admin:
        assert admin.projects.get("b").pool == "" and admin.projects.get("a").pool == ""
        assert [p.name for p in admin.projects.list()] == ["a", "b"]


def test_a_token_never_mints_a_token_with_more_than_it_holds(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    plane.add_project("a")
    plane.add_project("b")
    with plane.client() as admin:
        held = admin.tokens.create("ann", role="admin", projects=["a"], monthly_budget_usd=5, expires_in="1d")
        assert held.token.created_by == "admin" and held.secret.startswith("drv_u_")
        # A lifetime past any date is refused, not an overflow (the fuzz found it: INTERNAL).
        assert refusal(drover.InvalidArgument, admin.tokens.create, "x", expires_in="99999999999999w").field == (
            "expires_in"
        )
    with plane.client(held.secret) as ann:
        assert refusal(drover.NotFound, ann.tokens.create, "x", projects=["b"]).field == "projects"
        assert refusal(drover.NotFound, ann.tokens.create, "x", projects=["a", "b"]).field == "projects"
        assert refusal(drover.PermissionDenied, ann.tokens.create, "x", role="admin").field == "role"
        assert refusal(drover.PermissionDenied, ann.tokens.create, "x", kind="agent").field == "kind"
        assert refusal(drover.InvalidArgument, ann.tokens.create, "x", monthly_budget_usd=6).field == (
            "monthly_budget_usd"
        )
        assert refusal(drover.InvalidArgument, ann.tokens.create, "x", expires_in="2d").field == "expires_in"
        assert refusal(drover.AlreadyExists, ann.tokens.create, "admin").field == "name"  # not its to shadow

        made = ann.tokens.create("ci", role="run.manage")  # defaults: what the minter holds
        assert (made.token.projects, made.token.monthly_budget_usd, made.token.created_by) == (["a"], 5.0, "ann")
        assert made.token.expires_at and made.token.expires_at <= held.token.expires_at
        assert ann.tokens.create("ci2", expires_in="12h", monthly_budget_usd=1).token.role == "submit"

        # A scoped admin lists and revokes only the tokens within its projects.
        assert sorted(t.name for t in ann.tokens.list()) == ["ann", "ci", "ci2"]
        assert all(not hasattr(t, "secret") for t in ann.tokens.list())
        assert refusal(drover.NotFound, ann.tokens.revoke, "admin").message == "name: no live token named 'admin'"
        assert ann.tokens.revoke("ci2") == 1
    with plane.client(made.secret) as ci:
        assert [p.name for p in ci.projects.list()] == ["a"]
    with plane.client() as admin:
        listed = {t.name: t for t in admin.tokens.list(include_revoked=True)}
        assert {"admin", "agent", "ann", "ci", "ci2"} <= set(listed) and listed["ci2"].revoked_at
        assert "ci2" not in {t.name for t in admin.tokens.list()}
    created = events(plane, "token.created")
    assert [(d["name"], d["by"]) for d in created][-3:] == [("ann", "admin"), ("ci", "ann"), ("ci2", "ann")]
    assert [(d["name"], d["by"]) for d in events(plane, "token.revoked")] == [("ci2", "ann")]
    listed_on_host = plane.cli("token", "list").stdout
    assert "ci2" in listed_on_host and held.secret not in listed_on_host


def test_a_revoked_admin_token_cannot_create_anything_from_the_next_call(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    with plane.client() as admin:
        second = admin.tokens.create("second", role="admin").secret
    with plane.client(second) as other, plane.client() as admin:
        other.projects.create("before")
        assert other.tokens.create("minted-before").token.created_by == "second"
        assert admin.tokens.revoke("second") == 1
        assert refusal(drover.Unauthenticated, other.projects.create, "after")
        assert refusal(drover.Unauthenticated, other.tokens.create, "minted-after")
        assert refusal(drover.Unauthenticated, other.projects.list)
        assert [p.name for p in admin.projects.list()] == ["before"]
        assert "minted-after" not in {t.name for t in admin.tokens.list()}


def test_a_git_credential_goes_in_once_sealed_and_never_comes_back(fleet: Fleet) -> None:
    secret = "ghp_" + "s3cr3t" * 6
    plane = fleet.plane
    plane.extra_env["DROVER_CREDENTIAL_KEY"] = Fernet.generate_key().decode()
    plane = fleet.start_plane()
    plane.add_project("web")
    with plane.client() as admin:
        shown = admin.projects.set_git_credential("web", "token", secret)
        assert (shown.git_credential.kind, shown.git_credential.set_by) == ("token", "admin")
        assert len(shown.git_credential.fingerprint) == 12 and shown.git_credential.set_at
        assert secret not in repr(admin.projects.get("web")) and secret not in repr(admin.projects.list())
        assert refusal(drover.InvalidArgument, admin.projects.set_git_credential, "web", "token", "a b").field == (
            "secret"
        )
        # The repository moving would send the credential elsewhere: refused until it is deleted.
        moved = refusal(drover.FailedPrecondition, admin.projects.update, "web", repo="https://example.com/r.git")
        assert moved.field == "project.repo"
        rotated = admin.projects.set_git_credential("web", "token", secret + "2")
        assert rotated.git_credential.fingerprint != shown.git_credential.fingerprint
        assert admin.projects.delete_git_credential("web").git_credential.kind == ""
        assert refusal(drover.FailedPrecondition, admin.projects.delete_git_credential, "web").field == "project"
        admin.projects.set_git_credential("web", "token", secret)
    # Nowhere in the data directory: the database (and its WAL), the object store, the logs, the tokens.
    holding = [p for p in plane.data_dir.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert holding == [] and (plane.data_dir / "drover.db").stat().st_size > 0
    kinds = events(plane, "project.credential_set")
    assert len(kinds) == 3 and all(secret not in str(d) for d in kinds)
    with sqlite3.connect(plane.data_dir / "drover.db") as db:
        sealed = db.execute("SELECT git_credential_sealed FROM projects WHERE name='web'").fetchone()[0]
    assert sealed and secret not in sealed


def test_without_a_credential_key_setting_a_credential_fails_naming_the_field(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    plane.add_project("web")
    with plane.client() as admin:
        refused = refusal(drover.FailedPrecondition, admin.projects.set_git_credential, "web", "token", "t0k")
        assert refused.field == "secret" and "credential key" in refused.message
        assert admin.projects.get("web").git_credential.kind == ""
    assert events(plane, "project.credential_set") == []


def test_grpcurl_creates_a_project_and_a_token(fleet: Fleet, tmp_path: pathlib.Path) -> None:
    """An operator with grpcurl alone: the services are listed by reflection, and a project and a token
    are made without the SDK."""
    from tests.controlplane.api.test_grpcurl import grpcurl, grpcurl_json

    plane = fleet.start_plane()
    repo = make_repo(tmp_path / "origin", {"app.py": "print(1)\n"})
    listed = grpcurl(plane, verb="list")
    assert {"drover.v1.ProjectService", "drover.v1.TokenService"} <= set(listed.stdout.split())
    made = grpcurl_json(
        plane,
        "drover.v1.ProjectService/CreateProject",
        token=plane.admin_token,
        data={"project": {"name": "curl", "repo": str(repo), "setup": ["pip install -e ."], "env": {"CI": "1"}}},
    )
    assert (made["name"], made["branch"], made["setup"], made["env"]) == (
        "curl",
        "main",
        ["pip install -e ."],
        {"CI": "1"},
    )
    token = grpcurl_json(
        plane,
        "drover.v1.TokenService/CreateToken",
        token=plane.admin_token,
        data={"name": "curl-ci", "role": "submit", "projects": ["curl"]},
    )
    assert token["token"]["projects"] == ["curl"] and token["secret"].startswith("drv_u_")
    seen = grpcurl_json(plane, "drover.v1.ProjectService/ListProjects", token=token["secret"], data={})
    assert [p["name"] for p in seen["projects"]] == ["curl"]
    denied = grpcurl(plane, "drover.v1.ProjectService/DeleteProject", token=token["secret"], data={"name": "curl"})
    assert denied.returncode != 0 and "PermissionDenied" in denied.stderr
