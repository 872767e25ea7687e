"""The external-runtime driver (claude-code, opencode): a real coding-agent program works the Task as a
session (agentd/drivers/runtimes/), its model calls through the run's model gateway.

It starts the run's model gateway (outside the sandbox: the provider's key stays in the supervisor),
writes the runtime's configuration into the session's $HOME, runs the runtime in the sandbox as the
session user, streams its events, and when the session ends well the skeleton publishes what it left in
the workspace as the Task's ChangeSet.

The runtime reaches the gateway by TCP on loopback; in a sandbox without network, through a Unix
socket bound into the sandbox and agentd/run/forwarder.py listening on the sandbox's own loopback."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import secrets as tokens
import shutil
import signal
import sys
import tempfile
from typing import Any

from agentd import run_dir as run_dir_files
from agentd.drivers.harness.driver import incarnation
from agentd.drivers.harness.loop import as_json_line
from agentd.drivers.harness.transcript import Transcript
from agentd.drivers.runtimes import Session, SessionContext, SessionResult, edited_path
from agentd.drivers.runtimes.claude_code import ClaudeCode
from agentd.drivers.runtimes.opencode import Opencode
from agentd.errors import RunEnded
from agentd.run import preparation, session_input
from agentd.run.conversation import Conversation
from agentd.run.gateway import Gateway, Upstream
from agentd.run.sandbox import Bind, Sandbox
from agentd.run.spawn import start as sandboxed
from agentd.run.spec import RunSpec
from agentd.run.supervisor import Run

SESSIONS: dict[str, type[Any]] = {"claude-code": ClaudeCode, "opencode": Opencode}
FORWARDER = pathlib.Path(__file__).resolve().parents[1] / "run" / "forwarder.py"
FORWARDER_INSIDE = "/run/drover/forwarder.py"
QUESTIONS_MCP = pathlib.Path(__file__).resolve().parents[1] / "run" / "questions_mcp.py"
QUESTIONS_MCP_INSIDE = "/run/drover/questions_mcp.py"
GATEWAY_INSIDE = "/run/drover/gateway.sock"
GATEWAY_PORT = 8421
"""The gateway's port on a sandbox's own loopback (each sandbox has its own: no clashes)."""
RUNTIME_ADDRESS_SPACE = 64 * 1024**3
"""RLIMIT_AS of a runtime's processes: Claude Code and opencode are JIT runtimes (bun) that reserve far
more address space than they use; at the sandbox's default 4 GiB opencode cannot start a shell."""
REFUSAL_GRACE_SECONDS = 30.0
"""After a budget refusal the runtime has this long to end its turn before it is stopped."""


def driver(spec: RunSpec) -> RuntimeDriver:
    return RuntimeDriver(SESSIONS[spec.driver]())


def install_root(executable: str) -> pathlib.Path:
    """What of the host a runtime needs to run: its npm package tree (the `node_modules` folder its
    resolved path lies in), else its own folder."""
    real = pathlib.Path(os.path.realpath(shutil.which(executable) or executable))
    parts = real.parts
    if "node_modules" in parts:
        return pathlib.Path(*parts[: len(parts) - parts[::-1].index("node_modules")])
    return real.parent


