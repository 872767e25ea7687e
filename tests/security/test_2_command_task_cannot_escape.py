"""Finding 2: command Tasks ran outside any sandbox, as agentd's user (root). A Task's command could
read the control plane's and agent's tokens (through /proc/$PPID/cwd or at their paths), write
anywhere, reach PostgreSQL and the control plane on 127.0.0.1, read other runs' assignments and
workspaces, leave a setsid or double-forked process running after its run, and signal agentd.

Each test below is one escape attempt, made by a real command Task through a real control plane and
agentd (running as root, so runs execute as their run slot's uid in bubblewrap). Every one of them succeeded
before: the command was started by `subprocess.Popen(argv, cwd=repo)` as root, with the host's
filesystem, network and PID space, and only its process group was signalled at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from agentd.daemon.config import AgentConfig
from tests.conftest import Fleet, host_processes, python_command, task, wait_for

ATTEMPTS = [
    ("test_agent_and_admin_tokens_through_proc_of_the_supervisor", "read tokens via /proc/$PPID/cwd, /proc/*/root"),
    ("test_tokens_at_their_paths_in_the_control_planes_data_dir", "read agent.token and admin.token at their paths"),
    ("test_the_agents_spool", "read the agent's spool: outbox, run directories, supervisor logs"),
    ("test_a_write_outside_the_workspace", "write to the spool, the data dir, the work dir and /tmp"),
    ("test_a_connection_to_postgresql_on_loopback", "connect to 127.0.0.1:5432"),
    ("test_a_connection_to_the_control_plane", "connect to the control plane's port on 127.0.0.1"),
    ("test_another_concurrent_runs_assignment_and_workspace", "read another running run's files"),
    ("test_a_setsid_process_outliving_the_run", "leave a setsid process behind"),
    ("test_a_double_forked_daemon_outliving_the_run", "leave a double-forked daemon behind"),
    ("test_running_as_root", "run as root"),
    ("test_etc_shadow", "read /etc/shadow"),
    ("test_agentd_processes_command_lines_and_environment", "read agentd's /proc entries"),
    ("test_a_signal_to_agentd", "signal agentd"),
]
"""Every escape attempt of finding 2 (test name, what it tries). All succeeded before; none does now."""


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """One control plane and one agent (capacity 2, for the concurrent-run attempt) for every attempt."""
    f = Fleet(tmp_path_factory.mktemp("escape"))
    f.start_plane()
    f.plane.add_project("escape")
    f.agent("target", capacity=2)
    yield f
    f.stop()


def _submit(fleet: Fleet, code: str, **extra: Any) -> str:
    with fleet.plane.client() as client:
        change = client.submit_change(
            "escape", f"attempt {uuid.uuid4().hex[:8]}", [task("attempt", python_command(code), **extra)]
        )
        return change.id


def _finish(fleet: Fleet, change_id: str) -> dict[str, Any]:
    """Watch the Change to its end: the run's state and its output by stream."""
    with fleet.plane.client() as client:
        list(client.watch(change_id))
        run_id = client.get_change(change_id).tasks[0].latest_run_id
        run = client.get_run(run_id)
        streams: dict[str, str] = {}
        for line in client.run_logs(run_id):
            streams[line.stream] = streams.get(line.stream, "") + line.text
    return {"run_id": run_id, "state": run.state, "reason": run.reason, **streams}


def attempt(fleet: Fleet, code: str, **extra: Any) -> dict[str, Any]:
    """Run `code` as a command Task; it prints one JSON object, answered as "found"."""
    result = _finish(fleet, _submit(fleet, code, **extra))
    assert result["state"] == "succeeded", result
    result["found"] = json.loads(result["stdout"])
    return result


def _token_texts(fleet: Fleet) -> list[str]:
    tokens = fleet.plane.data_dir / "tokens"
    return [(tokens / name).read_text().strip() for name in ("agent.token", "admin.token")]


READ_ALL = """
import json, os, sys
def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read(4096)
    except OSError as err:
        return None
"""


def _kill_leftovers(marker: str) -> None:
    for pid in host_processes(marker):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


# --- the tokens -------------------------------------------------------------------------------------


def test_agent_and_admin_tokens_through_proc_of_the_supervisor(fleet: Fleet) -> None:
    """Before: `cat /proc/$PPID/cwd/<agentd's relative token path>` printed the agent token (the
    supervisor shares agentd's cwd), and /proc/1/root/<path> any file of the host."""
    tokens = [fleet.plane.agent_token_file, fleet.plane.data_dir / "tokens" / "admin.token"]
    from_cwd = [os.path.relpath(t, os.getcwd()) for t in tokens]  # agentd started in this directory
    from_root = [str(t).lstrip("/") for t in tokens]
    result = attempt(
        fleet,
        READ_ALL
        + f"""
found = {{}}
pids = sorted({{"self", str(os.getppid()), "1", *[p for p in os.listdir("/proc") if p.isdigit()]}})
for pid in pids:
    for base, paths in (("cwd", {from_cwd!r}), ("root", {from_root!r})):
        for path in paths + [".drover/tokens/agent.token", ".drover/tokens/admin.token"]:
            text = read(f"/proc/{{pid}}/{{base}}/{{path}}")
            if text:
                found[f"/proc/{{pid}}/{{base}}/{{path}}"] = text
print(json.dumps(found))
""",
    )
    assert result["found"] == {}
    for token in _token_texts(fleet):
        assert token not in result["stdout"]


