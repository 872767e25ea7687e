"""Round two, finding 7 (in part): a Task could create user namespaces. bubblewrap ran the command
with no seccomp filter, so `unshare -U -r` made it "root" of a namespace of its own, with every
capability there: mounts of its own, and the kernel's namespaced code (netfilter, filesystems) open
to an unprivileged user, the way most recent local privilege escalations began.

Each test is the attempt through a real control plane and agentd (root, so runs execute as `nobody` in
bubblewrap). Before, both commands succeeded (`unshare -U -r` printed uid 0 and mounted a tmpfs).
Now bubblewrap applies agentd/run/seccomp.py's filter: unshare and clone with a namespace flag answer
EPERM, and the command's build work (threads, fork, git) runs as before. An agent configured with
`seccomp = false` shows the filter is what stops it, and says so when it starts.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import Fleet, python_command, task

pytestmark = pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")

ROOT_IN_A_NAMESPACE = ["unshare", "-U", "-r", "-m", "sh", "-c", "mount -t tmpfs none /tmp && id -u && echo mounted"]
"""The attack: a user namespace in which the command is uid 0 with CAP_SYS_ADMIN, and a mount made in it."""

BY_SYSCALL = """
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.unshare(0x10000000) == 0:  # CLONE_NEWUSER (os.unshare is Python 3.12's)
    print("created a user namespace")
    sys.exit(0)
print(errno.errorcode[ctypes.get_errno()])
sys.exit(3)
"""

BUILD_WORK = """
import concurrent.futures, os, subprocess
with concurrent.futures.ThreadPoolExecutor(4) as pool:
    assert list(pool.map(abs, [-1, -2])) == [1, 2]
pid = os.fork()
if pid == 0:
    os._exit(0)
assert os.waitpid(pid, 0)[1] == 0
git = ["git", "-c", "user.name=t", "-c", "user.email=t@drover.invalid", "-C", "built"]
subprocess.run(["git", "init", "-q", "built"], check=True)
open("built/a.txt", "w").write("ok\\n")
subprocess.run(git + ["add", "a.txt"], check=True)
subprocess.run(git + ["commit", "-qm", "built"], check=True)
print(subprocess.run(git + ["log", "--format=%s"], capture_output=True, text=True, check=True).stdout, end="")
"""


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """A control plane and an agent as agentd starts by default, in pool `filtered`."""
    f = Fleet(tmp_path_factory.mktemp("r27"))
    f.start_plane()
    f.plane.add_project("filtered", pool="filtered")
    f.agent("filtered", labels=("pool=filtered",))
    yield f
    f.stop()


def run_task(fleet: Fleet, project: str, command: list[str]) -> dict[str, Any]:
    """Run `command` as a command Task of `project` to its end: the run's state, reason, exit code and
    output by stream."""
    with fleet.plane.client() as client:
        change = client.submit_change(project, f"attempt {uuid.uuid4().hex[:8]}", [task("attempt", command)])
        list(client.watch(change.id))
        run_id = client.get_change(change.id).tasks[0].latest_run_id
        run = client.get_run(run_id)
        streams: dict[str, str] = {}
        for line in client.run_logs(run_id):
            streams[line.stream] = streams.get(line.stream, "") + line.text
    return {"state": run.state, "reason": run.reason, "exit_code": run.exit_code, **streams}


def test_unshare_of_a_user_namespace_is_refused(fleet: Fleet) -> None:
    """Before: the run succeeded, printing 0 (root in its namespace) and `mounted`."""
    result = run_task(fleet, "filtered", ROOT_IN_A_NAMESPACE)
    assert (result["state"], result["reason"], result["exit_code"]) == ("failed", "exit_code", 1), result
    assert "Operation not permitted" in result.get("stderr", "")
    assert "mounted" not in result.get("stdout", "")


def test_the_unshare_call_answers_eperm(fleet: Fleet) -> None:
    """Before: the run succeeded, printing `created a user namespace`."""
    result = run_task(fleet, "filtered", python_command(BY_SYSCALL))
    assert (result["state"], result["exit_code"], result.get("stdout")) == ("failed", 3, "EPERM\n"), result


def test_build_work_runs_under_the_filter(fleet: Fleet) -> None:
    result = run_task(fleet, "filtered", python_command(BUILD_WORK))
    assert (result["state"], result.get("stdout")) == ("succeeded", "built\n"), result


def test_an_agent_configured_without_the_filter_warns_and_allows_them(fleet: Fleet) -> None:
    """What the filter stops (on a kernel letting unprivileged users create user namespaces)."""
    config = fleet.tmp / "unfiltered.toml"
    config.write_text("seccomp = false\n")
    fleet.plane.add_project("unfiltered", pool="unfiltered")
    unfiltered = fleet.agent("unfiltered", labels=("pool=unfiltered",), extra=("--config", str(config)))
    assert "WITHOUT the seccomp filter" in unfiltered.log()
    result = run_task(fleet, "unfiltered", python_command(BY_SYSCALL))
    if result["state"] != "succeeded":
        pytest.skip(f"this kernel refuses unprivileged user namespaces anyway: {result}")
    assert result.get("stdout") == "created a user namespace\n"
    assert run_task(fleet, "unfiltered", ROOT_IN_A_NAMESPACE)["stdout"] == "0\nmounted\n"
