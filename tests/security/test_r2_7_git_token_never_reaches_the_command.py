"""Round two, finding 7 (git token): the project's git token was given to every command in
DROVER_GIT_TOKEN and redacted from its output only verbatim: printed reversed or in base64 it
showed in the run's log. Now agentd clones and pushes with it and the command never gets it, so
there is nothing to redact."""

from __future__ import annotations

import base64
import pathlib
import sys

from tests.conftest import Fleet, make_repo, task

TOKEN = "ghp_r27_0123456789abcdefXYZ"

SHOW = """
import base64, os
token = os.environ.get("DROVER_GIT_TOKEN", "")
print("reversed", token[::-1])
print("base64", base64.b64encode(token.encode()).decode())
print("files", sorted(os.listdir(".")))
print("names", sorted(name for name in os.environ if "TOKEN" in name or "GIT" in name))
"""


def test_the_command_never_gets_the_git_token(fleet: Fleet, tmp_path: pathlib.Path) -> None:
    repo = make_repo(tmp_path / "project", {"README": "x\n"})
    (tmp_path / "git.token").write_text(TOKEN + "\n")
    fleet.start_plane()
    fleet.plane.cli("project", "add", "p", "--repo", str(repo), "--git-token-file", str(tmp_path / "git.token"))
    fleet.agent("worker")
    with fleet.plane.client() as client:
        change = client.submit_change("p", "show", [task("show", [sys.executable, "-c", SHOW])])
        list(client.watch(change.id))
        run = client.get_run(client.get_change(change.id).tasks[0].latest_run_id)
        out = "".join(line.text for line in client.run_logs(run.id) if line.stream == "stdout")
    assert run.state == "succeeded", run
    assert TOKEN[::-1] not in out and base64.b64encode(TOKEN.encode()).decode() not in out, out
    assert "DROVER_GIT_TOKEN" not in out
    assert "reversed \n" in out
    assert "'README'" in out  # agentd cloned the workspace with the token all the same