def test_tokens_at_their_paths_in_the_control_planes_data_dir(fleet: Fleet) -> None:
    """Before: a plain open() of the control plane's admin token."""
    data_dir = fleet.plane.data_dir
    result = attempt(
        fleet,
        READ_ALL
        + f"""
paths = [{str(data_dir / "tokens" / "agent.token")!r}, {str(data_dir / "tokens" / "admin.token")!r}]
found = {{p: read(p) for p in paths if read(p)}}
try:
    found["listing"] = os.listdir({str(data_dir)!r})
except OSError:
    pass
print(json.dumps(found))
""",
    )
    assert result["found"] == {}
    assert not any(token in result["stdout"] for token in _token_texts(fleet))


def test_the_agents_spool(fleet: Fleet) -> None:
    """Before: the spool (outbox, every run's assignment.json, output and supervisor log) was readable."""
    spool = fleet.agents[0].spool
    result = attempt(
        fleet,
        READ_ALL
        + f"""
found = {{}}
for parent, dirs, files in os.walk({str(spool)!r}):
    for name in files:
        text = read(os.path.join(parent, name))
        if text is not None:
            found[os.path.join(parent, name)] = text[:200]
print(json.dumps(found))
""",
    )
    assert result["found"] == {}


# --- writing, the network ---------------------------------------------------------------------------


def test_a_write_outside_the_workspace(fleet: Fleet) -> None:
    """Before: the command, root, wrote wherever it liked."""
    name = f"escaped-{uuid.uuid4().hex}"
    agent = fleet.agents[0]
    targets = [
        agent.spool / name,
        fleet.plane.data_dir / name,
        agent.work_dir / name,
        fleet.tmp / name,
        pathlib.Path("/tmp") / name,
    ]
    try:
        result = attempt(
            fleet,
            f"""
import json
wrote = []
for path in {[str(t) for t in targets]!r}:
    try:
        with open(path, "w") as f:
            f.write("escaped")
        wrote.append(path)
    except OSError:
        pass
print(json.dumps(wrote))
""",
        )
        # Writing to the sandbox's own /tmp succeeds, and is gone with it: the host sees none of it.
        assert [t for t in targets if t.exists()] == []
        assert set(result["found"]) <= {str(pathlib.Path("/tmp") / name)}
    finally:
        for target in targets:
            target.unlink(missing_ok=True)


CONNECT = """
import json, socket
try:
    socket.create_connection(("127.0.0.1", {port}), 3).close()
    print(json.dumps("connected"))
except OSError as err:
    print(json.dumps(type(err).__name__))
"""


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), 1).close()
    except OSError:
        return False
    return True


def test_a_connection_to_postgresql_on_loopback(fleet: Fleet) -> None:
    """Before: the command shared the host's network, PostgreSQL on 127.0.0.1:5432 included."""
    result = attempt(fleet, CONNECT.format(port=5432))
    assert result["found"] == "ConnectionRefusedError"  # its own loopback, nothing listening
    if not _listening(5432):
        pytest.skip("nothing listens on 127.0.0.1:5432 here: the attempt could not have succeeded anyway")


def test_a_connection_to_the_control_plane(fleet: Fleet) -> None:
    assert _listening(fleet.plane.port)
    result = attempt(fleet, CONNECT.format(port=fleet.plane.port))
    assert result["found"] == "ConnectionRefusedError"


# --- other runs ---------------------------------------------------------------------------------------


def test_another_concurrent_runs_assignment_and_workspace(fleet: Fleet) -> None:
    """Before: a run could list the spool's run directories and the work dir, and read another run's
    assignment.json and workspace while it ran."""
    secret = f"secret-of-the-other-run-{uuid.uuid4().hex}"
    other = _submit(
        fleet,
        f"""
import pathlib, time
pathlib.Path("mine.txt").write_text({secret!r})
print("ready", flush=True)
time.sleep(120)
""",
    )
    agent = fleet.agents[0]
    with fleet.plane.client() as client:

        def other_ready() -> str:
            run_id = client.get_change(other).tasks[0].latest_run_id
            return (
                run_id
                if run_id and "ready" in "".join(ln.text for ln in client.run_logs(run_id) if ln.stream == "stdout")
                else ""
            )

        other_run = wait_for(other_ready, 30, what="the other run to write its file")
    assert (agent.work_dir / other_run / "repo" / "mine.txt").read_text() == secret  # there to be found
    try:
        result = attempt(
            fleet,
            READ_ALL
            + f"""
found = {{}}
for top in ({str(agent.spool)!r}, {str(agent.work_dir)!r}):
    for parent, dirs, files in os.walk(top):
        for name in files:
            text = read(os.path.join(parent, name))
            if text is not None:
                found[os.path.join(parent, name)] = text[:200]
print(json.dumps(found))
""",
        )
    finally:
        with fleet.plane.client() as client:
            client.cancel_change(other)
    assert secret not in result["stdout"] and other_run not in result["stdout"]
    assert all(path.startswith(str(agent.work_dir / result["run_id"])) for path in result["found"])


