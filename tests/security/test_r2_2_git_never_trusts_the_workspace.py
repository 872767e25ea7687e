"""Round two, finding 2: the root supervisor trusted the workspace's `.git`. The sandbox could write
it, and publishing then ran on that repository as root: `git config core.worktree /etc` (run from a
`conftest.py`) made the ChangeSet commit host directories (the patch, readable by the submitter
through GetPatch, carried admin.token, agent.token, /etc/shadow and other runs' transcripts), and
`remote.origin.url` made it push into another project's repository.

Here a real harness run (scripted model, real agentd as root, real control plane) writes that
`conftest.py` and runs `python -m pytest`, as the probe did. Now the git directory lives beside the
worktree, read-only inside the sandbox; publishing opens it with agentd's configuration, takes the
worktree's files (a symlink as a link, never its target) and pushes where the assignment says.
"""

from __future__ import annotations

import os
import pathlib

import pygit2

from drover.testing import fake_anthropic as fake
from tests.conftest import API_KEY, Fleet, make_repo

ATTACK = """import os, subprocess

OTHER = {other!r}


def pytest_configure(config):
    said = []
    for args in (["config", "core.worktree", "/etc"], ["config", "remote.origin.url", OTHER],
                 ["config", "core.fsmonitor", "touch /tmp/fsmonitor-ran"]):
        done = subprocess.run(["git", *args], capture_output=True, text=True)
        said.append(f"git {{args[0]}} {{args[1]}}: {{done.returncode}}")
    for path in (".git/config", ".git/hooks/pre-commit"):
        try:
            with open(path, "a") as f:
                f.write("[core]\\n\\tworktree = /etc\\n")
            said.append(f"wrote {{path}}")
        except OSError as err:
            said.append(f"cannot write {{path}}: {{err.strerror}}")
    os.symlink("/etc/shadow", "leak")
    os.symlink("/etc", "etc-link")
    os.mkfifo("pipe")
    print("ATTACK", "; ".join(said))
"""

TEST = "def test_nothing():\n    assert True\n"


def test_a_conftest_that_rewrites_git_config_publishes_only_the_worktree(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    other = make_repo(tmp_path / "other", {"secret.txt": "another project's\n"})
    other_branches = set(pygit2.Repository(str(other)).branches.local)
    model.extend(
        [
            fake.tool_use("write_file", {"path": "conftest.py", "content": ATTACK.format(other=str(other))}),
            fake.tool_use("write_file", {"path": "tests/test_nothing.py", "content": TEST}),
            fake.tool_use("run_command", {"command": "python -m pytest -q -s tests/test_nothing.py"}),
            fake.tool_use("complete_task", {"summary": "attacked"}),
        ]
    )
    fleet.plane.extra_env.update(ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=API_KEY)
    fleet.start_plane()
    fleet.plane.add_project("calc", str(calc_repo))
    fleet.agent("worker")
    with fleet.plane.client() as client:
        change = client.submit_change(
            "calc", "attack", [{"key": "attack", "kind": "implement", "objective": "x", "complexity": "medium"}]
        )
        list(client.watch(change.id))
        run = client.get_run(client.get_change(change.id).tasks[0].latest_run_id)
        logs = "".join(line.text for line in client.run_logs(run.id))
        changesets = client.list_changesets(change.id)
        patch = client.get_patch(changesets[0].id) if changesets else ""
    assert run.state == "succeeded", (run, logs[-3000:])
    assert "ATTACK" in logs
    # the ChangeSet holds the worktree's files and nothing of the host
    (changeset,) = changesets
    assert set(changeset.files) == {"conftest.py", "tests/test_nothing.py", "leak", "etc-link"}, changeset.files
    if os.geteuid() == 0:
        first_shadow_line = pathlib.Path("/etc/shadow").read_text().splitlines()[0]
        assert first_shadow_line not in patch
    assert "root:" not in patch and "admin" not in patch and "passwd" not in patch
    assert "new file mode 120000" in patch and "+/etc/shadow" in patch  # the link, never its target
    # pushed into the project's own repository, never the other one
    assert set(pygit2.Repository(str(other)).branches.local) == other_branches
    assert changeset.branch in set(pygit2.Repository(str(calc_repo)).branches.local)
    assert not pathlib.Path("/tmp/fsmonitor-ran").exists()
    # inside, the git directory is read-only: every way of changing it failed
    attack = next(line for line in logs.splitlines() if "ATTACK" in line and "git config" in line)
    assert "wrote" not in attack and ": 0" not in attack, attack
