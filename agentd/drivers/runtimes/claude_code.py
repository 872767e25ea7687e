"""Claude Code as a session (seed 003 "Claude Code"): `claude -p --input-format stream-json
--output-format stream-json --verbose --permission-mode bypassPermissions` in the workspace.

Everything it gets lives in $HOME, outside the repository: `.claude/CLAUDE.md` (the standing
instructions) and `.claude/settings.json`. Its API is the run's model gateway (ANTHROPIC_BASE_URL)
with the run token as its API key. Messages go in on stdin as stream-json `user` lines, one turn
each; an interrupt is a `control_request` of subtype `interrupt`. What it prints (one JSON object a
line: system, assistant, user, result) is normalised into run events by `events_of`."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
from typing import Any

from agentd.drivers.runtimes import Emit, SessionContext, SessionResult, clip, reasoning
from agentd.run import hostile
from agentd.run.session_input import Input

OFFLINE = {
    "IS_SANDBOX": "1",  # bypassPermissions as root is allowed only in a sandbox
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_NON_ESSENTIAL_MODEL_CALLS": "1",  # no title or summary calls through the gateway
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
}
SETTINGS = {"permissions": {"defaultMode": "bypassPermissions"}, "includeCoAuthoredBy": False}
MCP_CONFIG = ".drover-mcp.json"
END_GRACE_SECONDS = 10.0
"""After stdin closes, the program has this long to exit before it is stopped."""


def events_of(line: dict[str, Any], tools: dict[str, str]) -> list[dict[str, Any]]:
    """The run events one stream-json line stands for. `tools` maps tool_use ids to tool names across
    lines (a tool_result names only the id)."""
    kind = line.get("type")
    message = line.get("message") if isinstance(line.get("message"), dict) else {}
    content = message.get("content") if isinstance(message, dict) else None
    out: list[dict[str, Any]] = []
    if kind == "assistant" and isinstance(content, list):
        for block in content:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and block.get("text"):
                out.append({"kind": "text", "text": str(block["text"])})
            elif block.get("type") == "tool_use":
                name = str(block.get("name", ""))
                tools[str(block.get("id", ""))] = name
                out.append({"kind": "tool_use", "tool": name, "input": block.get("input") or {}})
    elif kind == "user" and isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                out.append(
                    {
                        "kind": "tool_result",
                        "tool": tools.get(str(block.get("tool_use_id", "")), ""),
                        "text": clip(_text(block.get("content"))),
                        "error": bool(block.get("is_error")),
                    }
                )
    elif kind == "result":
        out.append(
            {
                "kind": "result",
                "text": str(line.get("result") or (line.get("errors") or [""])[0] or line.get("subtype", "")),
                "error": bool(line.get("is_error")) or line.get("subtype") != "success",
            }
        )
    return out


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


def turn_result(line: dict[str, Any], turns: int, ending: bool, session_id: str) -> SessionResult:
    """The session's result as of a `result` line (an interrupt without text fails it)."""
    failed = bool(line.get("is_error")) or line.get("subtype") != "success"
    return SessionResult(
        success=not failed and not ending,
        summary=str(line.get("result") or ""),
        turns=turns,
        cost_usd=float(line.get("total_cost_usd") or 0.0),
        error="interrupted" if ending else (str(line.get("subtype")) if failed else ""),
        session_id=str(line.get("session_id") or session_id),
    )


def user_line(text: str) -> bytes:
    return (json.dumps({"type": "user", "message": {"role": "user", "content": text}}) + "\n").encode()


