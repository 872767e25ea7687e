"""opencode as a session (seed 003 "Agent runs"): `opencode acp`, driven over the Agent Client Protocol.

ACP is JSON-RPC 2.0 over the program's stdin/stdout, one JSON object per line. The client (this driver)
sends `initialize`, `session/new` and one `session/prompt` per turn; the agent streams `session/update`
notifications while the turn runs and answers the prompt with a stopReason when it ends. `session/cancel`
(a notification) stops a running turn, which then ends with stopReason "cancelled". The agent may ask the
client things (`session/request_permission`); this client allows every tool (the sandbox is the boundary)
and declines everything else with -32601, as it offers no file system or terminal of its own.

The small JSON-RPC client is written here rather than taken from the `agent-client-protocol` package: a session
needs six messages, and the driver must decide itself what a crash, garbage on stdout or a silent program
means (a failed result, never an exception). The program's stderr is not read here: it belongs to whoever
started the process (the supervisor keeps it in the run's output)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import json
from typing import Any

from agentd.drivers.runtimes import Emit, SessionContext, SessionResult, clip
from agentd.drivers.runtimes.acp import EXIT_SECONDS, _Broken, _Connection, _RpcError
from agentd.drivers.runtimes.reasoning import opencode_options
from agentd.run.session_input import Input

PROTOCOL_VERSION = 1
STARTUP_SECONDS = 120.0
"""How long initialize and session/new may take (opencode needs a few seconds on a cold $HOME)."""
CANCEL_SECONDS = 20.0
"""How long a cancelled turn may take to end before the session is given up."""

OFFLINE_ENV = {
    # No fetch of the models.dev catalogue (models.opencode.ai): the catalogue built into the binary is used.
    "OPENCODE_DISABLE_MODELS_FETCH": "1",
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    "OPENCODE_DISABLE_SHARE": "1",
    # opencode installs @opencode-ai/plugin into every config directory it reads (~/.config/opencode) with its
    # built-in npm; offline, that install fails at once (a logged warning) instead of reaching the registry.
    "npm_config_offline": "true",
}


class Opencode:
    """The `opencode` program (npm opencode-ai) as a Session, over `opencode acp`."""

    name = "opencode"

    def __init__(self) -> None:
        self.session_id = ""

    def state(self, ctx: SessionContext) -> bytes | None:
        return None  # a parked opencode session is not resumed: a new one gets the answers in its prompt

    def setup(self, ctx: SessionContext) -> None:
        folder = ctx.home / ".config" / "opencode"
        folder.mkdir(parents=True, exist_ok=True)
        model = f"anthropic/{ctx.model}"
        agents: dict[str, Any] = {"title": {"disable": True}}  # no title-generation call to the model
        if ctx.max_turns > 0:
            agents["build"] = {"steps": ctx.max_turns}
        config = {
            "provider": {
                "anthropic": {
                    "options": {
                        "baseURL": ctx.base_url.rstrip("/") + "/v1",
                        "apiKey": "{env:DROVER_RUN_TOKEN}",  # substituted by opencode: the token never hits the disk
                    },
                    # any model id is accepted; its options carry the run's effort and thinking
                    "models": {ctx.model: {"name": ctx.model, "options": opencode_options(ctx.effort, ctx.thinking)}},
                }
            },
            "enabled_providers": ["anthropic"],
            "model": model,
            "small_model": model,
            "agent": agents,
            "permission": "allow",
            "autoupdate": False,
            "share": "disabled",
        }
        (folder / "opencode.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        (folder / "AGENTS.md").write_text(ctx.instructions, encoding="utf-8")

    def argv(self, ctx: SessionContext) -> list[str]:
        # opencode's errors go to stderr, which the supervisor keeps with the run, instead of a log file in $HOME.
        return [ctx.executable, "acp", "--print-logs", "--log-level", "ERROR"]

    def env(self, ctx: SessionContext) -> dict[str, str]:
        return {"DROVER_RUN_TOKEN": ctx.token, **OFFLINE_ENV}

    async def drive(
        self, process: asyncio.subprocess.Process, ctx: SessionContext, emit: Emit, inputs: asyncio.Queue[Input]
    ) -> SessionResult:
        run = _Run(process, ctx, emit, inputs)
        try:
            return await run.run()
        finally:
            self.session_id = run.session_id


@dataclasses.dataclass
class _Tool:
    name: str
    input: dict[str, Any]
    announced: bool = False
    finished: bool = False


@dataclasses.dataclass
class _TurnEnd:
    final: str
    error: str  # "" when the turn ended well
    interrupt: Input | None


class _Run:
    """One session: the protocol state of a running opencode acp."""

    def __init__(
        self, process: asyncio.subprocess.Process, ctx: SessionContext, emit: Emit, inputs: asyncio.Queue[Input]
    ) -> None:
        self.process = process
        self.ctx = ctx
        self.emit = emit
        self.inputs = inputs
        self.session_id = ""
        self.turns = 0
        self.cost = 0.0
        self.waiting: collections.deque[Input] = collections.deque()  # messages that arrived during a turn
        self.message_id: Any = None
        self.chunks: list[str] = []
        self.final = ""  # the last message of the running turn
        self.tools: dict[str, _Tool] = {}
        self.connection: _Connection

    async def run(self) -> SessionResult:
        self.connection = _Connection(self.process, self._update)
        summary, error, ended = "", "", False
        try:
            capabilities = {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False}
            started = await self.connection.request(
                "initialize", {"protocolVersion": PROTOCOL_VERSION, "clientCapabilities": capabilities}, STARTUP_SECONDS
            )
            version = started.get("protocolVersion") if isinstance(started, dict) else None
            if version != PROTOCOL_VERSION:
                raise _Broken(f"opencode speaks ACP protocol version {version!r}, this driver {PROTOCOL_VERSION}")
            servers = []
            if self.ctx.mcp_command:
                command, *args = self.ctx.mcp_command
                env = [{"name": k, "value": v} for k, v in self.ctx.mcp_env().items()]
                servers.append({"name": "drover", "command": command, "args": args, "env": env})
            created = await self.connection.request(
                "session/new", {"cwd": str(self.ctx.workspace), "mcpServers": servers}, STARTUP_SECONDS
            )
            self.session_id = str(created.get("sessionId") or "") if isinstance(created, dict) else ""
            if not self.session_id:
                raise _Broken(f"opencode answered session/new without a sessionId: {clip(json.dumps(created), 300)}")
            text: str | None = self.ctx.prompt
            while text is not None:
                end = await self._turn(text)
                summary, error = end.final, end.error
                text = None
                following = end.interrupt or self._next_input()
                if following is None and self.ctx.held():  # an open blocking question: wait for input
                    following = await self._wait_input()
                if following is not None and following.kind == "interrupt" and not following.text:
                    error, ended = "interrupted", True
                elif following is not None:
                    self.emit({"kind": "user", "text": following.text})
                    text = following.text
            ended = True
        except _RpcError as exc:
            error = f"opencode refused to start the session: {exc}"
        except _Broken as exc:
            error = str(exc)
            if self.turns and not ended:  # a turn was running: it ends here, badly
                self._flush()
                self._close_tools()
                self.emit({"kind": "result", "text": self.final or error, "error": True})
                summary = self.final
        finally:
            await self._shutdown()
        return SessionResult(
            success=ended and not error,
            summary=summary,
            turns=self.turns,
            cost_usd=self.cost,
            error=error,
            session_id=self.session_id,
        )

    async def _wait_input(self) -> Input:
        """Held between turns: the next input, unless opencode exits first."""
        while True:
            if self.waiting:
                item = self.waiting.popleft()
            else:
                getter = asyncio.ensure_future(self.inputs.get())
                exited = asyncio.ensure_future(self.process.wait())
                await asyncio.wait({getter, exited}, return_when=asyncio.FIRST_COMPLETED)
                exited.cancel()
                if not getter.done():
                    getter.cancel()
                    raise _Broken(f"opencode exited with code {self.process.returncode} while waiting for an answer")
                item = getter.result()
            if item.kind == "interrupt" or item.text.strip():
                return item

    def _next_input(self) -> Input | None:
        while True:
            if self.waiting:
                item = self.waiting.popleft()
            else:
                try:
                    item = self.inputs.get_nowait()
                except asyncio.QueueEmpty:
                    return None
            if item.kind == "interrupt" or item.text.strip():
                return item

    async def _turn(self, text: str) -> _TurnEnd:
        """One session/prompt, to its stopReason; input arriving meanwhile waits, an interrupt cancels the turn."""
        self.turns += 1
        self.final, self.message_id, self.chunks = "", None, []
        prompt = {"sessionId": self.session_id, "prompt": [{"type": "text", "text": text}]}
        answer = await self.connection.start("session/prompt", prompt)
        interrupt: Input | None = None
        getter = asyncio.ensure_future(self.inputs.get())
        try:
            while not answer.done():
                timeout = CANCEL_SECONDS if interrupt is not None else None
                done, _ = await asyncio.wait({answer, getter}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                if not done:
                    raise _Broken(f"opencode did not stop the turn within {CANCEL_SECONDS:g} s of session/cancel")
                if getter in done:
                    item = getter.result()
                    getter = asyncio.ensure_future(self.inputs.get())
                    if item.kind == "interrupt":
                        if interrupt is None and not answer.done():
                            await self.connection.notify("session/cancel", {"sessionId": self.session_id})
                        interrupt = item  # the latest interrupt says what happens next
                    else:
                        self.waiting.append(item)
        finally:
            getter.cancel()
            await asyncio.wait({getter})
            if not getter.cancelled() and getter.exception() is None:
                self.waiting.append(getter.result())  # arrived just as the turn ended
        error = ""
        try:
            result = answer.result()
            stop = result.get("stopReason") if isinstance(result, dict) else None
            if stop == "cancelled" and interrupt is not None:
                error = "interrupted"
            elif stop != "end_turn":
                error = f"the turn ended with stopReason {stop!r}"
        except _RpcError as exc:
            error = f"opencode failed the turn: {exc}"
        self._flush()
        self._close_tools()
        self.emit({"kind": "result", "text": self.final or error, "error": bool(error)})
        return _TurnEnd(self.final, error, interrupt)

    # -- session/update notifications into run events

    def _update(self, params: dict[str, Any]) -> None:
        if self.session_id and params.get("sessionId") not in (None, self.session_id):
            return
        update = params.get("update")
        if not isinstance(update, dict):
            return
        kind = update.get("sessionUpdate")
        if kind == "agent_message_chunk":
            content = update.get("content")
            if isinstance(content, dict) and content.get("type") == "text":
                message_id = update.get("messageId")
                if message_id != self.message_id:
                    self._flush()
                    self.message_id = message_id
                self.chunks.append(str(content.get("text") or ""))
        elif kind in ("tool_call", "tool_call_update"):
            self._tool(update)
        elif kind == "usage_update":
            cost = update.get("cost")
            if isinstance(cost, dict) and cost.get("currency", "USD") == "USD":
                with contextlib.suppress(TypeError, ValueError):
                    self.cost = float(cost.get("amount") or 0.0)

    def _flush(self) -> None:
        """The message being streamed is complete: one text event."""
        text = "".join(self.chunks)
        self.chunks = []
        if text.strip():
            self.final = text
            self.emit({"kind": "text", "text": text})

    def _tool(self, update: dict[str, Any]) -> None:
        call_id = str(update.get("toolCallId") or "")
        tool = self.tools.get(call_id)
        if tool is None:
            self._flush()
            # opencode's first tool_call is titled with the tool's own name ("write", "bash"); later updates
            # retitle it with what it does ("hello.txt", the command).
            name = update.get("title") or update.get("kind") or "tool"
            tool = self.tools[call_id] = _Tool(str(name), {})
        raw = update.get("rawInput")
        if isinstance(raw, dict) and raw:
            tool.input = raw
        status = update.get("status")
        # A pending tool_call carries no or partial input (opencode: {} or only the cwd); it is known once the
        # call runs.
        if not tool.announced and status in ("in_progress", "completed", "failed"):
            tool.announced = True
            self.emit({"kind": "tool_use", "tool": tool.name, "input": tool.input})
        if status in ("completed", "failed") and not tool.finished:
            tool.finished = True
            self.emit(
                {"kind": "tool_result", "tool": tool.name, "text": clip(_output(update)), "error": status == "failed"}
            )

    def _close_tools(self) -> None:
        """At the end of a turn every announced tool has a result (a stopped one failed)."""
        for tool in self.tools.values():
            if tool.announced and not tool.finished:
                tool.finished = True
                self.emit({"kind": "tool_result", "tool": tool.name, "text": "(stopped)", "error": True})
        self.tools.clear()

    async def _shutdown(self) -> None:
        """End the session: close stdin, give the program a moment to exit, then stop it."""
        process = self.process
        try:
            with contextlib.suppress(OSError):
                if process.stdin is not None and not process.stdin.is_closing():
                    process.stdin.close()
            for stop in (process.terminate, process.kill):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(process.wait(), EXIT_SECONDS)
                if process.returncode is not None:
                    break
                with contextlib.suppress(ProcessLookupError):
                    stop()
            await process.wait()
        finally:
            if process.returncode is None:  # drive() itself was cancelled meanwhile
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
            await self.connection.close()


def _output(update: dict[str, Any]) -> str:
    """What a finished tool call printed: its content blocks' text, else its rawOutput."""
    texts: list[str] = []
    for block in update.get("content") or []:
        if not isinstance(block, dict):
            continue
        inner = block.get("content") if block.get("type") == "content" else None
        if isinstance(inner, dict) and inner.get("type") == "text":
            texts.append(str(inner.get("text") or ""))
        elif block.get("type") == "diff":
            texts.append(f"(diff of {block.get('path')})")
    if texts:
        return "\n".join(texts)
    raw = update.get("rawOutput")
    if isinstance(raw, dict):
        for key in ("output", "error"):
            if raw.get(key):
                return str(raw[key])
    return "" if raw is None else json.dumps(raw)
