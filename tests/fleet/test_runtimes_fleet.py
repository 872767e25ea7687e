"""External runtimes through real agentd runs: Claude Code (npm, run offline) works a Task in its
sandbox, every model call through the run's gateway, and what it leaves becomes the ChangeSet."""

from __future__ import annotations

import json
import pathlib
import time

import pygit2
import pytest

from drover import Client
from drover.errors import FailedPrecondition, NotFound, PermissionDenied
from drover.models import Question, Run
from drover.testing import fake_anthropic as fake
from drover.testing import runtimes
from tests.conftest import API_KEY, Fleet, holds, wait_for


@pytest.fixture(scope="module")
def claude() -> str:
    return runtimes.executable("claude")


def start(fleet: Fleet, model: fake.FakeAnthropic, repo: pathlib.Path, claude: str, *plane_args: str) -> None:
    fleet.plane.extra_env.update(ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=API_KEY)
    fleet.start_plane(*plane_args)
    fleet.plane.add_project("calc", str(repo))
    fleet.agent("worker", extra=("--claude-command", claude))


def task(key: str, runtime: str = "claude-code") -> dict:
    # medium complexity routes to sonnet by rule, so no classifier call takes a scripted reply
    return {"key": key, "kind": "implement", "objective": f"do {key}", "complexity": "medium", "runtime": runtime}


def events(client: Client, run_id: str) -> list[dict]:
    return [json.loads(line) for ln in client.run_logs(run_id) if ln.stream == "event" for line in ln.text.splitlines()]


def test_a_claude_code_task_works_in_its_sandbox_through_the_gateway_and_leaves_a_changeset(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path, claude: str
) -> None:
    model.extend(
        [
            fake.tool_use("Bash", {"command": "env > seen.env; echo 42 > answer.txt", "description": "write"}),
            fake.text("Wrote answer.txt."),
        ]
    )
    start(fleet, model, calc_repo, claude)
    with fleet.plane.client() as client:
        change = client.submit_change("calc", "an answer", [task("answer")])
        list(client.watch(change.id))
        final = client.get_change(change.id)
        run = client.get_run(final.tasks[0].latest_run_id)
        seen = events(client, run.id)
        sets = client.list_changesets(change.id)
        patch = client.get_patch(sets[0].id) if sets else ""
    assert final.status == "succeeded", (final, run)
    assert final.tasks[0].runtime == "claude-code" and run.driver == "claude-code"
    assert [e["kind"] for e in seen if e["kind"] != "session"] == ["tool_use", "tool_result", "text", "result"]
    assert seen[0]["tool"] == "Bash" and seen[-2]["text"] == "Wrote answer.txt."
    assert seen[-1]["kind"] == "session" and seen[-1]["success"] and seen[-1]["model_calls"] == 2
    # The session's result (Claude Code's own final `result` message) is kept on the run.
    assert run.has_result and run.result_success and run.result_text == "Wrote answer.txt."
    assert run.result_turns == 1 and run.result_cost_micros == round(seen[-1]["cost_usd"] * 1_000_000)
    assert sorted(sets[0].own_files) == ["answer.txt", "seen.env"]
    # The runtime knew only the gateway and its run token; the provider's key stayed in the gateway.
    assert API_KEY not in patch
    assert "ANTHROPIC_BASE_URL=http://127.0.0.1:8421" in patch and "ANTHROPIC_API_KEY=" in patch
    # Every call reached the provider with the real key and the routed model, whatever Claude asked for.
    assert len(model.requests) == 2
    assert {r.headers.get("x-api-key") for r in model.requests} == {API_KEY}
    assert {r.body["model"] for r in model.requests} == {run.model}