class RuntimeDriver:
    crash_code = "harness_error"
    output_slack = 0

    def __init__(self, session: Session) -> None:
        self.session = session
        self.edited: set[str] = set()
        """Paths the runtime's edit tools asked for (its tool_use events): no build outputs, whatever they look like."""

    def event(self, event: dict[str, Any]) -> None:
        self.run.output.write("event", as_json_line(event))
        if edited := edited_path(event, self.run.repo_dir):
            self.edited.add(edited)

    async def drive(self, run: Run) -> RunEnded:
        self.run = run
        spec, h = run.spec, run.spec.harness
        if not spec.runtime_command:
            return RunEnded("failed", f"no_driver: this agent has no {spec.driver} command", code="start_failed")
        # the transcript keeps the questions asked (a restarted supervisor is still held)
        transcript = Transcript(run.run_dir / run_dir_files.TRANSCRIPT)
        self.conversation = Conversation(run.control_plane, transcript, run.output, incarnation(run))
        root, writable = run.open_task_workspace()
        if root is None:  # a Task without a repository still needs a folder to work in
            root = run.repo_dir
            root.mkdir(parents=True, exist_ok=True)
        elif writable:
            run.home.mkdir(parents=True, exist_ok=True)
            await asyncio.to_thread(preparation.setup_workspace, run, root)
        sandbox = run.sandbox(h.network, memory_bytes=RUNTIME_ADDRESS_SPACE)
        gateway = self._gateway()
        through_socket = sandbox.isolated and not h.network
        scratch = pathlib.Path(tempfile.mkdtemp(prefix="drover-gw-"))  # short: a socket path has 108 bytes
        try:
            if through_socket:
                server = await asyncio.start_unix_server(gateway.serve, path=str(scratch / "gw.sock"))
                os.chmod(scratch / "gw.sock", 0o666)  # the session user connects; the bind shows only it
                base_url = f"http://127.0.0.1:{GATEWAY_PORT}"
            else:
                server = await asyncio.start_server(gateway.serve, "127.0.0.1", 0)
                base_url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
            async with server:
                ctx = SessionContext(
                    executable=spec.runtime_command,
                    workspace=root,
                    home=run.home,
                    model=spec.model,
                    base_url=base_url,
                    token=gateway.token,
                    instructions=h.instructions,
                    effort=h.effort,
                    thinking=h.thinking or {},
                    mcp_command=(
                        sys.executable,
                        "-I",
                        "-S",
                        QUESTIONS_MCP_INSIDE if sandbox.isolated else str(QUESTIONS_MCP),
                    ),
                    held=self.conversation.held,
                    **{"prompt": spec.prompt, **self._resume_parts()},
                )
                ended = await self._session(ctx, sandbox, scratch if through_socket else None, gateway)
            if ended.outcome == "completed" and run.workspace is not None:
                ended = await run.publish(ended, self.edited)
            elif ended.outcome == "parked":
                self.event({"kind": "session", "parked": True, "session_id": self.session.session_id})
                ended = await run.park(ended, self.session.session_id, self.session.state(ctx), self.edited)
            return ended
        finally:
            await gateway.close()
            shutil.rmtree(scratch, ignore_errors=True)

    def _gateway(self) -> Gateway:
        """The run's model gateway: a fresh token in (redacted from everything the run writes), the
        member's credential out, every call reserved and settled through the control plane."""
        run, h = self.run, self.run.spec.harness
        gateway = Gateway(
            token=tokens.token_urlsafe(32),
            model=run.spec.model,
            max_output_tokens=h.max_output_tokens,
            upstream=Upstream(
                run.spec.base_url,
                run.secret_env.get("ANTHROPIC_API_KEY", ""),
                h.billing,
                h.stall_timeout_seconds,
                h.anthropic_workspace_id,
            ),
            control_plane=run.control_plane,
            key_prefix=f"gw:{self.conversation.incarnation}",
            ask=self.conversation.ask,
            say=lambda line: run.output.write("system", f"{line}\n"),
        )
        run.output.hide(gateway.token)
        run.hidden.append(gateway.token)
        return gateway

    def _resume_parts(self) -> dict[str, Any]:
        """A run that resumes a parked session: its id and state, and the answers as the first message (with
        no state to resume, a new session gets the Task's prompt and the answers)."""
        spec, h = self.run.spec, self.run.spec.harness
        if not h.resume_answers:
            return {}
        state = self.run.resume_state()
        if h.resume_session_id and state:
            return {"resume_session_id": h.resume_session_id, "resume_state": state, "prompt": h.resume_answers}
        return {"prompt": f"{spec.prompt}\n\n{h.resume_answers}\n"}

    async def _session(
        self, ctx: SessionContext, sandbox: Sandbox, socket_dir: pathlib.Path | None, gateway: Gateway
    ) -> RunEnded:
        session, run = self.session, self.run
        ctx.home.mkdir(parents=True, exist_ok=True)
        session.setup(ctx)
        for path in (ctx.workspace, ctx.home):  # the session user owns its workspace and $HOME, never the git dir
            run.hand_over(path, sandbox)
        argv = session.argv(ctx)
        binds = [
            Bind(install_root(ctx.executable), str(install_root(ctx.executable))),
            Bind(QUESTIONS_MCP, QUESTIONS_MCP_INSIDE),
        ]
        if socket_dir is not None:
            argv = [sys.executable, "-I", "-S", FORWARDER_INSIDE, "--port", str(GATEWAY_PORT)]
            argv += ["--socket", GATEWAY_INSIDE, "--", *session.argv(ctx)]
            binds += [Bind(FORWARDER, FORWARDER_INSIDE), Bind(socket_dir / "gw.sock", GATEWAY_INSIDE, writable=True)]
        env, git_binds = run.command_env(ctx.workspace, ctx.home)
        env.update(session.env(ctx))
        try:
            process = await sandboxed(
                sandbox,
                argv,
                ctx.workspace,
                env,
                writable=[ctx.workspace, ctx.home],
                binds=[*binds, *git_binds],
                stdin=asyncio.subprocess.PIPE,
                limit=16 << 20,  # a stream-json line carries whole tool results
            )
        except (OSError, ValueError) as err:
            return RunEnded("failed", f"start_failed: cannot start {ctx.executable}: {err}", code="start_failed")
        run.output.write("system", f"{session.name}: session started ({os.path.basename(ctx.executable)})\n")
        stderr = asyncio.ensure_future(self._stderr(process))
        feeding = asyncio.ensure_future(self.conversation.feed(session_input.applied_through(run.run_dir)))
        driving = asyncio.ensure_future(session.drive(process, ctx, self.event, self.conversation.inputs))
        stopped = await self._watch_session(driving, process, gateway)
        feeding.cancel()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # nothing of the session outlives it
        await process.wait()
        await asyncio.gather(stderr, return_exceptions=True)
        if stopped:
            return stopped
        return self._ended(driving.result(), gateway)

    def _ended(self, result: SessionResult, gateway: Gateway) -> RunEnded:
        """How a session that ended by itself ends the run (a budget refusal says which limit)."""
        self.event(
            {
                "kind": "session",
                "success": result.success,
                "summary": result.summary,
                "turns": result.turns,
                "cost_usd": result.cost_usd,
                "session_id": result.session_id,
                "model_calls": gateway.calls,
            }
        )
        ended = self._outcome(result, gateway)
        ended.extra["result"] = {
            "text": result.summary,
            "turns": result.turns,
            "cost_micros": round(result.cost_usd * 1_000_000),
            "success": result.success,
        }
        return ended

    @staticmethod
    def _outcome(result: SessionResult, gateway: Gateway) -> RunEnded:
        if gateway.refused is not None:
            refused = gateway.refused
            return RunEnded(
                {"run_call_cap": "run_call_cap", "run_cost_cap": "run_cost_cap"}.get(refused.code, "spend_limited"),
                str(refused),
                code=refused.code,
            )
        if not result.success:
            return RunEnded("failed", f"session_failed: {result.error or 'the session failed'}", code="session_failed")
        return RunEnded("completed", result.summary, intent={"summary": result.summary})

    async def _watch_session(
        self, driving: asyncio.Future[SessionResult], process: asyncio.subprocess.Process, gateway: Gateway
    ) -> RunEnded | None:
        """Wait for the session; the cancel file, the timeout or a refusal left unanswered stop it."""
        loop = asyncio.get_running_loop()
        timeout = self.run.spec.timeout_seconds
        deadline = loop.time() + timeout if timeout > 0 else None
        refused_at: float | None = None
        while not driving.done():
            await asyncio.wait({driving}, timeout=0.1)
            if driving.done():
                return None
            now = loop.time()
            if gateway.refused is not None and refused_at is None:
                refused_at = now
            stop = ""
            if self.run.cancelled:
                stop = "cancelled"
            elif self.conversation.park_requested:
                stop = "parked"
            elif deadline is not None and now >= deadline:
                stop = "timeout"
            elif refused_at is not None and now - refused_at > REFUSAL_GRACE_SECONDS:
                stop = "refused"
            if stop:
                driving.cancel()
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                await asyncio.gather(driving, return_exceptions=True)
                if stop == "refused" and gateway.refused is not None:
                    return RunEnded("spend_limited", str(gateway.refused), code=gateway.refused.code)
                if stop == "parked":
                    return RunEnded("parked", "parked while waiting for answers")
                return RunEnded(stop, "cancelled by request" if stop == "cancelled" else f"timed out after {timeout} s")
        return None

    async def _stderr(self, process: asyncio.subprocess.Process) -> None:
        assert process.stderr is not None
        while line := await process.stderr.readline():
            self.run.output.write("stderr", line.decode(errors="replace"))
