"""The console's projects and tokens pages, as a browser uses them against a real control plane: a
project's settings and its credential's kind and fingerprint (never the secret), its workspace
preparation added with it and edited on its page, a token minted and shown once, revoked from the page,
and a scoped visitor seeing only its own."""

from __future__ import annotations

import contextlib
import dataclasses
import html
import pathlib
import re
from collections.abc import Iterator

import httpx
from cryptography.fernet import Fernet

from controlplane.web import session
from drover.errors import NotFound
from tests.conftest import ControlPlane, Fleet, make_repo, wait_for


def console(plane: ControlPlane) -> str:
    def url() -> str:
        text = "\n".join(p.read_text() for p in plane.data_dir.glob("controlplane-*.log"))
        hit = re.search(r"drover console on (https?://127\.0\.0\.1:\d+)/", text)
        return hit.group(1) if hit else ""

    return wait_for(url, 30, what="the console to listen")


@contextlib.contextmanager
def signed_in(url: str, token: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=url, follow_redirects=False, timeout=60) as http:
        assert http.post("/login", data={"token": token, "next": "/"}).status_code == 303
        yield http


def test_the_project_pages_show_settings_and_the_credential_but_never_the_secret(fleet: Fleet) -> None:
    secret = "ghp_" + "q" * 36
    fleet.plane.extra_env["DROVER_CREDENTIAL_KEY"] = Fernet.generate_key().decode()
    plane = fleet.start_plane("--http-listen", "127.0.0.1:0")
    plane.add_project("secretive")
    with plane.client() as admin:
        admin.projects.create("web", setup=["pip install -e ."], env={"MODE": "ci"}, git_name="Bot")
        fingerprint = admin.projects.set_git_credential("web", "token", secret).git_credential.fingerprint
        scoped = admin.tokens.create("ann", role="submit", projects=["web"]).secret
    url = console(plane)
    with signed_in(url, plane.admin_token) as http:
        listing = http.get("/projects")
        assert listing.status_code == 200 and "secretive" in listing.text and 'href="/projects/web"' in listing.text
        page = http.get("/projects/web")
        assert page.status_code == 200
        for shown in ("pip install -e .", "MODE", "ci", "Bot", fingerprint, "token"):
            assert shown in page.text
        assert secret not in page.text and secret not in listing.text
        assert http.get("/projects/nope").status_code == 404
        csrf = session.csrf_token(plane.admin_token)
        added = http.post("/projects", data={"csrf": csrf, "name": "from-form", "repo": "", "branch": ""})
        assert added.status_code == 303 and added.headers["location"] == "/projects/from-form"
        refused = http.post("/projects", data={"csrf": csrf, "name": "from-form"})
        assert refused.status_code == 409 and "project.name" in refused.text  # ALREADY_EXISTS, naming the field
    with signed_in(url, scoped) as http:
        assert "secretive" not in http.get("/projects").text
        assert http.get("/projects/secretive").status_code == 404  # as if it did not exist
        assert 'href="/tokens"' not in http.get("/projects").text  # not an admin: no tokens page offered
        assert http.get("/tokens").status_code == 403
        assert 'action="/projects"' not in http.get("/projects").text  # no form it would be refused


def test_the_tokens_page_mints_once_and_revokes(fleet: Fleet) -> None:
    plane = fleet.start_plane("--http-listen", "127.0.0.1:0")
    plane.add_project("web")
    url = console(plane)
    csrf = session.csrf_token(plane.admin_token)
    with signed_in(url, plane.admin_token) as http:
        page = http.get("/tokens")
        assert page.status_code == 200 and 'data-token="agent"' in page.text
        minted = http.post("/tokens", data={"csrf": csrf, "name": "ci", "role": "submit", "projects": "web"})
        assert minted.status_code == 200
        secret = re.search(r'<pre class="secret" data-token="ci">([^<]+)</pre>', minted.text).group(1)  # type: ignore[union-attr]
        assert secret.startswith("drv_u_")
        assert secret not in http.get("/tokens").text  # shown once
        with plane.client(secret) as ci:
            assert [p.name for p in ci.projects.list()] == ["web"]
        refused = http.post("/tokens", data={"csrf": csrf, "name": "bad name"})
        assert refused.status_code == 400 and "name" in refused.text
        assert http.post("/tokens/ci/revoke", data={"kind": "user"}).status_code == 403  # no CSRF field
        revoked = http.post("/tokens/ci/revoke", data={"csrf": csrf, "kind": "user"})
        assert revoked.status_code == 303 and revoked.headers["location"] == "/tokens"
        assert 'data-token="ci"' not in http.get("/tokens").text
        assert 'data-token="ci"' in http.get("/tokens?revoked=1").text
    with plane.client() as admin:
        assert [(t.name, t.created_by) for t in admin.tokens.list(include_revoked=True) if t.name == "ci"] == [
            ("ci", "admin")
        ]


