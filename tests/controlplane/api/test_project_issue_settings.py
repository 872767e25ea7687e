"""What an issue's Change is made of (issue 28): a project's forge_budget_usd, forge_branch_template and
forge_check_command, on a real control plane, through every door forge_label has: the API (defaults,
update by mask, each refusal naming its field and changing nothing), the host's `controlplane project
add`, the `drover` CLI's project update, and the console's project page."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

import drover
from tests.conftest import Fleet
from tests.controlplane.api.test_project_forge_link import settings
from tests.controlplane.api.test_projects_and_tokens import events, refusal
from tests.controlplane.web.test_console_projects_and_tokens import console, signed_in

LINKED = {"forge": "github", "forge_repo": "octo/web"}


def issue_settings(p: drover.Project) -> tuple[float, str, str]:
    return (p.forge_budget_usd, p.forge_branch_template, p.forge_check_command)


def test_the_issue_settings_default_update_and_are_refused_by_field(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    with plane.client() as admin:
        made = admin.projects.create("web", **LINKED)
        assert issue_settings(made) == (0.0, "drover/issue-{number}", "")
        changed = admin.projects.update(
            "web", forge_budget_usd=2.5, forge_branch_template="ai/{slug}-{number}", forge_check_command="pytest -q"
        )
        assert issue_settings(changed) == (2.5, "ai/{slug}-{number}", "pytest -q")
        assert admin.projects.get("web") == changed
        kept = admin.projects.update("web", forge_label="ai")
        assert issue_settings(kept) == (2.5, "ai/{slug}-{number}", "pytest -q")  # not in the mask: kept
        assert admin.projects.update("web", forge_budget_usd=0, forge_check_command="").forge_budget_usd == 0.0
        assert admin.projects.create("api", forge_branch_template="bot/{change}").forge_branch_template == (
            "bot/{change}"
        )

        before = settings(admin.projects.get("web"))
        for given, field in (
            ({"forge_budget_usd": -0.01}, "project.forge_budget_usd"),
            ({"forge_budget_usd": float("nan")}, "project.forge_budget_usd"),
            ({"forge_budget_usd": float("inf")}, "project.forge_budget_usd"),
            ({"forge_branch_template": ""}, "project.forge_branch_template"),
            ({"forge_branch_template": "drover/{slug}"}, "project.forge_branch_template"),  # two issues, one branch
            ({"forge_branch_template": "drover/{task}-{number}"}, "project.forge_branch_template"),
            ({"forge_branch_template": "drover/{number:05d}"}, "project.forge_branch_template"),
            ({"forge_branch_template": "drover/{number"}, "project.forge_branch_template"),
            ({"forge_branch_template": "drover..{number}"}, "project.forge_branch_template"),  # not a git ref
            ({"forge_branch_template": "drover/{number}.lock"}, "project.forge_branch_template"),
            ({"forge_branch_template": "issue {number}"}, "project.forge_branch_template"),
            ({"forge_check_command": "x" * 4097}, "project.forge_check_command"),
            ({"forge_check_command": "pytest\x00-q"}, "project.forge_check_command"),
        ):
            refused = refusal(drover.InvalidArgument, admin.projects.update, "web", **given)
            assert refused.field == field, (given, refused)
            assert settings(admin.projects.get("web")) == before, given
        assert admin.projects.update("web", forge_check_command="é" * 2048).forge_check_command == "é" * 2048
        bad = refusal(drover.InvalidArgument, admin.projects.create, "x", **LINKED, forge_budget_usd=-1)
        assert bad.field == "project.forge_budget_usd"
        assert [p.name for p in admin.projects.list()] == ["api", "web"]
    assert next(d["fields"] for d in events(plane, "project.updated")) == [
        "forge_branch_template",
        "forge_budget_usd",
        "forge_check_command",
    ]


def test_the_hosts_project_add_and_the_drover_cli_set_them(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    plane.cli(
        "project", "add", "web", "--forge", "github", "--forge-repo", "octo/web", "--forge-budget-usd", "4",
        "--forge-branch-template", "fix/{number}", "--forge-check-command", "make test",
    )  # fmt: skip
    shown = json.loads(plane.cli("project", "show", "web").stdout)
    assert (shown["forge_budget_usd"], shown["forge_branch_template"], shown["forge_check_command"]) == (
        4.0,
        "fix/{number}",
        "make test",
    )
    with pytest.raises(subprocess.CalledProcessError) as refused:
        plane.cli("project", "add", "web", "--forge", "github", "--forge-repo", "octo/web", "--forge-budget-usd", "-1")
    assert "forge_budget_usd" in refused.value.stderr
    plane.cli("project", "add", "plain")
    assert json.loads(plane.cli("project", "show", "plain").stdout)["forge_branch_template"] == "drover/issue-{number}"

    env = {k: v for k, v in os.environ.items() if k != "DROVER_TOKEN"}
    env.update(DROVER_TARGET=plane.target, DROVER_TOKEN=plane.admin_token)
    drover_cli = [str(pathlib.Path(sys.executable).parent / "drover"), "project", "update", "web"]
    done = subprocess.run(
        [*drover_cli, "--forge-budget-usd", "1.5", "--forge-branch-template", "bot/{change}",
         "--forge-check-command", "pytest -q"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert (printed["forge_budget_usd"], printed["forge_branch_template"], printed["forge_check_command"]) == (
        1.5,
        "bot/{change}",
        "pytest -q",
    )
    bad = subprocess.run(
        [*drover_cli, "--forge-branch-template", "bot/{slug}"], env=env, capture_output=True, text=True, timeout=60
    )
    assert bad.returncode != 0 and "project.forge_branch_template" in bad.stderr
    with plane.client() as admin:
        assert admin.projects.get("web").forge_branch_template == "bot/{change}"


def test_the_project_page_shows_them(fleet: Fleet) -> None:
    plane = fleet.start_plane("--http-listen", "127.0.0.1:0")
    with plane.client() as admin:
        admin.projects.create("web", **LINKED, forge_budget_usd=3, forge_check_command="pytest -q <fast>")
        admin.projects.create("bare", **LINKED)
    with signed_in(console(plane), plane.admin_token) as http:
        forge = http.get("/projects/web").text.split('id="forge-h"', 1)[1]
        assert 'class="forge-budget">$3.00<' in forge
        assert 'class="forge-branch">drover/issue-{number}<' in forge
        assert "<code>pytest -q &lt;fast&gt;</code>" in forge  # escaped
        bare = http.get("/projects/bare").text.split('id="forge-h"', 1)[1]
        assert 'class="forge-budget">none<' in bare and 'class="forge-check">none<' in bare