def test_a_budget_refusal_stops_a_claude_code_session_before_the_provider_is_called(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path, claude: str
) -> None:
    model.extend([fake.text("never asked")])
    start(fleet, model, calc_repo, claude)
    with fleet.plane.client() as client:
        change = client.submit_change("calc", "too dear", [task("dear")], budget_usd=0.0001)
        list(client.watch(change.id))
        final = client.get_change(change.id)
        run = client.get_run(final.tasks[0].latest_run_id)
        seen = events(client, run.id)
    assert final.status == "budget_blocked", (final, run)
    assert run.state == "failed" and run.reason == "change_budget"
    assert seen[-1]["kind"] == "session" and not seen[-1]["success"]
    assert model.requests == []  # the refused call never reached the provider


def running_tool(client: Client, change_id: str, timeout: float = 60) -> str:
    """The run of the Change's only Task, once its session has started a tool."""

    def started() -> str:
        task = client.get_change(change_id).tasks[0]
        if task.latest_run_id and any(e["kind"] == "tool_use" for e in events(client, task.latest_run_id)):
            return task.latest_run_id
        return ""

    return wait_for(started, timeout, what="the session to start a tool")


def test_a_message_sent_during_a_turn_starts_the_next_turn(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path, claude: str
) -> None:
    model.extend(
        [
            fake.tool_use("Bash", {"command": "sleep 4; echo one > one.txt", "description": "one"}),
            fake.text("One written."),
            fake.tool_use("Bash", {"command": "echo two > two.txt", "description": "two"}),
            fake.text("Two written."),
        ]
    )
    start(fleet, model, calc_repo, claude)
    with fleet.plane.client() as client:
        change = client.submit_change("calc", "two files", [task("files")])
        run_id = running_tool(client, change.id)
        sent = client.send_input(run_id, "message", "Now write two.txt as well.")
        list(client.watch(change.id))
        final = client.get_change(change.id)
        seen = events(client, run_id)
        inputs = client.list_inputs(run_id)
        files = client.list_changesets(change.id)[0].own_files
    assert final.status == "succeeded"
    assert (sent.seq, sent.kind, sent.state) == (1, "message", "sent")
    assert [(i.seq, i.state) for i in inputs] == [(1, "received")]
    kinds = [e["kind"] for e in seen]
    assert kinds.count("result") == 2 and kinds.index("user") == kinds.index("result") + 1  # after the first turn
    assert next(e for e in seen if e["kind"] == "user")["text"] == "Now write two.txt as well."
    assert seen[-1]["kind"] == "session" and seen[-1]["turns"] == 2 and seen[-1]["summary"] == "Two written."
    assert sorted(files) == ["one.txt", "two.txt"]
    # The second turn's request carried the message as the user's.
    assert "Now write two.txt as well." in json.dumps(model.requests[2].body["messages"][-1])


def test_an_interrupt_without_text_stops_the_turn_and_fails_the_run(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path, claude: str
) -> None:
    model.extend([fake.tool_use("Bash", {"command": "sleep 120", "description": "wait"}), fake.text("never")])
    start(fleet, model, calc_repo, claude)
    with fleet.plane.client() as client:
        change = client.submit_change("calc", "stop me", [task("long")])
        run_id = running_tool(client, change.id)
        began = time.monotonic()
        client.send_input(run_id, "interrupt")
        list(client.watch(change.id))
        took = time.monotonic() - began
        run = client.get_run(run_id)
        seen = events(client, run_id)
    assert run.state == "failed" and run.reason == "session_failed", run
    assert took < 60  # not the tool's two minutes
    result = next(e for e in seen if e["kind"] == "result")
    assert result["error"] is True
    assert next(e for e in seen if e["kind"] == "tool_result")["error"] is True  # the running tool was rejected
    with fleet.plane.client() as client, pytest.raises(FailedPrecondition):
        client.send_input(run_id, "message", "too late")