class ClaudeCode:
    name = "claude-code"

    def __init__(self) -> None:
        self._requests = itertools.count(1)
        self.session_id = ""

    def state(self, ctx: SessionContext) -> bytes | None:
        """The session's transcript, ~/.claude/projects/<the workspace>/<session id>.jsonl."""
        if not self.session_id:
            return None
        # the sandbox wrote ~/.claude: nothing in it is followed (a symlink could name a host file)
        name = f"{self.session_id}.jsonl"
        for folder in hostile.list_dir(ctx.home, ".claude/projects"):
            if name in hostile.list_dir(ctx.home, f".claude/projects/{folder}"):
                return hostile.read_regular(ctx.home, f".claude/projects/{folder}/{name}")
        return None

    def setup(self, ctx: SessionContext) -> None:
        claude = ctx.home / ".claude"
        claude.mkdir(parents=True, exist_ok=True)
        (claude / "CLAUDE.md").write_text(ctx.instructions)
        (claude / "settings.json").write_text(json.dumps(SETTINGS, indent=2) + "\n")
        if ctx.resume_session_id and ctx.resume_state:  # where claude --resume looks for the transcript
            folder = claude / "projects" / re.sub(r"[^A-Za-z0-9]", "-", str(ctx.workspace))
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{ctx.resume_session_id}.jsonl").write_bytes(ctx.resume_state)
        if ctx.mcp_command:  # in $HOME, not on the command line: the run token stays out of `ps`
            command, *args = ctx.mcp_command
            server = {"type": "stdio", "command": command, "args": args, "env": ctx.mcp_env()}
            (ctx.home / MCP_CONFIG).write_text(json.dumps({"mcpServers": {"drover": server}}, indent=2) + "\n")

    def argv(self, ctx: SessionContext) -> list[str]:
        argv = [
            ctx.executable,
            "-p",
            "--input-format",
            "stream-json",
            "--output-format",
            "stream-json",
            "--verbose",
            "--permission-mode",
            "bypassPermissions",
            "--model",
            ctx.model,
        ]
        argv += reasoning.claude_code_args(ctx.effort, ctx.thinking)
        if ctx.max_turns > 0:
            argv += ["--max-turns", str(ctx.max_turns)]
        if ctx.mcp_command:
            argv += ["--mcp-config", str(ctx.home / MCP_CONFIG)]
        if ctx.resume_session_id and ctx.resume_state:
            argv += ["--resume", ctx.resume_session_id]
        return argv

    def env(self, ctx: SessionContext) -> dict[str, str]:
        gateway = {"ANTHROPIC_BASE_URL": ctx.base_url, "ANTHROPIC_API_KEY": ctx.token}
        return {**OFFLINE, **reasoning.claude_code_env(ctx.effort), **gateway}

    async def drive(
        self, process: asyncio.subprocess.Process, ctx: SessionContext, emit: Emit, inputs: asyncio.Queue[Input]
    ) -> SessionResult:
        assert process.stdin is not None and process.stdout is not None
        result = SessionResult(success=False, error="the session reported nothing")
        tools: dict[str, str] = {}
        waiting: list[Input] = []  # messages that arrived during a turn, delivered in order after it
        idle = False  # between turns, held by an open blocking question
        ending = False  # an interrupt without text: the session ends after the stopped turn
        if not await self._send(process, user_line(ctx.prompt)):
            return await self._ended(process, result, "the session did not take its prompt")
        reading = asyncio.ensure_future(process.stdout.readline())
        getting = asyncio.ensure_future(inputs.get())
        try:
            while True:
                done, _ = await asyncio.wait({reading, getting}, return_when=asyncio.FIRST_COMPLETED)
                if getting in done:
                    item, getting = getting.result(), asyncio.ensure_future(inputs.get())
                    if idle:  # no turn under way: a message starts the next one now
                        if item.kind == "interrupt" and not item.text:
                            result.success, result.error = False, "interrupted"
                            return await self._ended(process, result, "")
                        idle = False
                        if not await self._deliver(process, item, emit):
                            return await self._ended(process, result, "the session did not take the next message")
                        continue
                    ending = await self._during_turn(process, item, waiting) or ending
                    continue
                raw, reading = reading.result(), asyncio.ensure_future(process.stdout.readline())
                if not raw:  # the program exited (or closed its output) before its turn ended
                    return await self._ended(process, result, "the session exited before its turn ended")
                line = _json_object(raw)
                if line is None:
                    continue
                if line.get("type") == "system" and line.get("subtype") == "init":
                    result.session_id = self.session_id = str(line.get("session_id", ""))
                for event in events_of(line, tools):
                    emit(event)
                if line.get("type") != "result":
                    continue
                result = turn_result(line, result.turns + 1, ending, result.session_id)
                await asyncio.sleep(0)  # input sent at the same moment is in
                if getting.done():
                    item, getting = getting.result(), asyncio.ensure_future(inputs.get())
                    if item.kind == "interrupt" and not item.text:
                        ending = True
                    elif item.text:
                        waiting.append(Input("message", item.text, item.id))
                if not ending and not waiting and ctx.held():
                    idle = True  # an open blocking question: wait for the answer instead of ending
                    continue
                if ending or not waiting:
                    return await self._ended(process, result, "")
                if not await self._deliver(process, waiting.pop(0), emit):
                    return await self._ended(process, result, "the session did not take the next message")
        finally:
            for future in (reading, getting):
                future.cancel()
            for item in waiting:  # not delivered: back in the queue, for whoever looks next
                inputs.put_nowait(item)

    async def _deliver(self, process: asyncio.subprocess.Process, item: Input, emit: Emit) -> bool:
        """A person's message starts the next turn (a user event)."""
        emit({"kind": "user", "text": item.text})
        return await self._send(process, user_line(item.text))

    async def _during_turn(self, process: asyncio.subprocess.Process, item: Input, waiting: list[Input]) -> bool:
        """Input while a turn runs: a message waits for its end; an interrupt is sent now and its text is the
        next message. Answers whether the session ends after this turn (an interrupt without text)."""
        if item.kind != "interrupt":
            waiting.append(item)
            return False
        await self._send(process, self._interrupt_line())
        if item.text:  # its text is the next message, before any other
            waiting.insert(0, Input("message", item.text, item.id))
        return not item.text

    def _interrupt_line(self) -> bytes:
        request = {
            "type": "control_request",
            "request_id": f"drover-{next(self._requests)}",
            "request": {"subtype": "interrupt"},
        }
        return (json.dumps(request) + "\n").encode()

    async def _send(self, process: asyncio.subprocess.Process, data: bytes) -> bool:
        assert process.stdin is not None
        try:
            process.stdin.write(data)
            await process.stdin.drain()
        except (ConnectionError, RuntimeError):
            return False
        return True

    async def _ended(self, process: asyncio.subprocess.Process, result: SessionResult, why: str) -> SessionResult:
        """Wait for the program to exit (stop it after a grace period); a failure says why."""
        with contextlib.suppress(ConnectionError, RuntimeError):
            if process.stdin is not None and not process.stdin.is_closing():
                process.stdin.close()
        try:
            await asyncio.wait_for(process.wait(), END_GRACE_SECONDS)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
        if why and result.success:
            return result
        if why and not result.error:
            result.error = why
        elif why and result.error == "the session reported nothing":
            result.error = f"{why} (exit code {process.returncode})"
        return result


def _json_object(raw: bytes) -> dict[str, Any] | None:
    try:
        line = json.loads(raw)
    except ValueError:
        return None
    return line if isinstance(line, dict) else None
