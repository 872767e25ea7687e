"""Workspace preparation (seed 003) with real processes: the project's setup commands run in the run's
sandbox after the clone (a real `pip install` of a package committed to a git repository), a failing
setup ends the run `setup_failed` with its output shown, the project's env and DROVER_* variables reach
setup and the Task, ChangeSets go to the project's Task branch with its git identity, and a command
Task's files and workdir are written and used (never through a symlink setup left behind)."""

from __future__ import annotations

import json
import pathlib
import re
import shlex

import pygit2
import pytest

from drover import Client, changefile
from drover.errors import InvalidArgument
from drover.testing import fake_anthropic as fake
from tests.conftest import API_KEY, ROOT, Fleet, make_repo, python_command, task

pytestmark = pytest.mark.timeout(240)

PYPROJECT = """[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "tinypkg"
version = "0.1.0"

[tool.setuptools.packages.find]
where = ["src"]
"""
PYTEST = ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"]


@pytest.fixture
def package_repo(tmp_path: pathlib.Path) -> pathlib.Path:
    """A src-layout package whose tests import it: they pass only once it is installed."""
    root = tmp_path / "pkg"
    (root / "src" / "tinypkg").mkdir(parents=True)
    (root / "tests").mkdir()
    return make_repo(
        root,
        {
            "pyproject.toml": PYPROJECT,
            "src/tinypkg/__init__.py": "def add(a, b):\n    return a + b\n",
            "tests/test_tiny.py": "from tinypkg import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
        },
    )


def output(client: Client, run_id: str, stream: str = "") -> str:
    return "".join(ln.text for ln in client.run_logs(run_id) if not stream or ln.stream == stream)


def run_one(client: Client, project: str, spec: dict) -> tuple[str, str]:
    """Submit one Task, wait for the Change to end; answers the Change's status and the Task's run."""
    change = client.submit_change(project, "prepare the workspace", [spec])
    list(client.watch(change.id))
    final = client.get_change(change.id)
    return final.status, final.tasks[0].latest_run_id


def documented() -> tuple[list[str], str]:
    """docs/configuration.md's "Workspace preparation": its `controlplane project add` and its Change file."""
    text = (ROOT / "docs" / "configuration.md").read_text()
    section = text.split("#### Workspace preparation\n", 1)[1].split("\n### ", 1)[0].split("\n#### ", 1)[0]
    (command,) = re.findall(r"^```sh\n(.*?)^```", section, re.MULTILINE | re.DOTALL)
    (change,) = re.findall(r"^```yaml\n(.*?)^```", section, re.MULTILINE | re.DOTALL)
    return shlex.split(command.replace("\\\n", " ")), change


