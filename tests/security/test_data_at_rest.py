"""Data at rest: the control plane's database, tokens and object store, and agentd's spool, belong to
their process's user alone; the deployment never hands the control plane's tokens to agent containers."""

from __future__ import annotations

import pathlib
import stat

import yaml

from tests.conftest import Fleet, python_command, task, wait_for

ROOT = pathlib.Path(__file__).resolve().parents[2]


def mode(path: pathlib.Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_database_tokens_objects_and_spool_are_private(fleet: Fleet, git_repo: pathlib.Path) -> None:
    plane = fleet.start_plane()
    plane.add_project("web", str(git_repo))
    agent = fleet.agent("keeper")
    with plane.client() as client:
        change = client.submit_change("web", "leave traces", [task("t", python_command("print('x' * 100)"))])
        wait_for(lambda: client.get_change(change.id).status == "succeeded", 60, what="the Change to succeed")
    data = plane.data_dir
    assert mode(data) == 0o700
    for name in ("drover.db", "drover.db-wal", "drover.db-shm"):
        if (data / name).exists():
            assert mode(data / name) == 0o600, name
    assert mode(data / "tokens") == 0o700
    assert {p.name: mode(p) for p in (data / "tokens").iterdir()} == {"admin.token": 0o600, "agent.token": 0o600}
    assert mode(data / "objects") == 0o700
    for path in (data / "objects").rglob("*"):
        if path.is_file():
            assert mode(path) == 0o600, path
    assert mode(agent.spool) == 0o700
    assert mode(agent.spool / "runs") == 0o700


def test_agent_containers_never_mount_the_control_planes_data() -> None:
    compose = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())
    plane_volumes = {v.split(":")[0] for v in compose["services"]["controlplane"]["volumes"]}
    agents = [spec for name, spec in compose["services"].items() if name.startswith("agent-") and name != "agent-token"]
    assert len(agents) >= 2
    for agent in agents:
        agent_volumes = {v.split(":")[0] for v in agent.get("volumes", [])}
        assert not plane_volumes & agent_volumes, "agents mount the control plane's data directory"
        token_flag = agent["command"][agent["command"].index("--token-file") + 1]
        assert "/var/lib/drover" not in token_flag
