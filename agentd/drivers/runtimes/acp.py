"""The client side of the Agent Client Protocol over a program's stdio (JSON-RPC 2.0, one object a line),
as agentd/drivers/runtimes/opencode.py drives it: requests with ids, notifications, the agent's own requests
(permissions allowed, anything else declined), and a clear error for a crash or garbage on stdout."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from typing import Any

from agentd.drivers.runtimes import Emit, clip
from agentd.errors import AgentdError

MAX_LINE_BYTES = 64 * 1024 * 1024
EXIT_SECONDS = 5.0
"""How long the program may take to exit once its stdin is closed, before it is terminated."""


class _Broken(AgentdError):
    """The program misbehaved (exited, printed garbage, fell silent): the session cannot go on."""


class _RpcError(AgentdError):
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