PREPARED = {
    "setup": "pip install -e .\r\n\r\n  make deps  \r\n",
    "setup_network": "off",  # the form's hidden field alone: the checkbox left unticked
    "env": "MODE=ci\r\nURL=https://example.invalid/?a=b=c\r\n",
    "git_name": "Build Bot",
    "git_email": "bot@example.invalid",
    "branch_template": "bots/{change}-{task}-{slug}",
    "cache_key_files": "requirements*.txt\nsetup.cfg\n",
}
STORED = {
    "setup": ["pip install -e .", "make deps"],
    "setup_network": False,
    "env": {"MODE": "ci", "URL": "https://example.invalid/?a=b=c"},
    "git_name": "Build Bot",
    "git_email": "bot@example.invalid",
    "branch_template": "bots/{change}-{task}-{slug}",
    "cache_key_files": ["requirements*.txt", "setup.cfg"],
}


def test_the_add_project_form_stores_the_workspace_preparation(fleet: Fleet) -> None:
    plane = fleet.start_plane("--http-listen", "127.0.0.1:0")
    url = console(plane)
    csrf = session.csrf_token(plane.admin_token)
    with signed_in(url, plane.admin_token) as http:
        form = http.get("/projects").text
        for field in ("setup", "env", "cache_key_files"):
            assert f'<textarea name="{field}"' in form
        assert 'name="setup_network" value="on" checked' in form and 'placeholder="drover/{change}/{task}"' in form
        added = http.post("/projects", data={"csrf": csrf, "name": "web", "repo": "", "branch": "", **PREPARED})
        assert added.status_code == 303 and added.headers["location"] == "/projects/web"
        ticked = {"csrf": csrf, "name": "ticked", "setup_network": ["off", "on"]}  # hidden field, then the box
        assert http.post("/projects", data=ticked).status_code == 303
        assert http.post("/projects", data={"csrf": csrf, "name": "bare"}).status_code == 303
        page = http.get("/projects/web").text
    with plane.client() as admin:
        web = admin.projects.get("web")
        assert {key: getattr(web, key) for key in STORED} == STORED
        assert admin.projects.get("ticked").setup_network and admin.projects.get("bare").setup_network  # default on
        assert admin.projects.get("bare").setup == [] and admin.projects.get("bare").env == {}
    assert "pip install -e .\nmake deps</textarea>" in page and "MODE=ci\nURL=" in page  # pre-filled to edit
    assert 'name="setup_network" value="on">' in page  # stored off: the box unticked


def _prepared_project(fleet: Fleet, tmp_path: pathlib.Path) -> ControlPlane:
    repo = make_repo(tmp_path / "origin", {"README.md": "# web\n"})
    plane = fleet.start_plane("--http-listen", "127.0.0.1:0")
    with plane.client() as admin:
        admin.projects.create("web", repo=str(repo), branch="main", setup=["make old"], env={"OLD": "1"})
        admin.projects.update(
            "web", pool="gpu", monthly_budget_usd=25.0, network=True, answer_window_minutes=30.0, git_name="Old"
        )
        admin.projects.create("api")
    return plane


def test_the_project_page_edits_only_the_workspace_preparation(fleet: Fleet, tmp_path: pathlib.Path) -> None:
    plane = _prepared_project(fleet, tmp_path)
    url = console(plane)
    csrf = session.csrf_token(plane.admin_token)
    with plane.client() as admin:
        before = admin.projects.get("web")
    with signed_in(url, plane.admin_token) as http:
        page = http.get("/projects/web").text
        assert 'action="/projects/web/preparation"' in page and "make old</textarea>" in page
        assert 'name="setup_network" value="on" checked' in page and 'value="Old"' in page
        assert http.post("/projects/web/preparation", data=PREPARED).status_code == 403  # no CSRF field
        with plane.client() as admin:
            assert admin.projects.get("web") == before
        saved = http.post("/projects/web/preparation", data={"csrf": csrf, **PREPARED})
        assert saved.status_code == 303 and saved.headers["location"] == "/projects/web"
        shown = http.get("/projects/web").text
    with plane.client() as admin:
        after = admin.projects.get("web")
        assert after.updated_at != before.updated_at
        assert after == dataclasses.replace(before, **STORED, updated_at=after.updated_at)  # nothing else moved
        assert (after.repo, after.branch, after.pool, after.monthly_budget_usd) == (before.repo, "main", "gpu", 25.0)
    for text in ("make deps", "URL", "Build Bot", "bots/{change}-{task}-{slug}", "setup.cfg", "without network"):
        assert text in shown
    assert "spans several lines" not in shown
    with plane.client() as admin:
        admin.projects.update("web", setup=["cat > conf <<EOF\nx = 1\nEOF"])
    with signed_in(url, plane.admin_token) as http:
        assert "spans several lines" in http.get("/projects/web").text  # saving would split it: said first


