"""The shell commands the docs show, run as written against a real control plane and agentd on loopback:
every line of docs/cli.md's command block, every `grpcurl` line of docs/operations.md and docs/runtimes.md,
the `drover` lines of docs/runtimes.md and the `drover` spans of the prose that carry placeholders, each
checked for what the page says it does (tests/test_shell_commands_in_docs.py holds the inventory these count
in).

What is adapted, and nothing else (`adapt`):
- where: `127.0.0.1:50051` becomes the test's control plane (grpcurl's argument; DROVER_TARGET for `drover`);
  the commands run in a directory whose `.drover` is the control plane's data directory, so
  `TOKEN=$(cat .drover/tokens/admin.token)` and `drover`'s default token file are the page's;
- the page's placeholders become real ids: `run_...`, `chg_...`, `cs_...`, `q_...`, RUN, CHANGE, C, R,
  CHANGESET, QUESTION, AGENT, A, P, N, S, ID, USD, `<id>`, `vm-7` (this test's second agent) and the page's
  `"page_token": "..."` (the first page's next_page_token);
- the documentation's notation: `[optional parts]` are given (brackets dropped), as in
  tests/sdk/test_documented_commands.py.

The model is the scripted fake Messages API. One harness run asks three blocking questions and is held, so
`say`, `interrupt`, SendInput, ListInputs, questions and answers reach a live session; the script gets one reply
per input, so a test that sees a request too many or too few fails.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from drover import Client
from drover.testing import fake_anthropic as fake
from tests.conftest import API_KEY, ROOT, Fleet, make_repo, python_command, wait_for

pytestmark = pytest.mark.timeout(600)

AGENT = "doccmd-worker"
SPARE = "doccmd-vm7"  # the page's `vm-7`
SLEEP = python_command("import time; time.sleep(300)")


def page(name: str) -> str:
    return (ROOT / "docs" / name).read_text()


def block_lines(text: str, containing: str) -> list[str]:
    """The command lines of the ```sh block of `text` that holds `containing`, comments dropped."""
    for block in re.findall(r"^```sh\n(.*?)^```", text, re.M | re.S):
        if containing in block:
            lines = [re.sub(r"(^|\s)#.*$", "", line).strip() for line in block.splitlines()]
            return [" ".join(line.split()) for line in lines if line]
    raise AssertionError(f"no ```sh block holds {containing!r}")


CLI = block_lines(page("cli.md"), "drover submit change.yaml")
OPERATIONS_GRPCURL = [line for line in block_lines(page("operations.md"), "grpcurl") if line.startswith("grpcurl")]
RUNTIMES_INPUT = block_lines(page("runtimes.md"), "drover say")
RUNTIMES_QUESTIONS = block_lines(page("runtimes.md"), "drover questions")
TOKEN_LINE = block_lines(page("operations.md"), "grpcurl")[0]
PROSE = [
    "drover events | head -1",  # docs/cli.md, exit codes (concepts.md's `drover raise-budget CHANGE USD` is cli.md's)
    "drover usage --prefix change-usd:<id>",  # docs/security.md
]

FAKE_ON_ITS_OWN = "python -m drover.testing.fake_anthropic --port 8099 --script script.json"  # docs/development.md
RUN_FROM_THE_PAGES: dict[str, str] = {
    FAKE_ON_ITS_OWN: "FAKE_ON_ITS_OWN",
    **dict.fromkeys(CLI, "cli.md"),
    **dict.fromkeys([TOKEN_LINE, *OPERATIONS_GRPCURL], "operations.md"),
    **dict.fromkeys(RUNTIMES_INPUT + RUNTIMES_QUESTIONS, "runtimes.md"),
    **{line: line for line in PROSE},
}
"""What this file runs, for tests/test_shell_commands_in_docs.py: command -> a string of this file that shows it."""


