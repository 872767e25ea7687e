"""External coding-agent runtimes (seed 003 "Agent runs"): Claude Code and opencode, driven as sessions.

A runtime is a `Session`: it writes its configuration into the run's $HOME, says how to start the
program, then drives the running process: sends the prompt, turns what the program prints into
run events (seed 003's kinds: text, tool_use, tool_result, result, user), delivers input between
turns, and reports how the session ended. The runtime driver (`agentd.drivers.runtime`) owns the
workspace, the sandbox, the model gateway and publishing; a Session owns only its protocol."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import pathlib
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from agentd.run.session_input import Input

TOOL_RESULT_BYTES = 4000
"""A tool_result event carries at most this much of the tool's output (seed 003)."""


@dataclasses.dataclass(frozen=True)
class SessionContext:
    executable: str
    """The runtime's program (agentd's drivers.claude_command / drivers.opencode_command)."""
    workspace: pathlib.Path
    """The repository the session works in (its cwd)."""
    home: pathlib.Path
    """The session's $HOME, outside the repository: nothing in it is committed."""
    model: str
    """The routed member's model; the gateway applies it whatever the runtime asks for."""
    base_url: str
    """The model gateway as the runtime reaches it (ANTHROPIC_BASE_URL), e.g. http://127.0.0.1:8421."""
    token: str
    """The per-run token the runtime uses as its API key; never the provider's key."""
    instructions: str
    """Standing instructions (.claude/CLAUDE.md, opencode's AGENTS.md)."""
    prompt: str
    """The first message: the Task, rendered from the Context Packet."""
    max_turns: int = 0
    """0: no limit of the runtime's own (the gateway's call cap still holds)."""
    mcp_command: tuple[str, ...] = ()
    """The `drover` MCP server (agentd/run/questions_mcp.py: ask_question) as the session starts it; () none."""
    held: Callable[[], bool] = lambda: False
    """An open blocking question: a turn that ends with nothing to deliver waits for input instead of
    ending the session."""

    effort: str = ""
    """The run's effort (its member's reasoning, else its tier's); "": the runtime's own (runtimes/reasoning.py)."""
    thinking: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """The tier's Messages API thinking object; {}: off."""

    resume_session_id: str = ""
    """Resume this parked session (its state restored from `resume_state`) instead of starting one."""
    resume_state: bytes = b""

    def mcp_env(self) -> dict[str, str]:
        return {"DROVER_GATEWAY_URL": self.base_url, "DROVER_RUN_TOKEN": self.token}


@dataclasses.dataclass
class SessionResult:
    """How a session ended (seed 003: final message, turns, cost, success)."""

    success: bool
    summary: str = ""
    turns: int = 0
    cost_usd: float = 0.0
    error: str = ""
    session_id: str = ""


Emit = Callable[[dict[str, Any]], None]
"""Streams one run event (a dict with "kind") as the session produces it."""


class Session(Protocol):
    name: str
    session_id: str
    """The runtime's own session id, once known (kept when the session is parked)."""

    def state(self, ctx: SessionContext) -> bytes | None:
        """What resuming the session needs (Claude Code: its transcript); None: it cannot be resumed."""
        ...

    def setup(self, ctx: SessionContext) -> None:
        """Write the runtime's configuration and standing instructions under ctx.home."""
        ...

    def argv(self, ctx: SessionContext) -> list[str]:
        """The command line that starts the session in ctx.workspace."""
        ...

    def env(self, ctx: SessionContext) -> dict[str, str]:
        """Environment the runtime needs besides PATH, HOME, LANG, TZ (gateway URL, token, switches)."""
        ...

    async def drive(
        self, process: asyncio.subprocess.Process, ctx: SessionContext, emit: Emit, inputs: asyncio.Queue[Input]
    ) -> SessionResult:
        """Run the session to its end over the process's stdin/stdout: send the prompt, emit events, deliver
        queued input after each turn (an interrupt at once), end the session when a turn ends with no input
        waiting. Never raises for the program's misbehaviour: a crash, garbage or silence is a failed result."""
        ...


def clip(text: str, limit: int = TOOL_RESULT_BYTES) -> str:
    """At most `limit` bytes of UTF-8 text, cut on a character boundary."""
    return text.encode()[:limit].decode(errors="ignore")


EDIT_TOOLS = {"Write", "Edit", "MultiEdit", "NotebookEdit", "write", "edit"}
"""The runtimes' file-writing tools (Claude Code's, opencode's): what they name is no build output."""


def edited_path(event: dict[str, Any], root: pathlib.Path) -> str:
    """The workspace path (relative to `root`) a tool_use event asks an edit tool to write, else ""."""
    if event.get("kind") != "tool_use" or event.get("tool") not in EDIT_TOOLS:
        return ""
    args = event.get("input")
    named = next((args[k] for k in ("file_path", "filePath", "notebook_path") if k in args), None) if args else None
    if not isinstance(named, str) or not named:
        return ""
    relative = os.path.relpath(os.path.normpath(os.path.join(root, named)), root)
    return "" if relative == ".." or relative.startswith("../") else relative
