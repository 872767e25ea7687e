"""Issue 8, finding 7a: a full spool disk. agentd stays up, fails the run whose output can no longer
be stored as disk_full (within seconds, not as agent_lost minutes later), refuses new runs while the
spool is full, and starts again on the same spool, full, damaged or freed. Real small filesystems
(tmpfs), real processes."""

from __future__ import annotations

import errno
import os
import pathlib
import subprocess
import time
from collections.abc import Callable

import pytest

from agentd.daemon.assignment import decode
from agentd.daemon.config import AgentConfig
from agentd.daemon.outbox import Outbox
from agentd.daemon.runs import Runs
from agentd.errors import RunRefused
from drover.v1 import agent_pb2
from tests.conftest import Fleet, holds, python_command, task, wait_for

FLOOR = 256 * 1024  # min_free_spool_bytes of the agent on the 2 MiB spool
ENDED = ("succeeded", "failed", "cancelled")
# About 6 MB a second for a minute: far more than the spool holds, and it never ends by itself.
FLOOD = python_command(
    "import sys, time\n"
    "line = 'x' * 999 + '\\n'\n"
    "end = time.time() + 60\n"
    "while time.time() < end:\n"
    "    sys.stdout.write(line * 64)\n"
    "    sys.stdout.flush()\n"
    "    time.sleep(0.01)\n"
)
LINES = 10_000
NUMBERED = python_command(
    "import time\n"
    f"for i in range({LINES}):\n"
    "    print(f'line {i:05d}', flush=True)\n"
    "    if i % 50 == 0: time.sleep(0.02)\n"
)