def test_input_sent_while_agentd_is_down_reaches_the_session_after_it_restarts(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path, claude: str
) -> None:
    model.extend(
        [
            fake.tool_use("Bash", {"command": "sleep 8; echo one > one.txt", "description": "one"}),
            fake.text("One written."),
            fake.text("Heard you."),
        ]
    )
    start(fleet, model, calc_repo, claude)
    agent = fleet.agents[0]
    with fleet.plane.client() as client:
        change = client.submit_change("calc", "survive", [task("survive")])
        run_id = running_tool(client, change.id)
        agent.kill9()  # the supervisor and the session go on
        client.send_input(run_id, "message", "Still there?")
        agent.start()
        list(client.watch(change.id))
        final = client.get_change(change.id)
        seen = events(client, run_id)
    assert final.status == "succeeded", final
    assert [e["text"] for e in seen if e["kind"] == "user"] == ["Still there?"]  # delivered, exactly once
    assert seen[-1]["turns"] == 2 and seen[-1]["summary"] == "Heard you."


def test_an_opencode_task_works_in_its_sandbox_through_the_gateway_and_leaves_a_changeset(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path
) -> None:
    model.extend(
        [
            fake.tool_use("bash", {"command": "env > seen.env; echo 42 > answer.txt", "description": "write"}),
            fake.text("Wrote answer.txt."),
        ]
    )
    fleet.plane.extra_env.update(ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=API_KEY)
    fleet.start_plane()
    fleet.plane.add_project("calc", str(calc_repo))
    fleet.agent("worker", extra=("--opencode-command", runtimes.executable("opencode")))
    with fleet.plane.client() as client:
        change = client.submit_change("calc", "an answer", [task("answer", runtime="opencode")])
        list(client.watch(change.id))
        final = client.get_change(change.id)
        run = client.get_run(final.tasks[0].latest_run_id)
        seen = events(client, run.id)
        sets = client.list_changesets(change.id)
        patch = client.get_patch(sets[0].id) if sets else ""
    assert final.status == "succeeded", (final, run)
    assert run.driver == "opencode"
    assert [e["kind"] for e in seen if e["kind"] != "session"] == ["tool_use", "tool_result", "text", "result"]
    assert seen[0]["tool"] == "bash" and seen[-1]["success"] and seen[-1]["model_calls"] == 2
    assert sorted(sets[0].own_files) == ["answer.txt", "seen.env"]
    assert API_KEY not in patch and "DROVER_RUN_TOKEN=" in patch
    assert {r.headers.get("x-api-key") for r in model.requests} == {API_KEY}
    assert {r.body["model"] for r in model.requests} == {run.model}


def user_token(fleet: Fleet, name: str, role: str, project: str) -> str:
    made = fleet.plane.cli("token", "create", "--kind", "user", "--name", name, "--role", role, "--project", project)
    return made.stdout.strip().splitlines()[-1]


def open_question(client: Client, change_id: str, timeout: float = 60) -> Question:
    return wait_for(
        lambda: next(iter(client.list_questions(change_id=change_id, open_only=True)), None),
        timeout,
        what="the session to ask a question",
    )


def test_a_harness_question_holds_the_run_until_it_is_answered(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path, claude: str
) -> None:
    model.extend(
        [
            fake.tool_use("ask_question", {"question": "Which port should the server use?"}),
            fake.text("I will wait for the answer."),  # the turn ends without a tool: held, not no_outcome
            fake.tool_use("complete_task", {"summary": "uses the port given"}),
        ]
    )
    start(fleet, model, calc_repo, claude)
    with fleet.plane.client() as client:
        change = client.submit_change("calc", "a port", [task("port", runtime="harness")])
        asked = open_question(client, change.id)
        wait_for(lambda: len(model.requests) == 2, 30, what="the turn after the question")
        holds(lambda: len(model.requests) == 2, 1.5, what="no model call while the question is open")
        held = client.get_run(asked.run_id)
        fleet.plane.add_project("other")
        with (
            Client(fleet.plane.target, token=user_token(fleet, "mallory", "submit", "calc")) as mallory,
            Client(fleet.plane.target, token=user_token(fleet, "olga", "run.manage", "other")) as olga,
        ):
            with pytest.raises(PermissionDenied, match=r"run\.manage"):  # not her Change
                mallory.answer_question(asked.id, "9090")
            with pytest.raises(NotFound):  # not her project
                olga.answer_question(asked.id, "9090")
            assert olga.list_questions() == []
        answered = client.answer_question(asked.id, "8080")
        with pytest.raises(FailedPrecondition, match="answered already"):
            client.answer_question(asked.id, "8081")
        list(client.watch(change.id))
        final = client.get_change(change.id)
        seen = events(client, asked.run_id)
        after = client.list_questions(change_id=change.id)
    assert (asked.text, asked.blocking, asked.task_key) == ("Which port should the server use?", True, "port")
    assert held.state == "running" and len(model.requests) == 3  # it waited for the answer
    assert answered.state == "answered" and [q.state for q in after] == ["answered"] and after[0].answer == "8080"
    assert final.status == "succeeded", final
    assert [e["kind"] for e in seen if e["kind"] in ("question", "user")] == ["question", "user"]
    last = model.requests[2].body["messages"][-1]["content"][-1]["text"]
    assert last.endswith("Answer to your question (Which port should the server use?):\n8080")