def test_a_bad_preparation_is_the_apis_field_named_error_and_changes_nothing(
    fleet: Fleet, tmp_path: pathlib.Path
) -> None:
    plane = _prepared_project(fleet, tmp_path)
    url = console(plane)
    csrf = session.csrf_token(plane.admin_token)
    with plane.client() as admin:
        before = admin.projects.get("web")
    bad = {
        "project.env": {"env": "MODE=ci\nJUSTAWORD\n"},  # no '=': refused before any call
        'project.env["1BAD"]': {"env": "1BAD=x\n"},  # the API's check of the name
        'project.env["MODE"]': {"env": "MODE=ci\nMODE=dev\n"},  # which one was meant?
        "project.env[DROVER_RUN]": {"env": "DROVER_RUN=x\n"},
        "project.branch_template": {"branch_template": "drover/{change}"},
        "project.git_email": {"git_email": "not an address"},
        "project.cache_key_files[0]": {"cache_key_files": "../outside\n"},
    }
    with signed_in(url, plane.admin_token) as http:
        for field, wrong in bad.items():
            refused = http.post("/projects/web/preparation", data={"csrf": csrf, **PREPARED, **wrong})
            assert refused.status_code == 400, (field, refused.text)
            shown = html.unescape(refused.text)
            assert f'role="alert">INVALID_ARGUMENT: {field}: ' in shown, shown
            added = http.post("/projects", data={"csrf": csrf, "name": "new", **PREPARED, **wrong})
            assert added.status_code == 400 and f"INVALID_ARGUMENT: {field}: " in html.unescape(added.text)
    with plane.client() as admin:
        assert admin.projects.get("web") == before
        with contextlib.suppress(NotFound):
            admin.projects.get("new")
            raise AssertionError("a refused form stored a project")


def test_only_an_admin_of_the_project_may_edit_its_preparation(fleet: Fleet, tmp_path: pathlib.Path) -> None:
    plane = _prepared_project(fleet, tmp_path)
    url = console(plane)
    with plane.client() as admin:
        other = admin.tokens.create("other", role="admin", projects=["api"]).secret
        submitter = admin.tokens.create("ann", role="submit", projects=["web"]).secret
        own = admin.tokens.create("own", role="admin", projects=["web"]).secret
        before = admin.projects.get("web")
    with signed_in(url, other) as http:
        refused = http.post("/projects/web/preparation", data={"csrf": session.csrf_token(other), **PREPARED})
        assert refused.status_code == 404 and 'role="alert">NOT_FOUND: ' in refused.text  # as if it did not exist
    with signed_in(url, submitter) as http:
        page = http.get("/projects/web")
        assert page.status_code == 200 and "/preparation" not in page.text  # no form it would be refused
        refused = http.post("/projects/web/preparation", data={"csrf": session.csrf_token(submitter), **PREPARED})
        assert refused.status_code == 403 and 'role="alert">PERMISSION_DENIED: ' in refused.text
    with plane.client() as admin:
        assert admin.projects.get("web") == before
    with signed_in(url, own) as http:  # an admin scoped to the project may
        assert 'action="/projects/web/preparation"' in http.get("/projects/web").text
        saved = http.post("/projects/web/preparation", data={"csrf": session.csrf_token(own), **PREPARED})
        assert saved.status_code == 303
    with plane.client() as admin:
        assert admin.projects.get("web").setup == STORED["setup"]


def test_the_project_page_shows_the_forge_link_but_never_its_secrets(fleet: Fleet) -> None:
    token = "github_pat_" + "c0nsole" * 6
    fleet.plane.extra_env["DROVER_CREDENTIAL_KEY"] = Fernet.generate_key().decode()
    plane = fleet.start_plane("--http-listen", "127.0.0.1:0")
    with plane.client() as admin:
        admin.projects.create("plain")
        admin.projects.create("web", forge="github", forge_repo="octo-org/web", forge_label="ai", max_fix_rounds=7)
        fingerprint = admin.projects.set_forge_credential("web", "token", token).forge_credential.fingerprint
        hook = admin.projects.rotate_webhook_secret("web").secret
    url = console(plane)
    with signed_in(url, plane.admin_token) as http:
        page = http.get("/projects/web")
        assert page.status_code == 200
        forge = page.text.split('id="forge-h"', 1)[1]
        for shown in ("github", "octo-org/web", "https://api.github.com", "ai", "7", fingerprint, "token"):
            assert shown in forge, shown
        assert re.search(r'class="webhook-secret">set \S+ by admin', forge)
        assert token not in page.text and hook not in page.text
        plain = http.get("/projects/plain").text.split('id="forge-h"', 1)[1]
        assert "Not linked to a forge" in plain