def free_bytes(path: pathlib.Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill(path: pathlib.Path, leave: int = 0) -> None:
    """Grow the file `path` until its filesystem has at most `leave` bytes free."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        while (free := free_bytes(path)) > leave:
            os.write(fd, b"\0" * min(free - leave, 1 << 16))
    except OSError as err:
        assert err.errno == errno.ENOSPC
    finally:
        os.close(fd)


def supervisor_alive(run_dir: pathlib.Path) -> bool:
    return subprocess.run(["pgrep", "-f", f"supervisor {run_dir}"], capture_output=True).returncode == 0


def _ended(client, run_id: str):  # type: ignore[no-untyped-def]
    run = client.get_run(run_id)
    return run if run.state in ENDED else None


def _running(client, change_id: str, count: int) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """Task key -> run id of the running runs of a Change, once there are `count` of them."""
    running = {
        t.key: t.latest_run_id
        for t in client.get_change(change_id).tasks
        if t.latest_run_id and client.get_run(t.latest_run_id).state == "running"
    }
    return running if len(running) == count else {}


def test_a_full_spool_fails_the_run_as_disk_full_refuses_new_runs_and_survives_a_restart(
    fleet: Fleet, small_disk: Callable[[pathlib.Path, str], pathlib.Path], tmp_path: pathlib.Path
) -> None:
    plane = fleet.start_plane()
    plane.add_project("full")
    spool = small_disk(tmp_path / "agent-tiny" / "spool", "2M")  # where fleet.agent("tiny") keeps its spool
    config = tmp_path / "tiny.toml"
    config.write_text(f"min_free_spool_bytes = {FLOOR}\n")
    agent = fleet.agent("tiny", extra=("--config", str(config)))
    assert agent.spool == spool
    with plane.client() as client:
        change = client.submit_change("full", "fill the spool", [task("flood", FLOOD)])
        asked = time.monotonic()
        run_id = wait_for(lambda: client.get_change(change.id).tasks[0].latest_run_id, 30, what="the run")
        run = wait_for(lambda: _ended(client, run_id), 60, what="the run to end")
        took = time.monotonic() - asked
        assert (run.state, run.reason) == ("failed", "disk_full"), agent.log()
        assert took < 30, f"the run took {took:.0f} s to fail"
        assert agent.proc is not None and agent.proc.poll() is None, "agentd died:\n" + agent.log()
        run_dir = spool / "runs" / run_id
        wait_for(lambda: not supervisor_alive(run_dir), 20, what="the run's supervisor to stop")
        wait_for(lambda: not run_dir.exists(), 20, what="the delivered run's directory to be removed")

        # Something else fills the spool: a new run is refused as disk_full and runs on another agent.
        fill(spool / "filler", leave=FLOOR // 2)
        second = client.submit_change("full", "while full", [task("second", ["true"])])
        wait_for(
            lambda: [
                e
                for e in client.list_events(change_id=second.id, kind="run.requeued")
                if e.data["reason"] == "disk_full" and e.data["previous_agent"] == "tiny"
            ],
            30,
            what="agentd to refuse the run as disk_full",
        )
        roomy = fleet.agent("roomy")
        list(client.watch(second.id))
        elsewhere = client.get_run(client.get_change(second.id).tasks[0].latest_run_id)
        assert (elsewhere.state, elsewhere.agent) == ("succeeded", "roomy")
        assert agent.proc.poll() is None, "agentd died:\n" + agent.log()
        roomy.stop()

        # A restart on the still-full spool connects; once there is room again, Tasks run on it.
        agent.stop()
        agent.start()
        wait_for(
            lambda: len([e for e in client.list_events(kind="agent.connected") if e.agent == "tiny"]) == 2,
            30,
            what="agentd to connect again",
        )
        holds(lambda: agent.proc.poll() is None, 1, what="agentd on the full spool")
        assert agent.proc.poll() is None, "agentd died on the full spool:\n" + agent.log()
        (spool / "filler").unlink()
        third = client.submit_change("full", "room again", [task("third", python_command("print('ok')"))])
        list(client.watch(third.id))
        again = client.get_run(client.get_change(third.id).tasks[0].latest_run_id)
    assert (again.state, again.agent) == ("succeeded", "tiny"), agent.log()


def test_a_new_run_the_spool_has_no_room_for_is_refused_and_leaves_nothing_behind(
    small_disk: Callable[[pathlib.Path, str], pathlib.Path], tmp_path: pathlib.Path
) -> None:
    spool = small_disk(tmp_path / "spool", "64k")
    assignment = decode(
        agent_pb2.RunAssignment(run_id="r-full", driver="command", command=agent_pb2.CommandSpec(argv=["true"]))
    )
    runs = Runs(AgentConfig(spool_dir=spool, work_dir=tmp_path / "work", min_free_spool_bytes=0), Outbox())
    runs.recover()
    fill(spool / "filler")
    with pytest.raises(RunRefused) as refused:
        runs.start(assignment)  # the floor is 0: the write itself fails
    assert refused.value.reason == "disk_full"
    assert list((spool / "runs").iterdir()) == [] and runs.slots == {}

    (spool / "filler").unlink()
    fill(spool / "filler", leave=32 * 1024)
    guarded = Runs(AgentConfig(spool_dir=spool, work_dir=tmp_path / "work", min_free_spool_bytes=48 * 1024), Outbox())
    with pytest.raises(RunRefused) as refused:
        guarded.start(assignment)  # below the floor: refused before anything is written
    assert refused.value.reason == "disk_full"
    assert list((spool / "runs").iterdir()) == []


def test_a_restart_on_a_damaged_spool_goes_on_and_reports_the_run_it_cannot_read(fleet: Fleet) -> None:
    fleet.start_plane()
    fleet.plane.add_project("damaged")
    agent = fleet.agent("mender", capacity=2)
    with fleet.plane.client() as client:
        change = client.submit_change(
            "damaged",
            "damage",
            [task("count", NUMBERED), task("sleep", python_command("import time; time.sleep(120)"))],
        )
        ids = wait_for(lambda: _running(client, change.id, 2), 30, what="both runs to start")
        wait_for(lambda: client.get_run(ids["count"]).output_bytes > 20_000, 30, what="some output")
        agent.kill9()  # the runs go on under their supervisors
        counting, sleeping = agent.spool / "runs" / ids["count"], agent.spool / "runs" / ids["sleep"]
        with open(counting / "outbox.jsonl", "ab") as f:
            f.write(b'{"seq": 1, "kind": "lo\n{"seq": ')  # a damaged line, then a torn one
        (counting / "acked").write_text("not a number")
        (sleeping / "outbox.jsonl").unlink()
        (sleeping / "outbox.jsonl").mkdir()  # unreadable
        agent.start()
        list(client.watch(change.id))
        count, sleep = client.get_run(ids["count"]), client.get_run(ids["sleep"])
        stdout = "".join(ln.text for ln in client.run_logs(ids["count"]) if ln.stream == "stdout")
    assert agent.proc is not None and agent.proc.poll() is None, "agentd died:\n" + agent.log()
    assert count.state == "succeeded", agent.log()
    assert stdout == "".join(f"line {i:05d}\n" for i in range(LINES)), "every line once"
    assert (sleep.state, sleep.reason) == ("failed", "spool_unreadable"), agent.log()
    wait_for(lambda: not supervisor_alive(sleeping), 20, what="the unreadable run's supervisor to stop")
