"""Run supervisors forked from agentd's supervisor template: where they come from, what happens when the
template or agentd dies, and the fallback to a fresh interpreter."""

from __future__ import annotations

import os
import pathlib
import signal

from agentd.daemon.processes import start_time
from drover import Client
from tests.conftest import AgentD, Fleet, holds, host_processes, python_command, task, wait_for

# Holds the run until the test creates `release` in its workspace (all it sees of the host).
HOLD = python_command(
    "import os, sys, time\n"
    "print('holding', flush=True)\n"
    "while not os.path.exists('release'): time.sleep(0.02)\n"
    "print('released', flush=True)\n"
)


def _parent(pid: int) -> int:
    return int(pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _templates(agent: AgentD) -> list[int]:
    """The agent's supervisor templates: the supervisors forked from one have its command line too,
    but their parent is the template, not agentd."""
    assert agent.proc is not None
    marker = f"agentd.daemon.prefork\0supervisor\0{agent.spool}"
    return [pid for pid in host_processes(marker) if _parent(pid) == agent.proc.pid]


def _template(agent: AgentD) -> int:
    """The pid of the agent's supervisor template (one, once it is up)."""
    found = wait_for(lambda: _templates(agent), 30, what="the template")
    assert len(found) == 1, found
    return found[0]


def _supervisor(agent: AgentD, run_id: str) -> int:
    pid_file = agent.spool / "runs" / run_id / "supervisor.pid"
    return int(wait_for(lambda: pid_file.exists() and pid_file.read_text().split()[0], 30, what="the pid file"))


def _warm(client: Client, agent: AgentD, template: int) -> None:
    """Runs `true` until one is forked from the template: the first runs after agentd starts are
    spawned while the template still imports the supervisor's code."""
    for i in range(10):
        change = client.submit_change("forks", f"warm {i}", [task("warm", ["true"])])
        list(client.watch(change.id))
        run_id = client.get_change(change.id).tasks[0].latest_run_id
        assert client.get_run(run_id).state == "succeeded"
        if f"run {run_id}: supervisor forked" in agent.log():
            return
    raise AssertionError(f"no run was forked from template {template}:\n{agent.log()}")


def _hold(client: Client) -> tuple[str, str]:
    change = client.submit_change("forks", "hold", [task("hold", HOLD)])

    def holding() -> str:
        run_id = client.get_change(change.id).tasks[0].latest_run_id
        lines = [ln.text for ln in client.run_logs(run_id)] if run_id else []
        return run_id if "holding\n" in lines else ""

    return change.id, wait_for(holding, 60, what="the run to print")


def _finish(client: Client, agent: AgentD, change_id: str, run_id: str) -> None:
    (agent.work_dir / run_id / "repo" / "release").touch()
    list(client.watch(change_id))
    run = client.get_run(run_id)
    assert run.state == "succeeded", run
    assert [ln.text for ln in client.run_logs(run_id) if ln.stream == "stdout"] == ["holding\n", "released\n"]


def test_a_run_supervisor_is_forked_from_the_template_and_outlives_agentd(fleet: Fleet) -> None:
    fleet.start_plane()
    fleet.plane.add_project("forks")
    agent = fleet.agent("forker")
    template = _template(agent)
    assert agent.proc is not None and _parent(template) == agent.proc.pid
    with fleet.plane.client() as client:
        _warm(client, agent, template)
        change_id, run_id = _hold(client)
        supervisor = _supervisor(agent, run_id)
        assert _parent(supervisor) == template  # forked, not a fresh interpreter agentd started
        # agentd dies: its template follows it (its socket closed), the supervisor goes on.
        agent.kill9()
        wait_for(lambda: not start_time(template), 10, what="the template to exit")
        assert pathlib.Path(f"/proc/{supervisor}").exists()
        agent.start()
        new_template = _template(agent)
        assert new_template != template
        _finish(client, agent, change_id, run_id)
    assert "re-attached to run " + run_id in agent.log()


def test_without_its_template_agentd_spawns_supervisors_and_starts_it_again(fleet: Fleet) -> None:
    fleet.start_plane()
    fleet.plane.add_project("forks")
    agent = fleet.agent("spawner", capacity=2)
    template = _template(agent)
    with fleet.plane.client() as client:
        _warm(client, agent, template)  # it was up and forking
    os.kill(template, signal.SIGKILL)
    wait_for(lambda: not start_time(template), 10, what="the template to die")  # or a zombie
    with fleet.plane.client() as client:
        change_id, run_id = _hold(client)
        assert agent.proc is not None
        assert _parent(_supervisor(agent, run_id)) == agent.proc.pid  # spawned: the run did not wait
        # The template had been up: it is started again at once, and the next run is forked from it.
        new_template = _template(agent)
        assert new_template != template
        _warm(client, agent, new_template)
        second_change, second_run = _hold(client)
        assert _parent(_supervisor(agent, second_run)) == new_template
        _finish(client, agent, second_change, second_run)
        _finish(client, agent, change_id, run_id)
    assert "the supervisor template exited" in agent.log()


def test_no_prefork_starts_each_supervisor_as_a_fresh_interpreter(fleet: Fleet) -> None:
    fleet.start_plane()
    fleet.plane.add_project("forks")
    agent = fleet.agent("plain", extra=("--no-prefork",))
    holds(lambda: not _templates(agent), 1, what="no supervisor template")
    with fleet.plane.client() as client:
        change_id, run_id = _hold(client)
        assert agent.proc is not None
        assert _parent(_supervisor(agent, run_id)) == agent.proc.pid
        _finish(client, agent, change_id, run_id)
