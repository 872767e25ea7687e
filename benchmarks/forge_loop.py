#!/usr/bin/env python3
"""The forge loop end to end: an issue labelled on the forge -> a pull request opened, with the scripted
fake model, and where that time goes.

    python benchmarks/forge_loop.py [--issues N] [--timeout S]

Real processes on loopback: `controlplane serve` (SQLite, its HTTP listener receiving the webhook), one
agentd (capacity 1), drover.testing.fake_github (REST, signed webhooks, git over smart HTTP with token
auth; in this process) holding the project's repository, and drover.testing.fake_anthropic (in this
process) scripted with five model calls per run (read, edit, run the tests, complete). N times, one after
the other: an issue is opened and labelled `drover` through the forge's REST API with githubkit as a
user would; the forge signs and POSTs the delivery; the control plane keeps it, its forge loop starts a
Change, agentd clones from the forge, runs, pushes the ChangeSet, the composer pushes the candidate, the
forge loop pushes the pull request's branch and opens the pull request.

Reported per issue and as p50: label -> pull request opened (wall, from the label call to the pull
request existing on the forge), and its split from the events' times (the control plane's clock, this
machine's): label -> delivery kept, -> Change started (the loop reads the issue, submits, comments),
-> run assigned, -> run started (clone, sandbox), -> run finished (the model loop and tools, publish),
-> candidate composed, -> pull request opened (push the branch, open the pull request).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import sys
import tempfile
import time
from typing import Any

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "sdk"))
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from cryptography.fernet import Fernet
from dispatch import Deadline, Proc, add_project, agentd_argv, log_tail, pct, start_plane, ts, wait_for
from githubkit import GitHub, TokenAuthStrategy

from drover import Client
from drover.testing import fake_anthropic as fake
from drover.testing.fake_github import FakeGitHub

API_KEY = "sk-ant-bench-0123456789abcdef"
ALICE, BOT = "ghp_bench_alice", "github_pat_bench_drover"
PYTEST = "python -m pytest -q"
CHILD_PATH = f"{os.path.dirname(sys.executable)}:{os.environ.get('PATH', '/usr/bin:/bin')}"
FILES = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
}
SPLIT = [
    ("label -> delivery kept", "label", "forge.delivery_received"),
    ("-> Change started", "forge.delivery_received", "forge.change_started"),
    ("-> run assigned", "forge.change_started", "run.assigned"),
    ("-> run started", "run.assigned", "run.started"),
    ("-> run finished", "run.started", "run.finished"),
    ("-> candidate composed", "run.finished", "change.candidate_composed"),
    ("-> pull request opened", "change.candidate_composed", "forge.pull_opened"),
]


def script() -> list[fake.Step]:
    return [
        fake.tool_use("read_file", {"path": "calc.py"}),
        fake.tool_use("edit_file", {"path": "calc.py", "edits": [{"old_text": "a - b", "new_text": "a + b"}]}),
        fake.tool_use("run_command", {"command": PYTEST}),
        fake.tool_use("complete_task", {"summary": "add adds", "files_changed": ["calc.py"], "tests_run": [PYTEST]}),
    ]


def events_of(client: Client, change_id: str) -> list[Any]:
    found, after = [], 0
    while page := client.list_events(change_id=change_id, after_id=after, limit=1000):
        found.extend(page)
        after = page[-1].id
    return found


def one_issue(
    client: Client, gh: FakeGitHub, model: fake.FakeAnthropic, i: int, deadline: Deadline
) -> dict[str, float]:
    api = GitHub(TokenAuthStrategy(ALICE), base_url=gh.base_url)
    issue = api.rest.issues.create("octo", "app", title=f"add() subtracts ({i})", body="- [ ] tests pass").parsed_data
    model.extend(script())
    t0 = time.time()
    api.rest.issues.add_labels("octo", "app", issue.number, data={"labels": ["drover"]})

    def pull() -> Any:
        return next(
            (p for p in gh.issues["octo/app"].values() if p.pull and f"#{issue.number}" in (p.body or "")), None
        )

    wait_for(pull, deadline, 300, f"a pull request for issue #{issue.number}", interval=0.02)
    opened = time.time()
    started = [
        e for e in client.list_events(kind="forge.change_started", limit=1000) if e.data["number"] == issue.number
    ]
    change_id = started[0].change_id
    at: dict[str, float] = {"label": t0}
    for e in events_of(client, change_id):
        at.setdefault(e.kind, ts(e))
    delivery = started[0].data["delivery_id"]
    for e in client.list_events(kind="forge.delivery_received", limit=1000):
        if e.data.get("delivery_id") == delivery:
            at["forge.delivery_received"] = ts(e)
    split = {name: at[b] - at[a] for name, a, b in SPLIT if a in at and b in at}
    split["label -> pull request opened (wall)"] = opened - t0
    return split


def run(args: argparse.Namespace, tmp: pathlib.Path, deadline: Deadline) -> None:
    model = fake.FakeAnthropic(api_key=API_KEY).start()
    procs: list[Proc] = []
    with FakeGitHub(tmp / "forge") as gh:
        try:
            gh.create_repo("octo/app", FILES)
            gh.add_token(ALICE, "alice")
            gh.add_token(BOT, "drover-bot")
            env = dict(os.environ, DROVER_LOG_LEVEL="WARNING", ANTHROPIC_BASE_URL=model.base_url)
            env |= {"ANTHROPIC_API_KEY": API_KEY, "DROVER_CREDENTIAL_KEY": Fernet.generate_key().decode()}
            env.pop("DROVER_DATABASE_URL", None)
            data_dir = tmp / "cp"
            plane, target = start_plane(
                data_dir, tmp / "controlplane.log", env, deadline, "--http-listen", "127.0.0.1:0"
            )
            procs.append(plane)
            found = re.search(r"drover console on (https?://127\.0\.0\.1:\d+)/", plane.log.read_text())
            if not found:
                raise RuntimeError(f"no console URL in the log:\n{log_tail(plane.log)}")
            token = (data_dir / "tokens" / "admin.token").read_text().strip()
            git_token = tmp / "git.token"
            git_token.write_text(BOT + "\n")
            add_project(
                data_dir, env, "web", "--repo", gh.clone_url("octo/app"), "--branch", "main",
                "--git-token-file", str(git_token), "--forge", "github", "--forge-repo", "octo/app",
                "--forge-api-url", gh.base_url,
            )  # fmt: skip
            with Client(target, token=token) as client:
                client.projects.set_forge_credential("web", "token", BOT)
                gh.set_webhook(found.group(1) + "/hooks/github", client.projects.rotate_webhook_secret("web").secret)
                root = tmp / "agent"
                argv = agentd_argv(target, "bench-1", data_dir, root, 1)
                procs.append(Proc("agentd", argv, root / "agentd.log", dict(env, PATH=CHILD_PATH)).start())
                wait_for(lambda: any(a.connected for a in client.list_agents()), deadline, 60, "agentd to connect")
                print(f"forge loop: {args.issues} issues, one after the other; 1 agent, SQLite", flush=True)
                splits = []
                for i in range(args.issues):
                    split = one_issue(client, gh, model, i + 1, deadline)
                    splits.append(split)
                    wall = split["label -> pull request opened (wall)"] * 1000
                    print(f"  issue {i + 1}: label -> PR opened {wall:6.0f} ms", flush=True)
            names = ["label -> pull request opened (wall)"] + [name for name, _, _ in SPLIT]
            print(f"  p50 over {len(splits)} issues (ms):")
            for name in names:
                ms = [s[name] * 1000 for s in splits if name in s]
                if ms:
                    print(f"    {name:<38} p50 {pct(ms, 50):7.0f}  min {min(ms):7.0f}  max {max(ms):7.0f}")
        finally:
            for p in reversed(procs):
                p.stop()
            model.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--issues", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args(argv)
    deadline = Deadline(args.timeout)
    with tempfile.TemporaryDirectory(prefix="drover-forge-bench-") as tmp:
        run(args, pathlib.Path(tmp), deadline)
    return 0


if __name__ == "__main__":
    sys.exit(main())
