"""A project's forge link edited in the console, as a browser uses it against a real control plane: the
link's settings saved (and nothing else of the project), a bad value the API's field-named error, the
forge credential pasted (a token or a GitHub App's key) and never shown again, and a new webhook secret
shown on the one page that answers its form. A submit token gets no form and is refused."""

from __future__ import annotations

import dataclasses
import html

from cryptography.fernet import Fernet

from controlplane.web import session
from tests.conftest import Fleet
from tests.controlplane.web.test_console_projects_and_tokens import console, signed_in
from tests.sdk.test_fake_github import _app_key

LINK = {
    "forge": "github",
    "forge_repo": "octo-org/web",
    "forge_api_url": "https://github.example.com/api/v3",
    "forge_label": "ai",
    "max_fix_rounds": "5",
    "forge_budget_usd": "2.50",
    "forge_branch_template": "bot/{number}-{slug}",
    "forge_check_command": "python -m pytest -q",
}


def test_the_forge_form_saves_the_link_and_only_the_link(fleet: Fleet) -> None:
    plane = fleet.start_plane("--http-listen", "127.0.0.1:0")
    url, csrf = console(plane), session.csrf_token(plane.admin_token)
    with plane.client() as admin:
        admin.projects.create("web", pool="gpu", monthly_budget_usd=25)
        before = admin.projects.get("web")
    with signed_in(url, plane.admin_token) as http:
        assert 'action="/projects/web/forge"' in http.get("/projects/web").text
        assert http.post("/projects/web/forge", data=LINK).status_code == 403  # no CSRF field
        saved = http.post("/projects/web/forge", data={"csrf": csrf, **LINK})
        assert saved.status_code == 303 and saved.headers["location"] == "/projects/web"
        shown = http.get("/projects/web").text.split('id="forge-h"', 1)[1]
    with plane.client() as admin:
        after = admin.projects.get("web")
    stored = {k: v for k, v in LINK.items() if k not in ("max_fix_rounds", "forge_budget_usd")}
    expected = dataclasses.replace(
        before, **stored, max_fix_rounds=5, forge_budget_usd=2.5, updated_at=after.updated_at
    )
    assert after == expected  # the pool, the monthly budget and the rest did not move
    for text in ("octo-org/web", "bot/{number}-{slug}", "$2.50", "python -m pytest -q"):
        assert text in html.unescape(shown), text

    bad = {
        "project.forge_repo": {"forge_repo": "not a repository"},
        "project.forge_branch_template": {"forge_branch_template": "bot/{nope}"},
        "project.max_fix_rounds": {"max_fix_rounds": "many"},  # refused before any call
        "project.forge_budget_usd": {"forge_budget_usd": "-1"},
    }
    with signed_in(url, plane.admin_token) as http:
        for field, wrong in bad.items():
            refused = http.post("/projects/web/forge", data={"csrf": csrf, **LINK, **wrong})
            assert refused.status_code == 400, (field, refused.text)
            assert f'role="alert">INVALID_ARGUMENT: {field}: ' in html.unescape(refused.text), field
    with plane.client() as admin:
        assert admin.projects.get("web") == after


def test_the_credential_is_pasted_once_and_the_webhook_secret_shown_once(fleet: Fleet) -> None:
    fleet.plane.extra_env["DROVER_CREDENTIAL_KEY"] = Fernet.generate_key().decode()
    plane = fleet.start_plane("--http-listen", "127.0.0.1:0")
    url, csrf = console(plane), session.csrf_token(plane.admin_token)
    token = "github_pat_" + "pasted" * 8
    private, _ = _app_key()
    with plane.client() as admin:
        admin.projects.create("web", forge="github", forge_repo="octo-org/web")
        submitter = admin.tokens.create("ann", role="submit", projects=["web"]).secret
    with signed_in(url, plane.admin_token) as http:
        sent = {"csrf": csrf, "kind": "token", "secret": token + "\r\n", "app_id": "", "installation_id": ""}
        assert http.post("/projects/web/forge-credential", data=sent).status_code == 303
        page = http.get("/projects/web").text
        with plane.client() as admin:
            fingerprint = admin.projects.get("web").forge_credential.fingerprint
        assert fingerprint in page and token not in page
        app = {"csrf": csrf, "kind": "app", "secret": private.replace("\n", "\r\n"), "app_id": "42"}
        assert http.post("/projects/web/forge-credential", data=app | {"installation_id": "7"}).status_code == 303
        assert "GitHub App 42, installation 7" in http.get("/projects/web").text
        refused = http.post("/projects/web/forge-credential", data=app | {"installation_id": "seven"})
        assert refused.status_code == 400 and "INVALID_ARGUMENT: installation_id: " in refused.text

        made = http.post("/projects/web/webhook-secret", data={"csrf": csrf})
        assert made.status_code == 200
        secret = html.unescape(made.text.split('<code class="secret">', 1)[1].split("</code>", 1)[0])
        assert len(secret) >= 40 and "no longer verifies" in made.text
        assert secret not in http.get("/projects/web").text  # shown on that answer only
    with plane.client() as admin:
        got = admin.projects.get("web")
    assert (got.forge_credential.kind, got.forge_credential.app_id) == ("app", 42) and got.webhook_secret.set
    with signed_in(url, submitter) as http:
        page = http.get("/projects/web").text
        assert (
            "/forge-credential" not in page
            and "/webhook-secret" not in page
            and 'action="/projects/web/forge"' not in page
        )
        for action in ("forge", "forge-credential", "webhook-secret"):
            refused = http.post(f"/projects/web/{action}", data={"csrf": session.csrf_token(submitter), **LINK})
            assert refused.status_code == 403 and 'role="alert">PERMISSION_DENIED: ' in refused.text, action
    with plane.client() as admin:
        assert admin.projects.get("web") == got
