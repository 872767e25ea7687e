"""The Drover demo: a control plane, one agentd, a sample repository and a Change of two Tasks:
`fix`, an implement Task the model harness works on, and `test`, a command Task that runs the
tests on fix's ChangeSet. Prints events, the harness's tool calls and the patch as they happen.

    python deploy/demo.py [--keep]

Without ANTHROPIC_API_KEY the model is a scripted fake Messages API server (drover.testing.fake_anthropic);
with it, the same demo talks to the real API (ANTHROPIC_BASE_URL and ANTHROPIC_MODEL are honoured).
Exits 0 when the Change succeeded.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pygit2

from agentd.daemon import config as agentd_config
from agentd.daemon import isolation
from drover import Client, follow
from drover.models import LogLine
from drover.render import format_change, format_event, labelled_lines
from drover.testing import fake_anthropic as fake

SAMPLE = {
    "README.md": "# calc\n\nA tiny calculator. Run the tests with `python -m unittest`.\n",
    "calc.py": "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n",
    # unittest, not pytest: the demo needs nothing beyond `pip install -e '.[agent,server]'`.
    "test_calc.py": "import unittest\n\nfrom calc import add, mul\n\n\nclass CalcTest(unittest.TestCase):\n"
    "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n"
    "    def test_mul(self):\n        self.assertEqual(mul(4, 5), 20)\n",
}
FAKE_KEY = "sk-demo-fake-key"
SCRIPT = [
    fake.text('{"tier": "sonnet", "confidence": 0.85}'),  # the routing classifier (a haiku call) picks the tier
    fake.tool_use("list_files", {}, text="I'll look at the repository first."),
    fake.tool_use("read_file", {"path": "calc.py"}),
    fake.tool_use("run_command", {"command": "python -m unittest"}, text="Let me see what fails."),
    fake.tool_use(
        "edit_file",
        {"path": "calc.py", "edits": [{"old_text": "return a - b", "new_text": "return a + b"}]},
        text="add() subtracts; it should add.",
    ),
    fake.tool_use("run_command", {"command": "python -m unittest"}),
    fake.tool_use(
        "complete_task",
        {
            "summary": "add() now adds; both tests pass",
            "files_changed": ["calc.py"],
            "tests_run": ["python -m unittest"],
            "follow_ups": [],
        },
    ),
]


def make_repo(path: pathlib.Path) -> None:
    repo = pygit2.init_repository(str(path), initial_head="main")
    for name, text in SAMPLE.items():
        (path / name).write_text(text)
    repo.index.add_all()
    repo.index.write()
    sig = pygit2.Signature("Drover Demo", "demo@drover.invalid")
    repo.create_commit("HEAD", sig, sig, "calc: add and mul", repo.index.write_tree(), [])


def change_tasks() -> list[dict]:
    return [
        {
            "key": "fix",
            "kind": "implement",
            "objective": "add() in calc.py returns the wrong result. Fix it so that `python -m unittest` passes.",
        },
        {
            "key": "test",
            "kind": "test",
            "objective": "Run the tests on the fix",
            "depends_on": ["fix"],
            "command": [sys.executable, "-m", "unittest", "-v"],
        },
    ]


def show_lines(key: str, line: LogLine) -> None:
    for text in labelled_lines(key, line):
        print(text, flush=True)


def wait_for_port(log: pathlib.Path, proc: subprocess.Popen[bytes]) -> int:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = re.search(r"listening on 127\.0\.0\.1:(\d+)", log.read_text(errors="replace"))
        if found:
            return int(found.group(1))
        if proc.poll() is not None:
            raise SystemExit(f"the control plane exited:\n{log.read_text()}")
        time.sleep(0.1)
    raise SystemExit("the control plane did not start within 60 s")


def sandbox_flags() -> list[str]:
    """agentd refuses to run Tasks where bubblewrap does not work; the demo then runs without it and says so."""
    reason = isolation.probe(agentd_config.load(None, os.environ, {}))
    if not reason:
        print("agentd runs every Task in a bubblewrap sandbox")
        return []
    print(
        f"bubblewrap does not work here ({reason}): the demo's agentd runs its Tasks WITHOUT A SANDBOX "
        "(--unsafe-no-sandbox).\nFor real use install it (apt-get install bubblewrap); agentd refuses to start "
        "without it."
    )
    # As root agentd would run Tasks as `nobody`, who cannot reach this Python or the demo directory.
    return ["--unsafe-no-sandbox"] + (["--session-user", "root"] if os.geteuid() == 0 else [])


def main() -> int:
    parser = argparse.ArgumentParser(description="Run the Drover demo")
    parser.add_argument("--keep", action="store_true", help="keep the demo directory")
    args = parser.parse_args()
    root = pathlib.Path(tempfile.mkdtemp(prefix="drover-demo-"))
    data, repo = root / "controlplane", root / "sample-repo"
    procs: list[subprocess.Popen[bytes]] = []
    model = None
    env = dict(
        os.environ, DROVER_LOG_LEVEL="WARNING", PATH=f"{os.path.dirname(sys.executable)}:{os.environ.get('PATH', '')}"
    )
    cp_log, agent_log = root / "controlplane.log", root / "agentd.log"
    with open(cp_log, "wb") as cp_out, open(agent_log, "wb") as agent_out:
        try:
            make_repo(repo)
            print(f"demo directory {root}\nsample repository {repo} (branch main)")
            if not os.environ.get("ANTHROPIC_API_KEY"):
                model = fake.FakeAnthropic(SCRIPT).start()
                env.update(ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=FAKE_KEY)
                print(
                    f"ANTHROPIC_API_KEY is not set: the model is a SCRIPTED FAKE Messages API server at "
                    f"{model.base_url}.\nSet ANTHROPIC_API_KEY to run the same demo against the real API."
                )
            else:
                print(f"using the Anthropic API at {env.get('ANTHROPIC_BASE_URL') or 'https://api.anthropic.com'}")
            config = root / "controlplane.toml"
            config.write_text(f'[tiers.sonnet]\nmodel = "{os.environ.get("ANTHROPIC_MODEL", "claude-sonnet-5-5")}"\n')
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "controlplane.cli",
                        "serve",
                        "--listen",
                        "127.0.0.1:0",
                        "--data-dir",
                        str(data),
                        "--config",
                        str(config),
                    ],
                    stdout=cp_out,
                    stderr=subprocess.STDOUT,
                    env=env,
                )
            )
            port = wait_for_port(cp_log, procs[0])
            target = f"127.0.0.1:{port}"
            print(f"control plane on {target}")
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "controlplane.cli",
                    "project",
                    "add",
                    "sample",
                    "--repo",
                    str(repo),
                    "--data-dir",
                    str(data),
                ],
                check=True,
                env=env,
                stdout=subprocess.DEVNULL,
            )
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "agentd.cli",
                        "--control-plane",
                        target,
                        "--name",
                        "demo-agent",
                        "--capacity",
                        "2",
                        "--token-file",
                        str(data / "tokens" / "agent.token"),
                        "--spool-dir",
                        str(root / "spool"),
                        "--work-dir",
                        str(root / "work"),
                        *sandbox_flags(),
                    ],
                    stdout=agent_out,
                    stderr=subprocess.STDOUT,
                    env=env,
                )
            )
            token = (data / "tokens" / "admin.token").read_text().strip()
            with Client(target, token=token) as client:
                deadline = time.monotonic() + 30
                while not any(a.connected for a in client.list_agents()):
                    if time.monotonic() > deadline:
                        raise SystemExit("agentd did not connect within 30 s")
                    time.sleep(0.1)
                print("agentd demo-agent connected\n")
                change = client.submit_change(
                    "sample", "Make calc correct", change_tasks(), criteria=["python -m unittest passes"]
                )
                print(f"submitted change {change.id}\n")
                keys = {t.id: t.key for t in change.tasks}
                # Tool calls and output as they happen (as `drover watch --logs` shows them).
                logs = follow.RunFollowers(client, show_lines)
                for event in follow.change_events(client, change.id):
                    if event.kind == "run.finished":
                        logs.finished(event.run_id)  # its last lines first, then the event
                    print(format_event(event), flush=True)
                    if event.kind == "run.started":
                        logs.started(event.run_id, keys.get(event.task_id, ""))
                final = client.get_change(change.id)
                changesets = client.list_changesets(change.id)
                print("\n" + format_change(final))
                for cs in changesets:
                    print(f"\nChangeSet {cs.id} of {cs.task_key} on branch {cs.branch}:\n")
                    print(client.get_patch(cs.id))
            print(f"the demo's Change {final.status}")
            return 0 if final.status == "succeeded" else 1
        finally:
            for proc in reversed(procs):
                proc.send_signal(signal.SIGTERM)
            for proc in procs:
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
            if model is not None:
                model.stop()
            if not args.keep:
                shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
