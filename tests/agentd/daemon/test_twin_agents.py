"""Two agentds of one name on one host (two checkouts, two test runs at once), each with its own spool
and control plane: neither may touch the other's runs. Before, both used the cgroups
drover/<name>/slot-<i> and the uids 2,000,000,000 + i, so the second one readying its slot 0 killed the
first one's run (it ended 137)."""

from __future__ import annotations

import os
import pathlib
import uuid
from collections.abc import Iterator

import pytest

from agentd.daemon import cgroups
from agentd.daemon.config import AgentConfig
from tests.conftest import Fleet, host_processes, python_command, task, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]  # two control planes and two agentds

NAME = f"twin-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def twins(tmp_path: pathlib.Path) -> Iterator[list[Fleet]]:
    """Two control planes, each with an agentd named NAME (spools <tmp>/one/agent-NAME/spool and .../two/...)."""
    fleets = [Fleet(tmp_path / "one"), Fleet(tmp_path / "two")]
    try:
        for f in fleets:
            f.start_plane()
            f.plane.add_project("twins")
            f.agent(NAME)
        yield fleets
    finally:
        for f in fleets:
            f.stop()


def test_two_agentds_of_one_name_on_one_host_each_run_a_task_to_success(twins: list[Fleet]) -> None:
    changes = []
    for f in twins:
        marker = f"twin-run-{uuid.uuid4().hex}"
        code = f"import os, time; print(os.getuid(), flush=True); time.sleep(4)  # {marker}"
        with f.plane.client() as client:
            changes.append(client.submit_change("twins", "twin", [task("run", python_command(code))]).id)
        # The first run is live when the second agentd readies its slot: the moment that killed it before.
        wait_for(lambda m=marker: host_processes(m), 60, what="the run's command to start")
    results = []
    for f, change_id in zip(twins, changes, strict=True):
        with f.plane.client() as client:
            list(client.watch(change_id))
            run = client.get_run(client.get_change(change_id).tasks[0].latest_run_id)
            stdout = "".join(line.text for line in client.run_logs(run.id) if line.stream == "stdout")
        results.append((run.state, run.exit_code, stdout.strip()))
    assert [(state, code) for state, code, _ in results] == [("succeeded", 0)] * 2, results
    if os.geteuid() == 0:  # each run slot a uid of its own, and the twins' uids apart
        uids = {int(out) for _, _, out in results}
        assert len(uids) == 2, results


def test_an_agentd_keeps_its_cgroups_and_uids_across_a_restart_and_not_across_spools(tmp_path: pathlib.Path) -> None:
    """What tells twins apart is a hash of the spool: the same spool (a restart) finds its own slot groups
    and uids again, to clean what a previous run left; another spool gets others."""
    one = AgentConfig(name="a b", spool_dir=tmp_path / "one")
    again = AgentConfig(name="a b", spool_dir=tmp_path / "one" / ".." / "one", capacity=3)
    two = AgentConfig(name="a b", spool_dir=tmp_path / "two")
    assert one.instance == again.instance != two.instance and len(one.instance) == 8
    assert cgroups.group_name(one.name, one.instance) == f"a_b-{one.instance}"
    assert one.uid_base == again.uid_base != two.uid_base
    assert (
        one.uid_base >= 2_000_000_000 and (one.uid_base - 2_000_000_000) % 4096 == 0 and one.uid_base + 4095 < 2**32 - 1
    )
    assert AgentConfig(spool_dir=tmp_path / "one", run_uid_base=3_000_000_000).uid_base == 3_000_000_000
