"""The opencode session driver with the real `opencode acp` (npm opencode-ai, pinned in drover.testing.runtimes)
against the scripted fake Messages API: a turn that writes a file, a queued message that makes a second turn,
an interrupt that stops a hanging turn (ending the session, or with a message that becomes the next turn), and a
program that is not opencode at all."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import subprocess
import time
from typing import Any

import pytest

from agentd.drivers.runtimes import SessionContext, SessionResult
from agentd.drivers.runtimes.opencode import Opencode
from agentd.run.session_input import Input
from drover.testing import runtimes
from drover.testing.fake_anthropic import FakeAnthropic, stall, text, tool_use

pytestmark = pytest.mark.timeout(60)
TOKEN = "drover-run-token-3f9a"
MODEL = "claude-drover-test-1"
INSTRUCTIONS = "Standing instruction: keep every answer short."


def context(tmp_path: pathlib.Path, fake: FakeAnthropic, prompt: str = "Create hello.txt.") -> SessionContext:
    workspace = tmp_path / "repo"
    workspace.mkdir()
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    home = tmp_path / "home"
    home.mkdir()
    return SessionContext(
        executable=runtimes.executable("opencode"),
        workspace=workspace,
        home=home,
        model=MODEL,
        base_url=fake.base_url,
        token=TOKEN,
        instructions=INSTRUCTIONS,
        prompt=prompt,
    )


async def start(session: Opencode, ctx: SessionContext, argv: list[str] | None = None) -> asyncio.subprocess.Process:
    session.setup(ctx)
    env = {"PATH": os.environ["PATH"], "HOME": str(ctx.home), "LANG": "C.UTF-8", "TZ": "UTC", **session.env(ctx)}
    return await asyncio.create_subprocess_exec(
        *(argv or session.argv(ctx)),
        cwd=ctx.workspace,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def run(
    ctx: SessionContext, inputs: asyncio.Queue[Input] | None = None, argv: list[str] | None = None
) -> tuple[SessionResult, list[dict[str, Any]], asyncio.subprocess.Process]:
    session = Opencode()
    process = await start(session, ctx, argv)
    assert process.stderr is not None
    stderr = asyncio.ensure_future(process.stderr.read())  # the supervisor's part: the driver leaves stderr alone
    events: list[dict[str, Any]] = []
    result = await session.drive(process, ctx, events.append, inputs or asyncio.Queue())
    await stderr
    return result, events, process


def system_text(body: dict[str, Any]) -> str:
    system = body.get("system") or []
    return system if isinstance(system, str) else "".join(block.get("text", "") for block in system)


async def test_a_turn_writes_a_file_with_opencodes_write_tool(tmp_path: pathlib.Path) -> None:
    with FakeAnthropic() as fake:
        ctx = context(tmp_path, fake)
        target = ctx.workspace / "hello.txt"
        fake.extend(
            [
                tool_use("write", {"filePath": str(target), "content": "Hello from opencode\n"}, text="Writing it."),
                text("I wrote hello.txt."),
            ]
        )
        result, events, process = await run(ctx)
        requests = fake.requests

    assert target.read_text() == "Hello from opencode\n"
    assert [e["kind"] for e in events] == ["text", "tool_use", "tool_result", "text", "result"]
    assert events[0] == {"kind": "text", "text": "Writing it."}
    assert events[1] == {
        "kind": "tool_use",
        "tool": "write",
        "input": {"filePath": str(target), "content": "Hello from opencode\n"},
    }
    assert events[2]["tool"] == "write" and events[2]["error"] is False
    assert "Wrote file successfully" in events[2]["text"]
    assert events[-1] == {"kind": "result", "text": "I wrote hello.txt.", "error": False}
    assert result.success is True, result.error
    assert (result.summary, result.turns, result.error) == ("I wrote hello.txt.", 1, "")
    assert result.session_id.startswith("ses_")
    assert process.returncode is not None  # the session ended the program

    # Every model call went to the gateway with the run token and the routed model; no title-generation call.
    assert len(requests) == 2
    for request in requests:
        assert request.path == "/v1/messages"
        key = request.headers.get("x-api-key") or request.headers.get("authorization", "").removeprefix("Bearer ")
        assert key == TOKEN
        assert request.body["model"] == MODEL
    assert "write" in [tool["name"] for tool in requests[0].body["tools"]]
    assert INSTRUCTIONS in system_text(requests[0].body)
    # The token is read from the environment: it is not written into $HOME.
    config = ctx.home / ".config" / "opencode" / "opencode.json"
    assert TOKEN not in config.read_text()
    assert json.loads(config.read_text())["model"] == f"anthropic/{MODEL}"


async def test_a_queued_message_is_delivered_after_the_turn(tmp_path: pathlib.Path) -> None:
    with FakeAnthropic([text("Hello."), text("Goodbye.")]) as fake:
        ctx = context(tmp_path, fake, prompt="Say hello.")
        inputs: asyncio.Queue[Input] = asyncio.Queue()
        inputs.put_nowait(Input("message", "Now say goodbye.", id="in-1"))
        result, events, _ = await run(ctx, inputs)
        requests = fake.requests

    assert events == [
        {"kind": "text", "text": "Hello."},
        {"kind": "result", "text": "Hello.", "error": False},
        {"kind": "user", "text": "Now say goodbye."},
        {"kind": "text", "text": "Goodbye."},
        {"kind": "result", "text": "Goodbye.", "error": False},
    ]
    assert result.success is True, result.error
    assert (result.turns, result.summary) == (2, "Goodbye.")
    assert len(requests) == 2
    assert "Now say goodbye." in json.dumps(requests[1].body["messages"][-1])
    assert inputs.empty()


async def test_an_interrupt_stops_a_hanging_turn_and_ends_the_session(tmp_path: pathlib.Path) -> None:
    with FakeAnthropic() as fake:
        ctx = context(tmp_path, fake, prompt="Run the slow thing.")
        fake.extend([tool_use("bash", {"command": "echo ran > ran.txt", "description": "Mark"}), stall(30)])
        inputs: asyncio.Queue[Input] = asyncio.Queue()
        interrupted_at: list[float] = []

        async def interrupt_when_the_model_hangs() -> None:
            while len(fake.requests) < 2:  # the second model call is the stalled one
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)
            interrupted_at.append(time.monotonic())
            inputs.put_nowait(Input("interrupt"))

        interrupter = asyncio.create_task(interrupt_when_the_model_hangs())
        result, events, process = await run(ctx, inputs)
        ended_at = time.monotonic()
        interrupter.cancel()

    assert interrupted_at, "the interrupt was never sent"
    assert ended_at - interrupted_at[0] < 10
    assert (ctx.workspace / "ran.txt").read_text() == "ran\n"
    assert [e["kind"] for e in events] == ["tool_use", "tool_result", "result"]
    assert events[0]["tool"] == "bash" and events[0]["input"]["command"] == "echo ran > ran.txt"
    assert events[-1]["error"] is True
    assert result.success is False
    assert result.error == "interrupted"
    assert result.turns == 1
    assert process.returncode is not None


async def test_an_interrupt_with_text_stops_the_turn_and_becomes_the_next_message(tmp_path: pathlib.Path) -> None:
    with FakeAnthropic([stall(30), text("Plan B is done.")]) as fake:
        ctx = context(tmp_path, fake, prompt="Do plan A.")
        inputs: asyncio.Queue[Input] = asyncio.Queue()

        async def interrupt_when_the_model_hangs() -> None:
            while not fake.requests:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)
            inputs.put_nowait(Input("interrupt", "Do plan B instead."))

        interrupter = asyncio.create_task(interrupt_when_the_model_hangs())
        started = time.monotonic()
        result, events, _ = await run(ctx, inputs)
        elapsed = time.monotonic() - started
        interrupter.cancel()
        requests = fake.requests

    assert elapsed < 25  # not the 30 s the first model call hangs
    assert [e["kind"] for e in events] == ["result", "user", "text", "result"]
    assert events[0]["error"] is True
    assert events[1] == {"kind": "user", "text": "Do plan B instead."}
    assert events[-1] == {"kind": "result", "text": "Plan B is done.", "error": False}
    assert result.success is True, result.error
    assert (result.turns, result.summary) == (2, "Plan B is done.")
    assert "Do plan B instead." in json.dumps(requests[-1].body["messages"][-1])


@pytest.mark.parametrize(
    ("program", "says"),
    [
        ("print('garbage')", ["not JSON-RPC", "garbage"]),
        ("import sys; sys.stderr.write('opencode: config is broken\\n'); sys.exit(3)", ["exited with code 3"]),
    ],
    ids=["garbage", "crash"],
)
async def test_a_program_that_is_not_opencode_fails_the_session(
    tmp_path: pathlib.Path, program: str, says: list[str]
) -> None:
    with FakeAnthropic() as fake:
        ctx = context(tmp_path, fake)
        result, events, process = await run(ctx, argv=["python3", "-c", program])
        requests = fake.requests

    assert result.success is False
    for words in says:
        assert words in result.error
    assert (result.turns, events, requests) == (0, [], [])
    assert process.returncode is not None