def test_a_claude_code_question_through_its_mcp_server_holds_the_session_until_answered(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path, claude: str
) -> None:
    model.extend(
        [
            fake.tool_use("mcp__drover__ask_question", {"question": "Tabs or spaces?"}),
            fake.text("Waiting for the answer."),
            fake.text("Spaces it is; done."),
        ]
    )
    start(fleet, model, calc_repo, claude)
    with fleet.plane.client() as client:
        change = client.submit_change("calc", "style", [task("style")])
        asked = open_question(client, change.id)
        wait_for(lambda: len(model.requests) == 2, 30, what="the turn after the question")
        holds(lambda: len(model.requests) == 2, 1.5, what="no model call while the question is open")
        held = client.get_run(asked.run_id)
        client.answer_question(asked.id, "Spaces.")
        list(client.watch(change.id))
        final = client.get_change(change.id)
        seen = events(client, asked.run_id)
    assert asked.text == "Tabs or spaces?" and held.state == "running"
    assert final.status == "succeeded", final
    assert any(t["name"] == "mcp__drover__ask_question" for t in model.requests[0].body["tools"])
    assert [e["text"] for e in seen if e["kind"] == "user"] == ["Answer to your question (Tabs or spaces?):\nSpaces."]
    assert seen[-1]["turns"] == 2 and seen[-1]["summary"] == "Spaces it is; done."


def test_an_opencode_question_through_its_mcp_server_holds_the_session_until_answered(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path
) -> None:
    model.extend(
        [
            fake.tool_use("drover_ask_question", {"question": "Which database?"}),
            fake.text("Waiting for the answer."),
            fake.text("PostgreSQL; done."),
        ]
    )
    fleet.plane.extra_env.update(ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=API_KEY)
    fleet.start_plane()
    fleet.plane.add_project("calc", str(calc_repo))
    fleet.agent("worker", extra=("--opencode-command", runtimes.executable("opencode")))
    with fleet.plane.client() as client:
        change = client.submit_change("calc", "a database", [task("db", runtime="opencode")])
        asked = open_question(client, change.id)
        wait_for(lambda: len(model.requests) == 2, 30, what="the turn after the question")
        holds(lambda: len(model.requests) == 2, 1.5, what="no model call while the question is open")
        held = client.get_run(asked.run_id)
        client.answer_question(asked.id, "PostgreSQL.")
        list(client.watch(change.id))
        final = client.get_change(change.id)
        seen = events(client, asked.run_id)
    assert asked.text == "Which database?" and held.state == "running"
    assert final.status == "succeeded", final
    assert [e["text"] for e in seen if e["kind"] == "user"] == [
        "Answer to your question (Which database?):\nPostgreSQL."
    ]
    assert seen[-1]["turns"] == 2 and seen[-1]["summary"] == "PostgreSQL; done."


