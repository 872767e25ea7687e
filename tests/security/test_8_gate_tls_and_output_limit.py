"""Issue 8, finding 8: the harness's model-call gate dialled the control plane in plaintext, so harness
runs could not reach a control plane that serves TLS; and --output-limit-bytes never reached agentd,
which kept recording a run's output on its disk long past the limit."""

from __future__ import annotations

import pathlib

from drover.testing import fake_anthropic as fake
from tests.conftest import API_KEY, Fleet, python_command, task, tls_client, wait_for

FIX_STEPS = [
    fake.tool_use("edit_file", {"path": "calc.py", "edits": [{"old_text": "a - b", "new_text": "a + b"}]}),
    fake.tool_use("complete_task", {"summary": "fixed"}),
]


def test_a_harness_task_runs_against_a_tls_control_plane(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path, pki: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    model.extend(FIX_STEPS)
    fleet.plane.extra_env.update(ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=API_KEY)
    plane = fleet.start_plane(
        "--tls-cert",
        str(pki / "server.pem"),
        "--tls-key",
        str(pki / "server.key"),
        "--tls-client-ca",
        str(pki / "ca.pem"),
    )  # mTLS: the gate needs the client cert too
    plane.add_project("calc", str(calc_repo))
    config = tmp_path / "agentd.toml"
    config.write_text(
        f'tls = true\nca_file = "{pki / "ca.pem"}"\ntls_cert = "{pki / "client.pem"}"\n'
        f'tls_key = "{pki / "client.key"}"\n'
    )
    agent = fleet.agent("tls-harness", extra=("--config", str(config)), wait=False)
    with tls_client(plane, pki) as client:
        wait_for(lambda: any(a.connected for a in client.list_agents()), 30, what="agentd over mTLS")
        # medium complexity routes to sonnet by rule, so no classifier call takes a scripted reply
        change = client.submit_change(
            "calc",
            "fix add",
            [{"key": "fix", "kind": "implement", "objective": "make add add", "complexity": "medium"}],
        )
        list(client.watch(change.id))
        final = client.get_change(change.id)
        run = client.get_run(final.tasks[0].latest_run_id)
    assert final.status == "succeeded", agent.log()
    assert (run.state, run.outcome) == ("succeeded", "completed")
    assert run.model_calls == 2 and len(model.requests) == 2  # each call reserved through the gate
    assert run.cost_micros > 0  # and settled with its usage


def test_agentd_stops_recording_output_past_the_limit(fleet: Fleet) -> None:
    limit = 100_000
    fleet.start_plane("--output-limit-bytes", str(limit))
    fleet.plane.add_project("limits")
    agent = fleet.agent("capped")
    # 4 MB at once, then a mark that the printing is over, then a long sleep
    loud = python_command(
        "import sys, time\n"
        "line = 'y' * 99 + '\\n'\n"
        "for _ in range(40):\n"
        "    sys.stdout.write(line * 1000)\n"
        "sys.stdout.flush()\n"
        "open('printed', 'w').close()\n"
        "time.sleep(120)\n"
    )
    with fleet.plane.client() as client:
        change = client.submit_change("limits", "loud", [task("loud", loud)])
        run_id = wait_for(lambda: client.get_change(change.id).tasks[0].latest_run_id, 30, what="the run")
        wait_for(lambda: client.get_run(run_id).output_truncated, 30, what="the output to be truncated")
        wait_for(lambda: any(agent.work_dir.rglob("printed")), 30, what="the command to print everything")
        output = agent.spool / "runs" / run_id / "output.jsonl"
        size = output.stat().st_size
        client.cancel_run(run_id)
    # the limit, the supervisor's 64 KiB margin, and JSON: '{"s": "stdout", "t": ...}' per 8 KiB record
    # plus an escaped newline per 100-byte line, and the one system line saying output was dropped
    assert size <= (limit + 64 * 1024) * 1.02 + 4096, f"output.jsonl holds {size} bytes"
