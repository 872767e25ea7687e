"""A harness run's ChangeSet leaves out what its commands built (issue 25 item 4, seed 000: "the
workspace then discards the files that the build wrote"), across a real control plane and agentd."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import httpx
import pygit2

from drover.testing import fake_anthropic as fake
from drover.testing import runtimes
from tests.conftest import API_KEY, Fleet
from tests.fleet.test_console import console_url


def fix_compile_and_complete(model: fake.FakeAnthropic) -> None:
    """Fix add(), write release notes into dist/ with write_file, byte-compile calc.py (which writes
    __pycache__/calc.cpython-3XX.pyc whatever PYTHONDONTWRITEBYTECODE says), run the tests, complete."""
    model.extend(
        [
            fake.tool_use("edit_file", {"path": "calc.py", "edits": [{"old_text": "a - b", "new_text": "a + b"}]}),
            fake.tool_use("write_file", {"path": "dist/NOTES.md", "content": "add() adds\n"}),
            fake.tool_use("run_command", {"command": "python -m py_compile calc.py"}),
            fake.tool_use("run_command", {"command": "python -m pytest -q"}),
            fake.tool_use("complete_task", {"summary": "add adds"}),
        ]
    )


def start(fleet: Fleet, model: fake.FakeAnthropic, repo: pathlib.Path, *project_args: str) -> None:
    fleet.plane.extra_env.update(ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=API_KEY)
    fleet.start_plane("--http-listen", "127.0.0.1:0")
    fleet.plane.cli("project", "add", "calc", "--repo", str(repo), "--branch", "main", *project_args)
    fleet.agent("worker")


def tree_paths(repo: pathlib.Path, branch: str) -> set[str]:
    index = pygit2.Index()
    origin = pygit2.Repository(str(repo))
    index.read_tree(origin.revparse_single(branch).peel(pygit2.Tree))
    return {entry.path for entry in index}


def test_the_changeset_leaves_out_pycache_and_lists_it(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path
) -> None:
    fix_compile_and_complete(model)
    start(fleet, model, calc_repo)
    with fleet.plane.client() as client:
        change = client.submit_change(
            "calc", "fix add", [{"key": "fix", "kind": "implement", "objective": "fix add", "complexity": "medium"}]
        )
        list(client.watch(change.id))
        final = client.get_change(change.id)
        (changeset,) = client.list_changesets(change.id)
        log = "".join(line.text for line in client.run_logs(final.tasks[0].latest_run_id) if line.stream == "system")
    assert final.status == "succeeded", final
    assert changeset.own_files == ["calc.py", "dist/NOTES.md"]  # dist/ is a build output, but write_file wrote it
    assert changeset.left_out == ["__pycache__/ (1 file)"]
    assert tree_paths(calc_repo, changeset.branch) == {"calc.py", "dist/NOTES.md", "test_calc.py"}
    assert "left out as build outputs: __pycache__/ (1 file)" in log

    env = {**os.environ, "DROVER_TARGET": fleet.plane.target}
    token = str(fleet.plane.data_dir / "tokens" / "admin.token")
    shown = subprocess.run(
        [sys.executable, "-m", "drover.cli", "changesets", change.id, "--token-file", token],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    ).stdout
    assert "LEFT OUT" in shown and "__pycache__/ (1 file)" in shown

    with httpx.Client(base_url=console_url(fleet), timeout=30) as console:
        assert console.post("/login", data={"token": fleet.plane.admin_token, "next": "/"}).status_code == 303
        page = console.get(f"/changes/{change.id}").text
    assert "left out as build outputs: __pycache__/ (1 file)" in page


def test_a_projects_own_list_replaces_the_default(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path
) -> None:
    fix_compile_and_complete(model)
    start(fleet, model, calc_repo, "--build-output", "*.pyc")
    with fleet.plane.client() as client:
        change = client.submit_change(
            "calc", "fix add", [{"key": "fix", "kind": "implement", "objective": "fix add", "complexity": "medium"}]
        )
        list(client.watch(change.id))
        (changeset,) = client.list_changesets(change.id)
    assert changeset.own_files == ["calc.py", "dist/NOTES.md"]
    (pyc,) = changeset.left_out  # the file itself: `*.pyc` names no directory
    assert pyc.startswith("__pycache__/calc.") and pyc.endswith(".pyc")


def test_project_add_takes_build_outputs_and_names_a_bad_one(fleet: Fleet, git_repo: pathlib.Path) -> None:
    plane = fleet.start_plane()
    plane.add_project("web", str(git_repo))
    assert json.loads(plane.cli("project", "show", "web").stdout)["build_outputs"] == []  # the default list
    plane.cli("project", "add", "web", "--repo", str(git_repo), "--build-output", "dist/", "--build-output", "*.map")
    assert json.loads(plane.cli("project", "show", "web").stdout)["build_outputs"] == ["dist/", "*.map"]

    refused = subprocess.run(
        [sys.executable, "-m", "controlplane.cli", "project", "add", "web", "--repo", str(git_repo)]
        + ["--build-output", "!keep.map", "--data-dir", str(plane.data_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2, refused.stderr
    assert "build_outputs" in refused.stderr and "negation ('!') is not supported" in refused.stderr
    assert json.loads(plane.cli("project", "show", "web").stdout)["build_outputs"] == ["dist/", "*.map"]


def test_a_claude_code_changeset_holds_the_fix_and_not_the_pycache(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path
) -> None:
    """The run the issue reports: Claude Code fixes one line, imports the module (Python writes
    __pycache__/), and the repository has no .gitignore. What its Write tool wrote stays in."""
    claude = runtimes.executable("claude")
    model.extend(
        [
            fake.tool_use("Bash", {"command": "sed -i 's/a - b/a + b/' calc.py", "description": "fix add"}),
            fake.tool_use("Write", {"file_path": "build/NOTES.md", "content": "add() adds\n"}),
            fake.tool_use(
                "Bash", {"command": "python3 -c 'import calc; assert calc.add(2, 3) == 5'", "description": "check"}
            ),
            fake.text("Fixed add()."),
        ]
    )
    fleet.plane.extra_env.update(ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=API_KEY)
    fleet.start_plane()
    fleet.plane.add_project("calc", str(calc_repo))
    fleet.agent("worker", extra=("--claude-command", claude))
    with fleet.plane.client() as client:
        task = {"key": "fix", "kind": "implement", "objective": "fix add", "complexity": "medium"}
        change = client.submit_change("calc", "fix add", [{**task, "runtime": "claude-code"}])
        list(client.watch(change.id))
        final = client.get_change(change.id)
        (changeset,) = client.list_changesets(change.id)
    assert final.status == "succeeded", final
    assert changeset.own_files == ["build/NOTES.md", "calc.py"]
    assert changeset.left_out == ["__pycache__/ (1 file)"]
    assert tree_paths(calc_repo, changeset.branch) == {"build/NOTES.md", "calc.py", "test_calc.py"}