def parked_run(client: Client, change_id: str, timeout: float = 60) -> Run:
    def parked() -> Run | None:
        task = client.get_change(change_id).tasks[0]
        return client.get_run(task.latest_run_id) if task.status == "parked" else None

    return wait_for(parked, timeout, what="the held session to be parked")


def start_parking(fleet: Fleet, model: fake.FakeAnthropic, repo: pathlib.Path, *agent_args: str) -> None:
    fleet.plane.extra_env.update(ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=API_KEY)
    fleet.start_plane()
    fleet.plane.cli("project", "add", "calc", "--repo", str(repo), "--answer-window-minutes", "0.02")  # 1.2 s
    fleet.agent("worker", extra=agent_args)


def test_a_claude_code_session_held_too_long_is_parked_and_its_answer_resumes_the_same_session(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path, claude: str
) -> None:
    model.extend(
        [
            fake.tool_use("Bash", {"command": "echo draft > draft.txt", "description": "draft"}),
            fake.tool_use("mcp__drover__ask_question", {"question": "Which name?"}),
            fake.text("Waiting for the answer."),
            fake.tool_use("Bash", {"command": "echo final > final.txt", "description": "final"}),
            fake.text("Named it; done."),
        ]
    )
    start_parking(fleet, model, calc_repo, "--claude-command", claude)
    with fleet.plane.client() as client:
        change = client.submit_change("calc", "a name", [task("name")])
        first = parked_run(client, change.id)
        parked_events = events(client, first.id)
        asked = client.list_questions(change_id=change.id)[0]
        client.answer_question(asked.id, "Call it drover.")
        list(client.watch(change.id))
        final = client.get_change(change.id)
        second = client.get_run(final.tasks[0].latest_run_id)
        resumed_events = events(client, second.id)
        files = client.list_changesets(change.id)[0].own_files
    assert (first.state, first.reason) == ("succeeded", "parked")
    assert final.status == "succeeded" and second.id != first.id, final
    assert sorted(files) == ["draft.txt", "final.txt"]  # the parked WIP and the resumed work, one ChangeSet
    origin = pygit2.Repository(str(calc_repo))
    branch = origin.branches[f"drover/{change.id}/{final.tasks[0].id}"]
    messages = [c.message.strip() for c in origin.walk(branch.target)][:2]
    assert messages[1] == "WIP: parked while waiting for answers"
    # The resumed run went on with the parked session (same id, its transcript restored).
    parked_session = next(e for e in parked_events if e["kind"] == "session")
    assert parked_session["parked"] and parked_session["session_id"]
    assert next(e["session_id"] for e in resumed_events if e["kind"] == "session") == parked_session["session_id"]
    assert "Which name?" in json.dumps(model.requests[3].body["messages"])
    assert "A: Call it drover." in json.dumps(model.requests[3].body["messages"][-1])
    assert resumed_events[-1]["summary"] == "Named it; done."


def test_a_harness_run_held_too_long_is_parked_and_resumed_from_its_transcript(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path
) -> None:
    model.extend(
        [
            fake.tool_use("write_file", {"path": "draft.txt", "content": "draft\n"}),
            fake.tool_use("ask_question", {"question": "Keep the draft?"}),
            fake.text("Waiting for the answer."),
            fake.tool_use("complete_task", {"summary": "kept the draft"}),
        ]
    )
    start_parking(fleet, model, calc_repo)
    with fleet.plane.client() as client:
        change = client.submit_change("calc", "a draft", [task("draft", runtime="harness")])
        first = parked_run(client, change.id)
        asked = client.list_questions(change_id=change.id)[0]
        client.answer_question(asked.id, "Yes.")
        list(client.watch(change.id))
        final = client.get_change(change.id)
        files = client.list_changesets(change.id)[0].own_files
    assert (first.state, first.reason) == ("succeeded", "parked")
    assert final.status == "succeeded", final
    assert list(files) == ["draft.txt"]
    resumed = json.dumps(model.requests[3].body["messages"])
    assert "Keep the draft?" in resumed and "A: Yes." in resumed  # the transcript, then the answers


