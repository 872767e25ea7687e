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
import itertools
import json
from typing import Any

from agentd.runtimes import Emit, Input, SessionContext, SessionResult, clip

PROTOCOL_VERSION = 1
STARTUP_SECONDS = 120.0
"""How long initialize and session/new may take (opencode needs a few seconds on a cold $HOME)."""
CANCEL_SECONDS = 20.0
"""How long a cancelled turn may take to end before the session is given up."""
EXIT_SECONDS = 5.0
"""How long the program may take to exit once its stdin is closed, before it is terminated."""
MAX_LINE_BYTES = 64 * 1024 * 1024

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
                    "models": {ctx.model: {"name": ctx.model}},  # any model id is accepted
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


class _Broken(Exception):
    """The program misbehaved (exited, printed garbage, fell silent): the session cannot go on."""


class _RpcError(Exception):
    """A JSON-RPC error response."""

    def __init__(self, error: Any) -> None:
        error = error if isinstance(error, dict) else {"message": str(error)}
        self.code = error.get("code")
        message = str(error.get("message") or "error")
        data = error.get("data")
        if isinstance(data, dict) and data.get("errorName"):
            message += f" ({data['errorName']})"
        elif data not in (None, {}, ""):
            message += f" ({clip(json.dumps(data), 500)})"
        super().__init__(f"{message} [code {self.code}]")


class _Connection:
    """Newline-delimited JSON-RPC 2.0 with the program: requests out, responses, notifications and requests in."""

    def __init__(self, process: asyncio.subprocess.Process, on_update: Emit) -> None:
        self._process = process
        self._on_update = on_update
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._write_lock = asyncio.Lock()
        self.broken = ""
        self._reader = asyncio.ensure_future(self._read())

    # -- out

    async def start(self, method: str, params: dict[str, Any]) -> asyncio.Future[Any]:
        """Send a request; the future holds its result (or raises _RpcError / _Broken)."""
        if self.broken:
            raise _Broken(self.broken)
        request_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        await self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        return future

    async def request(self, method: str, params: dict[str, Any], timeout: float) -> Any:
        future = await self.start(method, params)
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            raise _Broken(f"opencode did not answer {method} within {timeout:g} s") from None

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        await self._send({"jsonrpc": "2.0", "method": method, "params": params})

    async def _send(self, message: dict[str, Any]) -> None:
        stdin = self._process.stdin
        if self.broken:
            raise _Broken(self.broken)
        if stdin is None:
            raise self._break("opencode has no stdin pipe")
        failure = ""
        async with self._write_lock:
            try:
                stdin.write(json.dumps(message).encode() + b"\n")
                await stdin.drain()
            except (ConnectionError, RuntimeError, OSError) as exc:
                failure = f"writing to opencode failed ({exc or type(exc).__name__})"
        if self.broken:
            raise _Broken(self.broken)
        if failure:
            # Most likely the program has exited: let the reader see the end of its output and say so.
            if asyncio.current_task() is not self._reader:
                await asyncio.wait({self._reader}, timeout=2 * EXIT_SECONDS)
            raise self._break(failure)

    # -- in

    async def _read(self) -> None:
        stdout = self._process.stdout
        if stdout is None:
            self._break("opencode has no stdout pipe")
            return
        buffer = bytearray()
        try:
            while not self.broken:
                chunk = await stdout.read(1 << 16)
                if not chunk:
                    break
                buffer += chunk
                while not self.broken and (end := buffer.find(b"\n")) >= 0:
                    line = bytes(buffer[:end])
                    del buffer[: end + 1]
                    if line.strip():
                        await self._dispatch(line)
                if len(buffer) > MAX_LINE_BYTES:
                    self._break(f"opencode printed a line longer than {MAX_LINE_BYTES} bytes")
            if not self.broken:
                if buffer.strip():
                    await self._dispatch(bytes(buffer))
                if not self.broken:
                    await self._ended()
        except Exception as exc:  # a driver bug or a broken pipe: the session ends, never the caller
            self._break(f"reading opencode's output failed: {exc!r}")

    async def _ended(self) -> None:
        """stdout closed: the program exited (or is about to)."""
        code = None
        with contextlib.suppress(TimeoutError):
            code = await asyncio.wait_for(self._process.wait(), EXIT_SECONDS)
        how = f"exited with code {code}" if code is not None else "closed its output"
        self._break(f"opencode {how}")

    async def _dispatch(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            message = None
        if not isinstance(message, dict) or not ("method" in message or "id" in message):
            shown = clip(line.decode(errors="replace"), 300)
            self._break(f"opencode printed something that is not JSON-RPC: {shown!r}")
            return
        method = message.get("method")
        if isinstance(method, str):
            params = message.get("params")
            params = params if isinstance(params, dict) else {}
            if "id" in message:
                await self._answer(message["id"], method, params)
            elif method == "session/update":
                self._on_update(params)
            return
        future = self._pending.pop(message["id"], None) if isinstance(message["id"], int) else None
        if future is None or future.done():
            return  # an answer to nothing we asked: ignored
        if "error" in message:
            future.set_exception(_RpcError(message["error"]))
        else:
            future.set_result(message.get("result"))

    async def _answer(self, request_id: Any, method: str, params: dict[str, Any]) -> None:
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id}
        if method == "session/request_permission":
            reply["result"] = {"outcome": _allow(params)}
        else:
            reply["error"] = {"code": -32601, "message": f"method not found: {method}"}
        with contextlib.suppress(_Broken):
            await self._send(reply)

    def _break(self, reason: str) -> _Broken:
        """Mark the connection unusable; every request still waiting fails with the reason."""
        if not self.broken:
            self.broken = reason
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(_Broken(self.broken))
                    future.exception()  # retrieved: no "never retrieved" warning when nobody awaits it
            self._pending.clear()
        return _Broken(self.broken)

    async def close(self) -> None:
        if not self._reader.done():
            self._reader.cancel()
            await asyncio.wait({self._reader})


def _allow(params: dict[str, Any]) -> dict[str, Any]:
    options = [o for o in params.get("options") or [] if isinstance(o, dict)]
    for kind in ("allow_always", "allow_once"):
        for option in options:
            if option.get("kind") == kind:
                return {"outcome": "selected", "optionId": option.get("optionId")}
    return {"outcome": "cancelled"}


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