def test_the_documented_setup_installs_the_package_its_tests_import(
    fleet: Fleet, package_repo: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """The page's project and Change file, as written (the repository's path put in for /path/to/pkg)."""
    add, change_file = documented()
    assert add[:4] == ["controlplane", "project", "add", "pkg"] and "/path/to/pkg" in add
    fleet.start_plane()
    fleet.plane.cli(*[str(package_repo) if arg == "/path/to/pkg" else arg for arg in add[1:]])
    fleet.plane.cli("project", "add", "bare", "--repo", str(package_repo), "--env", "PYTHONPATH=.deps")
    fleet.agent("prep-agent")
    (tmp_path / "change.yaml").write_text(change_file)
    with fleet.plane.client() as client:
        change = client.submit_change_file(changefile.load(tmp_path / "change.yaml"))
        list(client.watch(change.id))
        final = client.get_change(change.id)
        runs = {t.key: client.get_run(t.latest_run_id) for t in final.tasks}
        shown = {key: output(client, run.id) for key, run in runs.items()}
        bare_status, bare_run = run_one(client, "bare", task("tests", PYTEST))
        bare_shown = output(client, bare_run, "stdout")
    assert final.status == "succeeded", shown
    # the first of the two runs on this agent ran setup; the second started from its prepared workspace
    [first] = [key for key, run in runs.items() if not run.setup_cached]
    assert "setup: [1/1] $ python -m pip install" in shown[first]
    assert "[setup] Successfully installed tinypkg-0.1.0" in shown[first]
    assert "1 passed" in shown["tests"] and "smoke ok" in shown["smoke"]
    for run in runs.values():
        assert run.setup_seconds > 0
        assert run.branch == f"ai/check-the-package/{change.id}-{run.task_id}"
    # the same Task without the setup: the import fails
    assert bare_status == "failed"
    assert "No module named 'tinypkg'" in bare_shown


def test_a_failing_setup_ends_the_run_setup_failed_with_its_output(fleet: Fleet, git_repo: pathlib.Path) -> None:
    fleet.start_plane()
    broken = "echo fetching; echo 'no such registry' >&2; exit 3"
    fleet.plane.cli(
        "project",
        "add",
        "broken",
        "--repo",
        str(git_repo),
        "--setup",
        "true",
        "--setup",
        broken,
        "--setup",
        "touch never-ran",
    )
    fleet.agent("broken-agent")
    marker = python_command("print('the Task ran')")
    with fleet.plane.client() as client:
        status, run_id = run_one(client, "broken", task("work", marker))
        run, change = client.get_run(run_id), client.list_changes(project="broken")[0]
        shown = output(client, run_id)
        finished = [e for e in client.list_events(change_id=change.id) if e.kind == "run.finished"]
        task_row = client.get_change(change.id).tasks[0]
    assert status == "failed"
    assert (run.state, run.reason, run.exit_code) == ("failed", "setup_failed", 3)
    assert (task_row.status, task_row.reason) == ("failed", "setup_failed")
    assert "[setup] fetching\n" in shown and "[setup] no such registry\n" in shown
    assert "setup: [2/3] $ " + broken in shown and "[3/3]" not in shown
    assert "the Task ran" not in shown
    assert f"setup command 2 ({broken}) exited with 3" in finished[0].data["error"]


def test_the_projects_env_and_droviers_variables_reach_setup_and_the_task(fleet: Fleet, git_repo: pathlib.Path) -> None:
    fleet.start_plane()
    fleet.plane.cli(
        "project",
        "add",
        "envy",
        "--repo",
        str(git_repo),
        "--env",
        "STAGE=ci",
        "--env",
        "MODE=fast",
        "--setup",
        'echo "setup sees $STAGE $DROVER_TASK_KEY $DROVER_BRANCH"',
    )
    fleet.agent("env-agent")
    show = python_command("import os, json; print(json.dumps(dict(os.environ), sort_keys=True))")
    with fleet.plane.client() as client:
        status, run_id = run_one(client, "envy", task("show", show, env={"MODE": "task-wins"}))
        env = json.loads(output(client, run_id, "stdout").splitlines()[-1])
        shown, run = output(client, run_id), client.get_run(run_id)
    assert status == "succeeded", shown
    assert env["STAGE"] == "ci" and env["MODE"] == "task-wins"  # the Task's env over the project's
    assert (env["DROVER_CHANGE_ID"], env["DROVER_TASK_KEY"], env["DROVER_RUN_ID"]) == (run.change_id, "show", run_id)
    assert env["DROVER_BRANCH"] == run.branch == f"drover/{run.change_id}/{run.task_id}"
    assert f"[setup] setup sees ci show {run.branch}\n" in shown
    assert env["GIT_AUTHOR_NAME"] == "Drover Agent"


def test_changesets_go_to_the_task_branch_with_the_projects_identity(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path
) -> None:
    model.extend(
        [
            fake.tool_use("write_file", {"path": "calc.py", "content": "def add(a, b):\n    return a + b\n"}),
            fake.tool_use("complete_task", {"summary": "add adds"}),
        ]
    )
    fleet.plane.extra_env.update(ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=API_KEY)
    fleet.start_plane()
    fleet.plane.cli(
        "project",
        "add",
        "calc",
        "--repo",
        str(calc_repo),
        "--git-name",
        "Ballet Bot",
        "--git-email",
        "bot@ballet.invalid",
        "--branch-template",
        "ai/{slug}/{change}-{task}",
        "--setup",
        "touch .prepared",
    )
    fleet.agent("git-agent")
    spec = {"key": "fix", "kind": "implement", "objective": "make add add", "complexity": "medium"}
    with fleet.plane.client() as client:
        change = client.submit_change("calc", "Fix the adder!", [spec])
        list(client.watch(change.id))
        final = client.get_change(change.id)
        run = client.get_run(final.tasks[0].latest_run_id)
        (changeset,) = client.list_changesets(change.id)
    assert final.tasks[0].status == "succeeded", output_of(fleet, run.id)
    assert run.branch == changeset.branch == f"ai/fix-the-adder/{change.id}-{run.task_id}"
    commit = pygit2.Repository(str(calc_repo)).revparse_single(run.branch)
    assert (commit.author.name, commit.author.email) == ("Ballet Bot", "bot@ballet.invalid")
    assert (commit.committer.name, commit.committer.email) == ("Ballet Bot", "bot@ballet.invalid")
    assert ".prepared" not in changeset.files  # what setup made is not the Task's work... unless committed
    assert run.setup_seconds > 0


def output_of(fleet: Fleet, run_id: str) -> str:
    with fleet.plane.client() as client:
        return output(client, run_id)


def test_a_command_tasks_files_and_workdir(fleet: Fleet, git_repo: pathlib.Path, tmp_path: pathlib.Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    fleet.start_plane()
    fleet.plane.add_project("files", str(git_repo))
    fleet.plane.cli("project", "add", "trap", "--repo", str(git_repo), "--setup", f"ln -s {outside} escape")
    fleet.agent("files-agent")
    read = python_command("import os; print(os.getcwd().rsplit('/', 2)[-2:], open('data/in.txt').read())")
    files = {"tools/data/in.txt": "hello from a file", "tools/notes.md": "# notes\n"}
    with fleet.plane.client() as client:
        status, run_id = run_one(client, "files", task("read", read, files=files, workdir="tools"))
        shown = output(client, run_id, "stdout")
        trapped_status, trapped = run_one(client, "trap", task("w", ["true"], files={"escape/pwned.txt": "x"}))
        trapped_run = client.get_run(trapped)
        refusals = {}
        for name, bad in {
            "up": {"files": {"../up.txt": "x"}},
            "absolute": {"files": {"/etc/x": "x"}},
            "git": {"files": {".git/config": "x"}},
            "workdir": {"workdir": "../.."},
        }.items():
            with pytest.raises(InvalidArgument) as caught:
                client.submit_change("files", "bad", [task("bad", ["true"], **bad)])
            refusals[name] = str(caught.value)
    assert status == "succeeded"
    assert shown == "['repo', 'tools'] hello from a file\n"
    # setup left a symlink out of the workspace: agentd refuses to write through it
    assert trapped_status == "failed" and trapped_run.reason == "workspace_failed"
    assert list(outside.iterdir()) == []
    for name, said in refusals.items():
        assert "tasks[0].workspace_files" in said or (name == "workdir" and "tasks[0].workdir" in said), said


def test_setup_has_the_network_the_tasks_own_phase_does_not(fleet: Fleet, git_repo: pathlib.Path) -> None:
    """Setup reaches the host (here: the control plane's port) by default; the Task's command, in a project
    without `--network`, and setup with `--no-setup-network` do not."""
    fleet.start_plane()
    reach = f"import socket; socket.create_connection(('127.0.0.1', {fleet.plane.port}), 5); print('reached')"
    setup = f'python -c "{reach}"'
    fleet.plane.cli("project", "add", "online", "--repo", str(git_repo), "--setup", setup)
    fleet.plane.cli("project", "add", "offline", "--repo", str(git_repo), "--setup", setup, "--no-setup-network")
    fleet.agent("net-agent")
    with fleet.plane.client() as client:
        status, run_id = run_one(client, "online", task("reach", python_command(reach)))
        online, online_run = output(client, run_id), client.get_run(run_id)
        offline_status, offline_id = run_one(client, "offline", task("reach", ["true"]))
        offline_run = client.get_run(offline_id)
    assert "[setup] reached\n" in online  # setup had the network
    assert status == "failed" and online_run.reason == "exit_code"  # the Task's own phase had none
    assert "ConnectionRefusedError" in online or "OSError" in online, online
    assert offline_status == "failed" and offline_run.reason == "setup_failed"