# --- processes ------------------------------------------------------------------------------------------


def test_a_setsid_process_outliving_the_run(fleet: Fleet) -> None:
    """Before: only the command's process group was signalled; `setsid` left it."""
    marker = f"{time.time() % 1000 + 4000:.6f}"
    try:
        result = attempt(
            fleet,
            f"""
import json, subprocess
subprocess.Popen(["setsid", "sleep", "{marker}"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                 stderr=subprocess.DEVNULL, start_new_session=True)
print(json.dumps("left a sleeper"))
""",
        )
        assert result["found"] == "left a sleeper"
        wait_for(lambda: not host_processes(marker), 10, what="the sleeper to be gone with its run")
    finally:
        _kill_leftovers(marker)


def test_a_double_forked_daemon_outliving_the_run(fleet: Fleet) -> None:
    """Before: a classic daemon (fork, setsid, fork, close everything) outlived its run."""
    marker = f"{time.time() % 1000 + 5000:.6f}"
    try:
        result = attempt(
            fleet,
            f"""
import json, os, sys
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.execvp("sleep", ["sleep", "{marker}"])
    os._exit(0)
os.wait()
print(json.dumps("daemonized"))
""",
        )
        assert result["found"] == "daemonized"
        wait_for(lambda: not host_processes(marker), 10, what="the daemon to be gone with its run")
    finally:
        _kill_leftovers(marker)


def test_running_as_root(fleet: Fleet) -> None:
    """Before: the command ran as agentd's user, root here."""
    result = attempt(fleet, "import json, os\nprint(json.dumps([os.getuid(), os.geteuid(), os.getgroups()]))")
    uid, euid, groups = result["found"]
    assert uid != 0 and euid != 0 and 0 not in groups
    if os.geteuid() == 0:  # its run slot's own uid (issue 24), no user's
        base = AgentConfig(spool_dir=fleet.agents[0].spool).uid_base  # its agentd's block (from 2,000,000,000)
        assert uid == euid and base <= uid < base + 2 and base >= 2_000_000_000 and groups == [uid]


def test_etc_shadow(fleet: Fleet) -> None:
    result = attempt(
        fleet,
        READ_ALL
        + """
print(json.dumps({p: read(p) for p in ("/etc/shadow", "/etc/gshadow", "/etc/sudoers") if read(p)}))
""",
    )
    assert result["found"] == {}


def test_agentd_processes_command_lines_and_environment(fleet: Fleet) -> None:
    """Before: /proc showed every process of the host; as root their environments too."""
    result = attempt(
        fleet,
        READ_ALL
        + """
found = {}
for pid in (p for p in os.listdir("/proc") if p.isdigit()):
    found[pid] = [read(f"/proc/{pid}/cmdline"), read(f"/proc/{pid}/environ")]
print(json.dumps(found))
""",
    )
    seen = json.dumps(result["found"])
    for daemon in (
        "agentd.cli",
        "agentd.run.supervisor",
        "agentd.daemon.prefork",
        "controlplane.cli",
        str(fleet.plane.data_dir),
        str(fleet.agents[0].spool),
        *_token_texts(fleet),
    ):
        assert daemon not in seen, daemon
    assert len(result["found"]) <= 3  # the namespace's init (bwrap), the command and nothing else
    init_environment = result["found"]["1"][1]
    assert init_environment is None  # root's: the command's user may not read it


def test_a_signal_to_agentd(fleet: Fleet) -> None:
    """Before: the command (root) could stop or kill agentd; signal 0 only asks whether it may."""
    agentd = fleet.agents[0].proc
    assert agentd is not None
    result = attempt(
        fleet,
        f"""
import json, os
try:
    os.kill({agentd.pid}, 0)
    print(json.dumps("may signal agentd"))
except OSError as err:
    print(json.dumps(type(err).__name__))
""",
    )
    assert result["found"] in ("ProcessLookupError", "PermissionError")
    assert agentd.poll() is None


def test_the_network_when_the_project_allows_it(fleet: Fleet) -> None:
    """The one way out, on purpose: `controlplane project add --network`."""
    fleet.plane.cli("project", "add", "online", "--repo", "", "--network")
    server = socket.create_server(("127.0.0.1", 0))
    try:
        with fleet.plane.client() as client:
            change = client.submit_change(
                "online", "reach out", [task("attempt", python_command(CONNECT.format(port=server.getsockname()[1])))]
            )
        result = _finish(fleet, change.id)
    finally:
        server.close()
    assert result["state"] == "succeeded" and json.loads(result["stdout"]) == "connected", result


def test_every_attempt_is_a_test() -> None:
    others = {"test_every_attempt_is_a_test", "test_the_network_when_the_project_allows_it"}
    names = {name for name in globals() if name.startswith("test_")} - others
    assert {name for name, _ in ATTEMPTS} == names
