"""RunFinished carries the session's result (final message, turns, success): stored on the run, shown by
GetRun, `drover run` and the console's run page (escaped)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

from drover.testing import fake_anthropic as fake
from tests.conftest import API_KEY, Fleet, task
from tests.fleet.test_console import Console, console_url

FINAL = "fixed add() <script>alert(1)</script> \x1b[31mred\x1b[0m key=" + API_KEY


def test_a_harness_runs_result_reaches_get_run_the_cli_and_the_console(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path
) -> None:
    model.extend(
        [
            fake.tool_use("write_file", {"path": "calc.py", "content": "def add(a, b):\n    return a + b\n"}),
            fake.tool_use("complete_task", {"summary": FINAL + " " + "x" * 5000}),
        ]
    )
    fleet.plane.extra_env.update(ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=API_KEY)
    fleet.start_plane("--http-listen", "127.0.0.1:0")
    fleet.plane.add_project("calc", str(calc_repo))
    fleet.agent("result-agent")
    fix = {"key": "fix", "kind": "implement", "objective": "fix add", "complexity": "medium"}
    with fleet.plane.client() as client:
        change = client.submit_change("calc", "fix add", [fix])
        list(client.watch(change.id))
        [listed] = client.list_runs(change_id=change.id)
        run = client.get_run(listed.id)
    assert run.state == "succeeded" and run.has_result and run.result_success
    assert run.result_turns == 2 and run.compactions == 0
    assert run.result_text.startswith(FINAL.replace(API_KEY, "***"))  # the secret redacted like any output
    assert API_KEY not in run.result_text and len(run.result_text.encode()) == 4096  # bounded
    assert (listed.result_text, listed.result_turns) == (run.result_text, 2)  # ListRuns carries it too

    shown = subprocess.run(
        [sys.executable, "-m", "drover.cli", "run", run.id],
        capture_output=True,
        text=True,
        env={**os.environ, "DROVER_TARGET": fleet.plane.target, "DROVER_TOKEN": fleet.plane.admin_token},
        timeout=60,
        check=True,
    ).stdout
    assert f"run {run.id}: succeeded" in shown and "result: success, 2 turns" in shown
    assert "fixed add() <script>alert(1)</script> \\x1b[31mred" in shown and "\x1b" not in shown

    console = Console(console_url(fleet))
    assert console.sign_in(fleet.plane.admin_token).status_code == 303
    page = console.get(f"/runs/{run.id}").text
    assert 'id="run-result">success, 2 turns' in page
    assert "fixed add() &lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert(1)" not in page
    log = "\n".join(p.read_text() for p in fleet.plane.data_dir.glob("*.log"))
    assert "alert(1)" not in log  # the final message is never logged


def test_a_command_run_has_no_result(fleet: Fleet, calc_repo: pathlib.Path) -> None:
    fleet.start_plane()
    fleet.plane.add_project("calc", str(calc_repo))
    fleet.agent("result-agent")
    with fleet.plane.client() as client:
        change = client.submit_change("calc", "a command", [task("t", [sys.executable, "-c", "print('hi')"])])
        list(client.watch(change.id))
        [run] = client.list_runs(change_id=change.id)
    assert run.state == "succeeded" and not run.has_result and run.result_text == ""
