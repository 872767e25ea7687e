"""Issue 24, findings 3 and 4: one run could starve every other run on its agent.

Before, every run executed as one session user (`nobody`) and its limits were per process: a command
Task forking until EAGAIN used up RLIMIT_NPROC of that user, so every other run of the agent failed to
fork (or even to start) until the bomb's timeout; RLIMIT_AS let one run hold 4 GiB in each of its
processes (6 GiB in six children); and a run could write until agentd's own disk was full.

Now each run slot runs as a uid of its own, in cgroups of its slot holding the whole run's memory and
processes, on a filesystem of its own. Each test below is a real command Task doing the harm, through a
real control plane and agentd (root, capacity 2), next to a concurrent run of another Change that must
be unharmed. The limits are set small through agentd's environment so the bombs are quick.
"""

from __future__ import annotations

import os
import pathlib
import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import Fleet, python_command, task, wait_for

MEMORY = 256 * 1024**2
PROCESSES = 64
DISK = 64 * 1024**2
SETTINGS = {
    "DROVER_AGENTD_RUN_MEMORY_BYTES": str(MEMORY),
    "DROVER_AGENTD_RUN_PROCESSES": str(PROCESSES),
    "DROVER_AGENTD_RUN_DISK_BYTES": str(DISK),
}

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="runs get a uid, cgroup and filesystem each as root")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """A control plane and one agent with two run slots, its run limits small."""
    f = Fleet(tmp_path_factory.mktemp("starve"))
    f.start_plane()
    f.plane.add_project("starve")
    saved = {name: os.environ.get(name) for name in SETTINGS}
    os.environ.update(SETTINGS)  # agentd reads DROVER_AGENTD_*; ignored by an agentd without them
    try:
        f.agent("shared", capacity=2)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    yield f
    f.stop()


def _submit(fleet: Fleet, code: str, **extra: Any) -> str:
    with fleet.plane.client() as client:
        change = client.submit_change(
            "starve", f"run {uuid.uuid4().hex[:8]}", [task("run", python_command(code), **extra)]
        )
        return change.id


def _run_id(fleet: Fleet, change_id: str) -> str:
    with fleet.plane.client() as client:
        return wait_for(lambda: client.get_change(change_id).tasks[0].latest_run_id, what="the run to be made")


def _output(fleet: Fleet, run_id: str) -> dict[str, str]:
    streams: dict[str, str] = {}
    with fleet.plane.client() as client:
        for line in client.run_logs(run_id):
            streams[line.stream] = streams.get(line.stream, "") + line.text
    return streams


def _finish(fleet: Fleet, change_id: str) -> dict[str, Any]:
    """Watch the Change to its end: the run's state and its output by stream."""
    with fleet.plane.client() as client:
        list(client.watch(change_id))
        run = client.get_run(client.get_change(change_id).tasks[0].latest_run_id)
    return {"state": run.state, "reason": run.reason, **_output(fleet, run.id)}


def _cancel(fleet: Fleet, change_id: str) -> None:
    with fleet.plane.client() as client:
        client.cancel_change(change_id)


FORK_BOMB = """
import os, time
children = 0
try:
    while children < 5000:
        if os.fork() == 0:
            time.sleep(300)
            os._exit(0)
        children += 1
except OSError as err:
    print(f"holding {children} children: fork failed: {err.strerror}", flush=True)
time.sleep(300)
"""

FORKS = """
import subprocess
for _ in range(20):
    subprocess.run(["true"], check=True)
print("forked 20 times")
"""


def test_a_fork_bomb_leaves_another_run_able_to_fork(fleet: Fleet) -> None:
    """Before: the bomb forked until RLIMIT_NPROC of the shared user (512), and the other Change's run,
    as that same user, could not fork: `BlockingIOError: [Errno 11] Resource temporarily unavailable`
    (or its launcher could not even exec)."""
    bomb = _submit(fleet, FORK_BOMB, timeout_seconds=300)
    bomb_run = _run_id(fleet, bomb)
    wait_for(
        lambda: "holding" in _output(fleet, bomb_run).get("stdout", ""),
        timeout=120,
        what="the fork bomb to hold every process it could make",
    )
    held = _output(fleet, bomb_run)["stdout"]
    try:
        other = _finish(fleet, _submit(fleet, FORKS))
        assert other["state"] == "succeeded", other
        assert "forked 20 times" in other["stdout"]
    finally:
        _cancel(fleet, bomb)
    bombed = _finish(fleet, bomb)
    assert int(re.search(r"holding (\d+)", held)[1]) < PROCESSES, held  # type: ignore[index]
    assert f"the run hit its process limit {PROCESSES}" in bombed.get("system", ""), bombed