def test_a_parked_opencode_session_is_resumed_as_a_new_session_with_the_answers_in_its_prompt(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path
) -> None:
    model.extend(
        [
            fake.tool_use("bash", {"command": "echo draft > draft.txt", "description": "draft"}),
            fake.tool_use("drover_ask_question", {"question": "Keep it short?"}),
            fake.text("Waiting for the answer."),
            fake.text("Kept it short; done."),
        ]
    )
    start_parking(fleet, model, calc_repo, "--opencode-command", runtimes.executable("opencode"))
    with fleet.plane.client() as client:
        change = client.submit_change("calc", "short", [task("short", runtime="opencode")])
        first = parked_run(client, change.id)
        client.answer_question(client.list_questions(change_id=change.id)[0].id, "Yes, short.")
        list(client.watch(change.id))
        final = client.get_change(change.id)
        files = client.list_changesets(change.id)[0].own_files
    assert first.reason == "parked" and final.status == "succeeded", final
    assert list(files) == ["draft.txt"]  # the parked WIP carried into the new session's workspace
    prompt = json.dumps(model.requests[3].body["messages"][0])
    assert "do short" in prompt and "Q: Keep it short?" in prompt and "A: Yes, short." in prompt


def test_a_task_whose_runtime_no_agent_offers_waits_and_says_why(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path
) -> None:
    fleet.plane.extra_env.update(ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=API_KEY)
    fleet.start_plane()
    fleet.plane.add_project("calc", str(calc_repo))
    fleet.agent("worker", extra=("--claude-command", "/nonexistent/claude"))  # offers command and harness only
    with fleet.plane.client() as client:
        change = client.submit_change("calc", "waits", [task("waits")])
        notices = wait_for(lambda: client.get_change(change.id).notices, 30, what="a notice")
        agents = client.list_agents()
        run = client.get_run(client.get_change(change.id).tasks[0].latest_run_id)
    assert run.state == "queued" and model.requests == []
    assert sorted(agents[0].drivers) == ["command", "harness"]
    assert notices == [
        "no connected agent of pool default offers runtime claude-code (agentd --claude-command): "
        "its runs wait until one does"
    ]


def test_a_held_harness_run_stays_held_after_agentd_and_its_supervisor_are_killed(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path, claude: str
) -> None:
    model.extend(
        [
            fake.tool_use("ask_question", {"question": "Which port?"}),
            fake.text("Waiting for the answer."),
            fake.tool_use("complete_task", {"summary": "port set"}),
        ]
    )
    start(fleet, model, calc_repo, claude)
    agent = fleet.agents[0]
    with fleet.plane.client() as client:
        change = client.submit_change("calc", "a port", [task("port", runtime="harness")])
        asked = open_question(client, change.id)
        # Held once the reply that ends the turn is in the transcript (its event follows the write): a
        # kill between the model's answer and that write would lose the reply, and the resumed harness
        # would rightly ask the model again.
        wait_for(
            lambda: any(
                "Waiting for the answer." in line.text
                for line in client.run_logs(asked.run_id)
                if line.stream == "event"
            ),
            30,
            what="the turn after the question, in the transcript",
        )
        agent.kill9()
        fleet.stop_supervisors()  # the machine went down while the run waited for its answer
        agent.start()
        wait_for(lambda: "resuming its harness" in agent.log(), 30, what="the harness to resume")
        holds(lambda: len(model.requests) == 2, 3, what="no model call from the resumed, held run")
        calls_while_held = len(model.requests)
        client.answer_question(asked.id, "8080")
        list(client.watch(change.id))
        final = client.get_change(change.id)
    assert calls_while_held == 2  # resumed held: no model call until the answer
    assert final.status == "succeeded", final
    assert model.requests[2].body["messages"][-1]["content"][-1]["text"].endswith("(Which port?):\n8080")
