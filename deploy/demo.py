"""The Drover demo: a control plane, one agentd, a sample repository and a Change of command Tasks.

    python deploy/demo.py [--keep]

Prints the Change's events and each run's output as they happen; exits 0 when the Change succeeded.
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

from drover import Client
from drover.cli import format_change, format_event

SAMPLE = {
    "README.md": "# calc\n\nA tiny calculator the demo's Tasks build and test.\n",
    "calc.py": "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n",
    "test_calc.py": (
        "import unittest\n\nimport calc\n\n\nclass CalcTest(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(calc.add(2, 3), 5)\n\n"
        "    def test_mul(self):\n        self.assertEqual(calc.mul(4, 5), 20)\n\n\n"
        "if __name__ == '__main__':\n    unittest.main()\n"),
}


def make_repo(path: pathlib.Path) -> None:
    repo = pygit2.init_repository(str(path), initial_head="main")
    for name, text in SAMPLE.items():
        (path / name).write_text(text)
    repo.index.add_all()
    repo.index.write()
    sig = pygit2.Signature("Drover Demo", "demo@drover.invalid")
    repo.create_commit("HEAD", sig, sig, "calc: add and mul", repo.index.write_tree(), [])


def change_tasks() -> list[dict]:
    py = sys.executable
    return [
        {"key": "inspect", "kind": "review", "objective": "List the files of the repository",
         "command": [py, "-c", "import os; [print(f) for f in sorted(os.listdir('.')) if not f.startswith('.')]"]},
        {"key": "compile", "kind": "test", "objective": "Byte-compile every module", "depends_on": ["inspect"],
         "command": [py, "-m", "py_compile", "calc.py", "test_calc.py"]},
        {"key": "unit-tests", "kind": "test", "objective": "Run the unit tests", "depends_on": ["inspect"],
         "command": [py, "-m", "unittest", "-v", "test_calc"]},
        {"key": "report", "kind": "summarize", "objective": "Count the lines of code",
         "depends_on": ["compile", "unit-tests"],
         "command": [py, "-c", "import glob; n = sum(len(open(f).readlines()) for f in glob.glob('*.py'));"
                               " print(f'{n} lines of Python, all tests green')"]},
    ]


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


def main() -> int:
    parser = argparse.ArgumentParser(description="Run the Drover demo")
    parser.add_argument("--keep", action="store_true", help="keep the demo directory")
    args = parser.parse_args()
    root = pathlib.Path(tempfile.mkdtemp(prefix="drover-demo-"))
    data, repo = root / "controlplane", root / "sample-repo"
    procs: list[subprocess.Popen[bytes]] = []
    env = dict(os.environ, DROVER_LOG_LEVEL="WARNING")
    try:
        make_repo(repo)
        print(f"demo directory {root}\nsample repository {repo} (branch main)")
        cp_log = root / "controlplane.log"
        procs.append(subprocess.Popen([sys.executable, "-m", "controlplane.cli", "serve", "--listen", "127.0.0.1:0",
                                       "--data-dir", str(data)], stdout=open(cp_log, "wb"), stderr=subprocess.STDOUT,
                                      env=env))
        port = wait_for_port(cp_log, procs[0])
        target = f"127.0.0.1:{port}"
        print(f"control plane on {target}")
        subprocess.run([sys.executable, "-m", "controlplane.cli", "project", "add", "sample", "--repo", str(repo),
                        "--data-dir", str(data)], check=True, env=env, stdout=subprocess.DEVNULL)
        procs.append(subprocess.Popen([sys.executable, "-m", "agentd.cli", "--control-plane", target, "--name",
                                       "demo-agent", "--capacity", "2", "--token-file",
                                       str(data / "tokens" / "agent.token"), "--spool-dir", str(root / "spool"),
                                       "--work-dir", str(root / "work")],
                                      stdout=open(root / "agentd.log", "wb"), stderr=subprocess.STDOUT, env=env))
        token = (data / "tokens" / "admin.token").read_text().strip()
        with Client(target, token=token) as client:
            deadline = time.monotonic() + 30
            while not any(a.connected for a in client.list_agents()):
                if time.monotonic() > deadline:
                    raise SystemExit("agentd did not connect within 30 s")
                time.sleep(0.1)
            print("agentd demo-agent connected\n")
            change = client.submit_change("sample", "Check that calc builds and its tests pass", change_tasks(),
                                          criteria=["unit tests pass"], budget_usd=0)
            print(f"submitted change {change.id}\n")
            keys = {t.id: t.key for t in change.tasks}
            for event in client.watch(change.id):
                print(format_event(event), flush=True)
                if event.kind == "run.finished":
                    for line in client.run_logs(event.run_id):
                        if line.stream != "system":
                            for text in line.text.splitlines():
                                print(f"    {keys.get(event.task_id, '')} | {text}")
            final = client.get_change(change.id)
        print("\n" + format_change(final))
        print(f"\nthe demo's Change {final.status}")
        return 0 if final.status == "succeeded" else 1
    finally:
        for proc in reversed(procs):
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