MEMORY_BOMB = """
import os, time
CHILDREN, EACH = 6, 200 * 1024 * 1024
pipes, pids = [], []
for _ in range(CHILDREN):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        held = b"x" * EACH  # written, so every page is really there
        os.write(write, b"ok")
        time.sleep(60)
        os._exit(0)
    os.close(write)
    pipes.append(read)
    pids.append(pid)
said = [pid for pid, read in zip(pids, pipes) if os.read(read, 2) == b"ok"]
time.sleep(0.5)  # a child the kernel chose to kill is gone by now
# What is held at once: the children that have their 200 MiB and are still alive. A child that said
# "ok" and was killed later (the kernel kills the largest) held it only until then.
alive = sum(1 for pid in said if os.waitpid(pid, os.WNOHANG) == (0, 0))
print(f"held {alive * EACH // 2**20} MiB in {alive} children", flush=True)
for pid in pids:
    try:
        os.kill(pid, 9)
    except ProcessLookupError:
        pass
"""

MODEST = """
held = b"y" * (64 * 1024 * 1024)
print(f"held {len(held) // 2**20} MiB")
"""


def test_a_memory_bomb_is_held_to_the_runs_limit_and_the_other_run_is_unharmed(fleet: Fleet) -> None:
    """Before: six children of 200 MiB each held 1200 MiB (RLIMIT_AS is 4 GiB per process; the probe
    held 6 GiB); now the whole run is held to its cgroup's limit, and the kernel says so."""
    bomb = _submit(fleet, MEMORY_BOMB)
    other = _submit(fleet, MODEST)
    bombed, fine = _finish(fleet, bomb), _finish(fleet, other)
    assert fine["state"] == "succeeded" and "held 64 MiB" in fine["stdout"], fine
    held = re.search(r"held (\d+) MiB", bombed.get("stdout", ""))
    assert held is None or int(held[1]) * 2**20 <= MEMORY, bombed
    assert "the run hit its memory limit 256 MiB" in bombed.get("system", ""), bombed


DISK_FILL = """
import os
CHUNK, CAP = b"z" * 2**20, 512 * 2**20  # the cap keeps an unlimited agent's disk from filling
written, error = 0, "none"
for n in range(CAP // len(CHUNK)):
    fd = os.open(f"fill-{n // 256}.bin", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, CHUNK)
        written += len(CHUNK)
    except OSError as err:
        error = os.strerror(err.errno)
        break
    finally:
        os.close(fd)
print(f"wrote {written // 2**20} MiB: {error}", flush=True)
"""

WRITES = """
with open("mine.bin", "wb") as f:
    f.write(b"w" * (8 * 2**20))
print("wrote 8 MiB")
"""


def test_a_disk_fill_stays_in_the_runs_own_filesystem(fleet: Fleet) -> None:
    """Before: the run wrote its workspace in agentd's work dir (here 512 MiB, stopped only by the
    test's own cap; a real fill takes agentd's disk); now it fills a filesystem of its own."""
    work_dir = fleet.agents[0].work_dir
    before = os.statvfs(work_dir)
    bomb = _submit(fleet, DISK_FILL)
    other = _submit(fleet, WRITES)
    filled, fine = _finish(fleet, bomb), _finish(fleet, other)
    assert fine["state"] == "succeeded" and "wrote 8 MiB" in fine["stdout"], fine
    written = re.search(r"wrote (\d+) MiB: (.*)", filled.get("stdout", ""))
    assert written is not None, filled
    assert written[2] == "No space left on device" and int(written[1]) * 2**20 < DISK, filled
    # the filesystem goes with the run: nothing of it is left in the work dir
    wait_for(lambda: not list(pathlib.Path(work_dir).glob("*.disk")), timeout=30, what="the run disks to go")
    after = os.statvfs(work_dir)
    assert after.f_bavail * after.f_frsize > before.f_bavail * before.f_frsize - DISK


def test_each_run_slot_has_a_uid_of_its_own(fleet: Fleet) -> None:
    """Before: every run executed as `nobody`; now two concurrent runs execute as two uids."""
    code = "import os, time; print(os.getuid(), flush=True); time.sleep(3)"
    first, second = _submit(fleet, code), _submit(fleet, code)
    time.sleep(0.1)
    results = [_finish(fleet, first), _finish(fleet, second)]
    uids = {int(r["stdout"].strip()) for r in results}
    assert len(uids) == 2 and all(uid >= 2_000_000_000 for uid in uids), results