@dataclasses.dataclass
class World:
    fleet: Fleet
    model: fake.FakeAnthropic
    here: pathlib.Path
    ids: dict[str, str]
    """Placeholder -> id."""

    def env(self) -> dict[str, str]:
        bin_dir = os.path.dirname(sys.executable)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "DROVER_"))}
        env.update(PATH=f"{bin_dir}:{env.get('PATH', '')}", DROVER_TARGET=self.fleet.plane.target)
        return env

    def sh(self, line: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """One page line in bash, after the page's TOKEN line, in the directory of `.drover`."""
        script = f"{TOKEN_LINE}\n{line}"
        return subprocess.run(
            ["bash", "-c", script], cwd=self.here, env=self.env(), capture_output=True, text=True, timeout=timeout
        )

    def ok(self, line: str, timeout: float = 60, stderr: bool = False) -> str:
        """What `line` printed on stdout (and stderr, where a run's stderr lines go, with `stderr`); exit 0."""
        done = self.sh(line, timeout)
        assert done.returncode == 0, f"`{line}` exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        return done.stdout + (done.stderr if stderr else "")

    def json(self, line: str) -> Any:
        return json.loads(self.ok(line) or "{}")

    def client(self) -> Any:
        return self.fleet.plane.client()


PLACEHOLDER = re.compile(r"(?<![\w.$<-])(RUN|CHANGE|CHANGESET|QUESTION|AGENT|TASK|TEXT|USD|ID|[CRAPNS])(?![\w.>-])")


def adapt(line: str, ids: dict[str, str]) -> str:
    """The page's line with the test's address and real ids for its placeholders (the module docstring)."""
    line = line.replace("127.0.0.1:50051", ids["TARGET"]).replace("vm-7", SPARE)
    line = " ".join(line.replace("[", " ").replace("]", " ").split()) if line.startswith("drover") else line
    for literal in ("run_...", "chg_...", "cs_...", "q_...", "tsk_...", '"..."', "<id>"):
        if literal in line:
            line = line.replace(literal, ids[literal].join('""') if literal == '"..."' else ids[literal])
    if line.startswith("drover"):  # placeholders in capitals; grpcurl's lines have none (and a $TOKEN)
        line = PLACEHOLDER.sub(lambda m: shlex.quote(ids.get(m.group(1), m.group(1))), line)
    return line


def next_reply(world: World, step: dict[str, Any], send: Callable[[], Any]) -> Any:
    """Give the held session one scripted reply, send one input, and wait for the model request it causes."""
    before = len(world.model.requests)
    world.model.extend([step])
    result = send()
    wait_for(lambda: len(world.model.requests) == before + 1, 60, what="the input to reach the session")
    return result


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("doccmd")
    model = fake.FakeAnthropic(api_key=API_KEY).start()
    fleet = Fleet(tmp)
    try:
        yield build(fleet, model, tmp)
    finally:
        fleet.stop()
        model.stop()


def build(fleet: Fleet, model: fake.FakeAnthropic, tmp: pathlib.Path) -> World:
    fleet.plane.extra_env.update(ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=API_KEY)
    fleet.start_plane()
    repo = make_repo(tmp / "calc", {"calc.py": "def add(a, b):\n    return a - b\n", "test_calc.py": TESTS})
    fleet.plane.add_project("sample", str(repo))
    fleet.plane.add_project("parked", str(repo), pool="nobody-serves")  # its runs stay queued: 21 Changes to page
    fleet.agent(AGENT, capacity=5)  # the held session, three sleeping runs and one more
    fleet.agent(SPARE, pool="doccmd-spare")  # takes no run: two agentds on one host share run-slot uids
    here = tmp / "here"
    here.mkdir()
    (here / ".drover").symlink_to(fleet.plane.data_dir)
    (here / "change.yaml").write_text(CHANGE_FILE)
    ids = {"TARGET": fleet.plane.target, "AGENT": SPARE, "A": AGENT, "P": "sample", "N": "5", "USD": "2.5"}
    model.extend(
        [
            fake.tool_use("write_file", {"path": "calc.py", "content": "def add(a, b):\n    return a + b\n"}),
            fake.tool_use("complete_task", {"summary": "add adds"}),
        ]
    )
    with fleet.plane.client() as client:
        done = client.submit_change("sample", "fix add", [FIX, TEST], budget_usd=2)
        assert list(client.watch(done.id)) and client.get_change(done.id).status == "succeeded"
        fix, test = (t.latest_run_id for t in client.get_change(done.id).tasks)
        (changeset,) = client.list_changesets(done.id)
        for n in range(21):
            client.submit_change("parked", f"waits {n}", [{**SLEEPY, "key": f"w{n}"}])
    made = fleet.plane.cli(
        "token", "create", "--kind", "user", "--name", "alice", "--role", "submit", "--project", "sample"
    )
    with Client(fleet.plane.target, token=made.stdout.split()[-1]) as alice:  # printed once
        failed = alice.submit_change("sample", "fails", [{**SLEEPY, "key": "false", "command": ["false"]}])
        wait_for(lambda: alice.get_change(failed.id).status == "failed", 60, what="alice's Change to fail")
    with fleet.plane.client() as client:  # a failed Task of the admin's, for RetryTask
        stopped = client.submit_change("sample", "fails too", [{**SLEEPY, "key": "false", "command": ["false"]}])
        wait_for(lambda: client.get_change(stopped.id).status == "failed", 60, what="the admin's Change to fail")
        ids.update({"TASK": client.get_change(failed.id).tasks[0].id, "tsk_...": stopped.tasks[0].id})
    ids.update(failed=failed.id, stopped=stopped.id, succeeded_state="succeeded", zero="0", fifty="50")
    ids.update({"CHANGE": done.id, "C": done.id, "chg_...": done.id, "<id>": done.id, "CHANGESET": changeset.id})
    ids.update({"cs_...": changeset.id, "RUN": fix, "R": fix, "run_...": fix, "fix": fix, "test": test, "ID": "0"})
    return World(fleet, model, here, ids)


TESTS = "import unittest\n\nfrom calc import add\n\n\nclass Add(unittest.TestCase):\n    def test_add(self):\n"
TESTS += "        self.assertEqual(add(2, 3), 5)\n"
FIX = {"key": "fix", "kind": "implement", "objective": "make add add", "complexity": "medium"}
TEST = {"key": "test", "kind": "test", "objective": "run the tests", "depends_on": ["fix"]}
TEST["command"] = ["python3", "-m", "unittest", "-v"]
SLEEPY = {"key": "sleep", "kind": "test", "objective": "wait", "command": SLEEP}
CHANGE_FILE = """project: sample
goal: Say hello
criteria: [it says hello]
budget_usd: 0
tasks:
  - key: hello
    kind: test
    objective: Say hello
    command: [python3, -c, "print('hello from the page')"]
"""


def start_the_live_ones(world: World) -> None:
    """A harness session held by three open questions, and three sleeping command runs to cancel."""
    world.model.extend(
        [
            *(fake.tool_use("ask_question", {"question": q}) for q in QUESTIONS),
            fake.text("I will wait for the answers."),
        ]
    )
    with world.client() as client:
        held = client.submit_change("sample", "ask", [ASK], budget_usd=1)
        wait_for(lambda: len(client.list_questions(change_id=held.id, open_only=True)) == 3, 90, what="3 questions")
        questions = sorted(client.list_questions(change_id=held.id), key=lambda q: QUESTIONS.index(q.text))
        sleeping = [client.submit_change("sample", f"sleep {n}", [SLEEPY]) for n in range(3)]
        runs = [wait_for(lambda c=c: running_run(client, c.id), 60, what="a sleeping run") for c in sleeping]
        wait_for(lambda: len(world.model.requests) == 6, 30, what="the held turn")  # fix: 2, asking: 4
        (held_run,) = (t.latest_run_id for t in client.get_change(held.id).tasks)
    world.ids.update(held=held.id, held_run=held_run, cancel=sleeping[0].id, cancel_run=runs[1], stuck=runs[2])
    world.ids.update({f"q{n}": q.id for n, q in enumerate(questions, 1)})


def running_run(client: Any, change_id: str) -> str:
    runs = client.list_runs(change_id=change_id, state="running")
    return runs[0].id if runs else ""


QUESTIONS = ["Which port?", "Which host?", "Which name?"]
ASK = {"key": "ask", "kind": "implement", "objective": "ask before you start", "complexity": "medium"}
ASK["files"] = ["calc.py"]  # a claim, live while the session is held


def test_the_commands_of_the_pages_run_as_written(world: World) -> None:
    start_the_live_ones(world)
    ran = []
    for source, lines in (
        ("cli.md", CLI),
        ("prose", PROSE),
        ("runtimes.md", RUNTIMES_INPUT),
        ("operations.md", OPERATIONS_GRPCURL),
        ("runtimes.md", RUNTIMES_QUESTIONS),
    ):
        for line in lines:
            for command in alternatives(line):
                run_one(world, source, command)
                ran.append(command)
    assert len(ran) >= len(RUN_FROM_THE_PAGES) - 1  # the TOKEN line runs before every grpcurl line
    with world.client() as client:
        wait_for(lambda: client.get_change(world.ids["held"]).status == "succeeded", 60, what="the held Change")


def alternatives(line: str) -> list[str]:
    """`drover drain AGENT | drover undrain AGENT` shows two commands; `drover events | head -1` is a pipe."""
    parts = line.split(" | ")
    return parts if len(parts) > 1 and all(p.startswith("drover ") for p in parts) else [line]


def run_one(world: World, source: str, line: str) -> None:
    key = line if line in CHECKS else grpc_key(line) if line.startswith("grpcurl") else " ".join(line.split()[:2])
    overrides, check = CHECKS[key]
    ids = {**world.ids, **{k: world.ids[v] for k, v in overrides.items()}}
    command = adapt(line, ids)
    try:
        check(world, command)
    except AssertionError as err:
        raise AssertionError(f"{source}: `{line}` (run as `{command}`): {err}") from None


def grpc_key(line: str) -> str:
    method = line.split()[-1].rsplit("/", 1)[-1]
    if method == "ListChanges":
        return method + (" page_token" if "page_token" in line else " status" if "status" in line else "")
    return method if line.split()[-1] != "list" else "list"


def reply(text: str = "Noted; still waiting for the answers.") -> dict[str, Any]:
    return fake.text(text)


def said(command: str) -> str:
    """The text an input command sends: grpcurl's `"text"`, or the last word of a `drover` line."""
    words = shlex.split(command)
    if words[0] == "grpcurl":
        return str(json.loads(words[words.index("-d") + 1]).get("text", ""))
    return words[-1]


def reaches_the_session(step: dict[str, Any], says: str = "") -> Callable[[World, str], None]:
    """An input command: it exits 0 and its text (or `says`) is in the next model request of the held session."""

    def check(world: World, command: str) -> None:
        next_reply(world, step, lambda: world.ok(command))
        says_here = says or said(command)
        sent = json.dumps(world.model.requests[-1].body["messages"][-1])
        assert says_here in sent, f"the session's next request does not carry {says_here!r}: {sent[-400:]}"

    return check


def prints(*wanted: str, absent: tuple[str, ...] = ()) -> Callable[[World, str], None]:
    """A query: exits 0 and prints each of `wanted` (ids named as placeholders of World.ids in `{...}`)."""

    def check(world: World, command: str) -> None:
        out = world.ok(command, stderr=True)
        for want in wanted:
            text = want.format(**world.ids)
            assert text in out, f"{text!r} not in its output:\n{out[-2000:]}"
        for unwanted in absent:
            assert unwanted.format(**world.ids) not in out, out[-2000:]

    return check


def then(client_check: Callable[[Any, dict[str, str]], bool], *wanted: str) -> Callable[[World, str], None]:
    """A command that changes something: exits 0 (printing `wanted`), then the SDK sees the change."""

    def check(world: World, command: str) -> None:
        prints(*wanted)(world, command)
        with world.client() as client:
            wait_for(lambda: client_check(client, world.ids), 30, what="the change the command makes")

    return check


def follows(*wanted: str) -> Callable[[World, str], None]:
    """`--follow` keeps waiting for more: it prints what is there and is still running after 3 s."""

    def check(world: World, command: str) -> None:
        proc = subprocess.Popen(
            ["bash", "-c", f"{TOKEN_LINE}\n{command}"],
            cwd=world.here,
            env=world.env(),
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            time.sleep(3)
            assert proc.poll() is None, f"it ended (exit {proc.returncode}) instead of following"
        finally:
            proc.terminate()
            out, _ = proc.communicate(timeout=10)
        for want in wanted:
            assert want.format(**world.ids) in out, out[-2000:]

    return check


def grpc_json(check: Callable[[Any, dict[str, str]], bool]) -> Callable[[World, str], None]:
    """A grpcurl call: exits 0 and its JSON answer passes `check` (a stream: one JSON object after another)."""

    def run(world: World, command: str) -> None:
        out = world.ok(command)
        answers = [json.loads(part) for part in re.split(r"(?<=})\n(?={)", out.strip())] if out.strip() else [{}]
        assert check(answers if len(answers) > 1 else answers[0], world.ids), out[-2000:]

    return run


def newest_of_the_project(world: World, command: str) -> None:
    """`--project sample --limit 5`: five rows, all of the project, the newest first (the `submit` above)."""
    rows = world.ok(command).splitlines()[1:]
    assert len(rows) == 5 and all(row.split()[2] == "sample" for row in rows), rows
    assert "Say hello" in rows[0], rows


def one_line(world: World, command: str) -> None:
    out = world.ok(command)
    assert len(out.splitlines()) == 1, out


def pages_of_changes(world: World, command: str) -> None:
    first = world.json(
        adapt(
            'grpcurl -plaintext -H "authorization: Bearer $TOKEN" -d \'{"page_size": 20}\' '
            "127.0.0.1:50051 drover.v1.ChangeService/ListChanges",
            world.ids,
        )
    )
    assert first["next_page_token"] == world.ids['"..."']
    second = world.json(command)
    seen = [c["id"] for c in first["changes"]] + [c["id"] for c in second["changes"]]
    assert len(second["changes"]) >= 1 and len(seen) == len(set(seen)), seen


def first_page(answer: Any, ids: dict[str, str]) -> bool:
    ids['"..."'] = answer["next_page_token"]  # the next line of the page asks for the following page
    return len(answer["changes"]) == 20 and bool(answer["next_page_token"])


def retried_and_ended(client: Any, change_id: str) -> bool:
    """The Task ran again (`false` fails again, so its Change ends failed once more)."""
    retried = client.list_events(change_id=change_id, kind="task.retried")
    return (
        len(retried) == 1
        and len(client.list_runs(change_id=change_id, state="failed")) == 2
        and (client.get_change(change_id).status == "failed")
    )


AMENDMENT = """tasks:
  - key: later
    kind: test
    objective: after the asking
    command: ["true"]
    depends_on: [ask]
"""


def amends(key: str) -> Callable[[World, str], None]:
    """An amendment of the held Change (drover amend's file is more.yaml, next to .drover): the new
    Task waits for `ask`, and `change.amended` names it."""

    def check(world: World, command: str) -> None:
        (world.here / "more.yaml").write_text(AMENDMENT)

        def added(client: Any, ids: dict[str, str]) -> bool:
            tasks = {t.key: list(t.depends_on) for t in client.get_change(ids["held"]).tasks}
            events = client.list_events(change_id=ids["held"], kind="change.amended")
            return tasks.get(key) == ["ask"] and key in [k for e in events for k in e.data["tasks"]]

        then(added)(world, command)

    return check


RUNNING = {"RUN": "held_run", "CHANGE": "held", "C": "held", "R": "held_run", "run_...": "held_run"}
CHECKS: dict[str, tuple[dict[str, str], Callable[[World, str], None]]] = {
    # docs/cli.md, in its order
    "drover submit": ({}, prints("hello from the page", "succeeded")),
    "drover watch": ({}, prints("run.finished", "OK")),
    "drover changes": ({}, newest_of_the_project),
    "drover change": ({}, prints("{CHANGE}", "succeeded", "fix", "test")),
    "drover logs": ({"RUN": "test"}, prints("test_add", "OK")),
    "drover runs": ({"S": "succeeded_state"}, prints("{fix}", "{test}", absent=("{held_run}",))),
    "drover run": ({}, prints("run {fix}: succeeded", "result: success, 2 turns", "  add adds")),
    "drover agents": ({}, prints(AGENT, SPARE)),
    "drover notifications": ({}, prints("DELIVERY", "TARGET", "ATTEMPTS")),  # no [[notify]] target here: none
    "drover drain": ({}, then(lambda c, ids: next(a for a in c.list_agents() if a.name == SPARE).draining)),
    "drover undrain": ({}, then(lambda c, ids: not next(a for a in c.list_agents() if a.name == SPARE).draining)),
    "drover events": ({"ID": "zero"}, follows("run.started", "{fix}")),
    "drover events | head -1": ({}, one_line),
    "drover packet": ({}, prints("make add add")),
    "drover claims": ({"C": "held"}, prints("calc.py", "{held_run}")),
    "drover spend": ({}, prints("sonnet")),
    "drover usage": ({}, prints("change-usd:{CHANGE}")),
    "drover raise-budget": ({"CHANGE": "held"}, then(lambda c, ids: c.get_change(ids["held"]).budget_usd == 2.5)),
    "drover raise-meter": ({"USD": "fifty"}, then(lambda c, ids: c.get_usage("provider-usd:")[0].limit == 50_000_000)),
    "drover amend": ({"CHANGE": "held"}, amends("later")),
    "drover retry": ({}, then(lambda c, ids: retried_and_ended(c, ids["failed"]), "running")),
    "drover changesets": ({}, prints("drover/{CHANGE}/", "calc.py")),
    "drover patch": ({}, prints("a + b")),
    "drover cancel": ({"CHANGE": "cancel"}, then(lambda c, ids: c.get_change(ids["cancel"]).status == "cancelled")),
    "drover cancel-run": (
        {"RUN": "cancel_run"},
        then(lambda c, ids: c.get_run(ids["cancel_run"]).state == "cancelled"),
    ),
    "drover say": (RUNNING, reaches_the_session(reply())),
    "drover questions": (RUNNING, prints(*QUESTIONS)),
    "drover answer": ({"QUESTION": "q1", "q_...": "q2"}, reaches_the_session(reply(), "Answer to your question")),
    "drover interrupt": (RUNNING, reaches_the_session(reply())),
    # docs/operations.md's grpcurl lines, by method
    "list": ({}, prints("drover.v1.AgentService", "drover.v1.ChangeService", "drover.v1.OperationsService")),
    "Check": ({}, prints("SERVING")),
    "ListAgents": ({}, prints(AGENT, SPARE)),
    "DrainAgent": ({}, then(lambda c, ids: next(a for a in c.list_agents() if a.name == SPARE).draining)),
    "ListRuns": (
        {},
        grpc_json(
            lambda a, ids: (
                {r["state"] for r in a["runs"]} == {"running"} and ids["held_run"] in [r["id"] for r in a["runs"]]
            )
        ),
    ),
    "GetRun": ({}, grpc_json(lambda a, ids: a["id"] == ids["fix"] and a["state"] == "succeeded")),
    "CancelRun": ({"run_...": "stuck"}, then(lambda c, ids: c.get_run(ids["stuck"]).state == "cancelled")),
    "TailRunLogs": ({"run_...": "test"}, prints("OK")),
    "ListEvents": (
        {},
        grpc_json(lambda a, ids: 0 < len(a["events"]) <= 50 and all(e["kind"].startswith("run.") for e in a["events"])),
    ),
    "WatchChange": ({}, prints('"change.finished"', '"status": "succeeded"')),
    "ListChangeSets": (
        {},
        grpc_json(lambda a, ids: a["changesets"][0]["branch"].startswith(f"drover/{ids['CHANGE']}/")),
    ),
    "GetPatch": ({}, prints("a + b")),
    "RaiseBudget": ({"chg_...": "held"}, then(lambda c, ids: c.get_change(ids["held"]).budget_usd == 5)),
    "RetryTask": ({}, then(lambda c, ids: retried_and_ended(c, ids["stopped"]), '"status": "running"')),
    "AmendChange": ({"chg_...": "held"}, amends("recheck")),
    "RaiseMeter": ({}, grpc_json(lambda a, ids: a["key"].startswith("provider-usd:") and a["limit"] == "100000000")),
    "GetSpend": ({}, prints("sonnet")),
    "GetUsage": ({}, grpc_json(lambda a, ids: all(m["key"].startswith("provider-usd:") for m in a["meters"]))),
    "ListReceipts": ({}, grpc_json(lambda a, ids: ids["fix"] in [r["run_id"] for r in a["receipts"]])),
    "ListClaims": ({}, grpc_json(lambda a, ids: ids["held_run"] in [c["run_id"] for c in a["claims"]])),
    "GetPacket": ({}, prints("make add add")),
    "SendInput": (RUNNING, reaches_the_session(reply())),
    "ListChanges": ({}, grpc_json(first_page)),
    "ListChanges page_token": ({}, pages_of_changes),
    "ListChanges status": ({}, grpc_json(lambda a, ids: [c["id"] for c in a["changes"]] == [ids["failed"]])),
    # docs/runtimes.md's grpcurl lines
    "ListInputs": (RUNNING, grpc_json(lambda a, ids: len(a["inputs"]) >= 5)),
    "ListQuestions": ({}, grpc_json(lambda a, ids: [q["id"] for q in a["questions"]] == [ids["q3"]])),
    "AnswerQuestion": ({"q_...": "q3"}, reaches_the_session(fake.tool_use("complete_task", {"summary": "asked"}))),
}


def test_the_fake_messages_api_runs_on_its_own(tmp_path: pathlib.Path) -> None:
    """docs/development.md: the fake as a process with the page's script (port 0 for 8099: any free port)."""
    text = (ROOT / "docs" / "development.md").read_text()
    prose = " ".join(text.split())
    assert FAKE_ON_ITS_OWN in prose
    shown = re.search(r"`(\{\"step\": \"tool_use\".*?\})`", prose)
    assert shown, "docs/development.md no longer shows a script step"
    step = json.loads(shown.group(1))
    (tmp_path / "script.json").write_text(json.dumps([step]))
    argv = [sys.executable if w == "python" else w for w in FAKE_ON_ITS_OWN.replace("8099", "0").split()]
    proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = re.search(r"listening on (http://127\.0\.0\.1:\d+)", proc.stdout.readline())
        assert url, "the fake did not say where it listens"
        import anthropic

        client = anthropic.Anthropic(base_url=url.group(1), api_key="any")
        answer = client.messages.create(
            model="claude-sonnet-4-5", max_tokens=100, messages=[{"role": "user", "content": "go"}]
        )
        (use,) = [block for block in answer.content if block.type == "tool_use"]
        assert (use.name, use.input) == ("complete_task", {"summary": "done"})
    finally:
        proc.terminate()
        proc.wait(10)
