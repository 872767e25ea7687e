"""A refusal that waiting does not heal stops agentd with exit code 4 and one line saying why (issue 25:
a bad token was logged as `control plane ... unreachable (UNAUTHENTICATED ...)` and retried forever);
`--retry-auth` keeps it dialling. And agentd keeps its state in a fixed place, never the directory it
was started from."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import time
import uuid

import grpc
import pytest

from agentd.daemon.config import state_dir
from agentd.daemon.connection import heals_by_waiting
from tests.conftest import AgentD, Fleet, wait_for

pytestmark = pytest.mark.timeout(180)
Code = grpc.StatusCode


@pytest.mark.parametrize(
    ("code", "retry_auth", "heals"),
    [
        (Code.UNAVAILABLE, False, True),  # down, restarting, a network fault
        (Code.DEADLINE_EXCEEDED, False, True),
        (Code.ALREADY_EXISTS, False, True),  # our own stale session, dropped within agent_silence_seconds
        (Code.INTERNAL, False, True),
        (Code.UNAUTHENTICATED, False, False),  # a bad, revoked or expired token
        (Code.PERMISSION_DENIED, False, False),  # the name belongs to another agent token; another pool
        (Code.UNAUTHENTICATED, True, True),
        (Code.PERMISSION_DENIED, True, True),
    ],
)
def test_which_refusals_heal_by_waiting(code: grpc.StatusCode, retry_auth: bool, heals: bool) -> None:
    assert heals_by_waiting(code, retry_auth) is heals


@pytest.mark.parametrize(
    ("euid", "env", "expected"),
    [
        (0, {"XDG_STATE_HOME": "/x/state", "HOME": "/root"}, "/var/lib/drover-agentd"),
        (1000, {"XDG_STATE_HOME": "/x/state", "HOME": "/home/a"}, "/x/state/drover-agentd"),
        (1000, {"HOME": "/home/a"}, "/home/a/.local/state/drover-agentd"),
        (1000, {"XDG_STATE_HOME": "", "HOME": "/home/a"}, "/home/a/.local/state/drover-agentd"),
        (1000, {"XDG_STATE_HOME": "rel/state", "HOME": "/home/a"}, "/home/a/.local/state/drover-agentd"),
    ],
)
def test_the_state_directory_is_never_the_working_directory(euid: int, env: dict[str, str], expected: str) -> None:
    assert state_dir(euid, env) == pathlib.Path(expected)


def _exits(agent: AgentD, within: float) -> int:
    assert agent.proc is not None
    try:
        return agent.proc.wait(within)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"agentd still running after {within} s:\n{agent.log()}") from None


def test_a_wrong_token_stops_agentd_with_4_unless_retry_auth(fleet: Fleet, tmp_path: pathlib.Path) -> None:
    plane = fleet.start_plane()
    wrong = tmp_path / "wrong.token"
    secret = "drv_agent_" + uuid.uuid4().hex  # shaped like a token; it must not be printed
    wrong.write_text(secret + "\n")

    started = time.monotonic()
    refused = AgentD("refused", plane, tmp_path / "refused", token_file=wrong).start()
    assert _exits(refused, 20) == 4
    assert time.monotonic() - started < 20
    log = refused.log()
    said = [line for line in log.splitlines() if line.startswith("agentd: ")]
    assert len(said) == 1, log
    assert "UNAUTHENTICATED" in said[0] and str(wrong) in said[0] and "--retry-auth" in said[0], said
    assert secret not in log

    patient = AgentD("patient", plane, tmp_path / "patient", token_file=wrong, extra=("--retry-auth",)).start()
    fleet.agents.append(patient)
    wait_for(lambda: patient.log().count("UNAUTHENTICATED") >= 2, 20, what="two refused attempts")
    assert patient.proc is not None and patient.proc.poll() is None, patient.log()
    assert secret not in patient.log()
    wrong.write_text(plane.agent_token_file.read_text())  # the token fixed: it is read at every attempt
    fleet.wait_connected("patient")


def test_a_missing_token_file_stops_agentd_at_start(fleet: Fleet, tmp_path: pathlib.Path) -> None:
    plane = fleet.start_plane()
    missing = tmp_path / "nowhere" / "agent.token"
    agent = AgentD("tokenless", plane, tmp_path / "tokenless", token_file=missing).start()
    assert _exits(agent, 20) == 4
    assert f"agentd: cannot read the token file {missing}: No such file or directory" in agent.log()


def test_a_name_bound_to_another_token_stops_agentd(fleet: Fleet, tmp_path: pathlib.Path) -> None:
    plane = fleet.start_plane()
    first = fleet.agent("vm-7")  # the name is now bound to the default agent token
    first.stop()
    other = tmp_path / "other.token"
    plane.cli("token", "create", "--kind", "agent", "--name", "other", "--out", str(other))
    impostor = AgentD("vm-7", plane, tmp_path / "impostor", token_file=other).start()
    assert _exits(impostor, 20) == 4
    assert "PERMISSION_DENIED: hello.name: the agent name 'vm-7' belongs to another agent token" in impostor.log()


@pytest.mark.xdist_group("readme-defaults")  # may make and remove /var/lib/drover-agentd, the tour's spool's parent
def test_agentd_leaves_its_working_directory_alone(fleet: Fleet, tmp_path: pathlib.Path) -> None:
    """No --spool-dir: the spool goes to the documented state directory (as root /var/lib/drover-agentd),
    and nothing appears where agentd was started."""
    plane = fleet.start_plane()
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    name = f"stateless-{uuid.uuid4().hex[:8]}"
    env = dict(os.environ, HOME=str(tmp_path / "home"), XDG_STATE_HOME=str(tmp_path / "state"))
    root = state_dir(os.geteuid(), env)
    made = not root.exists()  # as root /var/lib/drover-agentd: removed again if this test made it
    expected = root / name
    command = [sys.executable, "-m", "agentd.cli", "--control-plane", plane.target, "--name", name]
    command += ["--token-file", str(plane.agent_token_file), "--work-dir", str(tmp_path / "work")]
    log = tmp_path / "agentd.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        fleet.wait_connected(name)
        assert (expected / "spool" / "runs").is_dir(), log.read_text()
        assert f"spool {expected / 'spool'}" in log.read_text()
        assert list(cwd.iterdir()) == []
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(root if made else expected, ignore_errors=True)
