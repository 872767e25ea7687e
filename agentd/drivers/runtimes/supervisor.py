"""The supervisor of one external-runtime run: `python -m agentd.drivers.runtimes.supervisor RUN_DIR`.

Like the harness's (agentd/drivers/harness/supervisor.py, whose workspace, budget gate and publishing it
reuses), it is detached from agentd, gets its secrets on stdin and writes everything to
RUN_DIR/output.jsonl. It opens the workspace, starts the run's model gateway (outside the sandbox:
the provider's key stays here), writes the runtime's configuration into the session's $HOME, runs
the runtime in the sandbox as the session user, streams its events, and when the session ends
well publishes what it left in the workspace as the Task's ChangeSet.

The runtime reaches the gateway by TCP on loopback; in a sandbox without network, through a Unix
socket bound into the sandbox and agentd/run/forwarder.py listening on the sandbox's own loopback."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pathlib
import secrets as tokens
import shutil
import signal
import sys
import tempfile
from typing import Any

from agentd.drivers.harness.gate import Gate
from agentd.drivers.harness.loop import RunEnded, as_json_line
from agentd.drivers.harness.supervisor import HarnessRun
from agentd.drivers.runtimes import Session, SessionContext, SessionResult, edited_path
from agentd.drivers.runtimes.claude_code import ClaudeCode
from agentd.drivers.runtimes.opencode import Opencode
from agentd.run import session_input
from agentd.run.gateway import Gateway, Refused, Upstream
from agentd.run.sandbox import UNSANDBOXED, Bind, Sandbox, SandboxFailed
from agentd.run.supervisor import sandbox_for
from drover.core import workspace

SESSIONS: dict[str, type[Any]] = {"claude-code": ClaudeCode, "opencode": Opencode}
FORWARDER = pathlib.Path(__file__).resolve().parents[2] / "run" / "forwarder.py"
FORWARDER_INSIDE = "/run/drover/forwarder.py"
QUESTIONS_MCP = pathlib.Path(__file__).resolve().parents[2] / "run" / "questions_mcp.py"
QUESTIONS_MCP_INSIDE = "/run/drover/questions_mcp.py"
GATEWAY_INSIDE = "/run/drover/gateway.sock"
GATEWAY_PORT = 8421
"""The gateway's port on a sandbox's own loopback (each sandbox has its own: no clashes)."""
RUNTIME_ADDRESS_SPACE = 64 * 1024**3
"""RLIMIT_AS of a runtime's processes: Claude Code and opencode are JIT runtimes (bun) that reserve far
more address space than they use; at the sandbox's default 4 GiB opencode cannot start a shell."""
REFUSAL_GRACE_SECONDS = 30.0
"""After a budget refusal the runtime has this long to end its turn before it is stopped."""


def install_root(executable: str) -> pathlib.Path:
    """What of the host a runtime needs to run: its npm package tree (the `node_modules` folder its
    resolved path lies in), else its own folder."""
    real = pathlib.Path(os.path.realpath(shutil.which(executable) or executable))
    parts = real.parts
    if "node_modules" in parts:
        return pathlib.Path(*parts[: len(parts) - parts[::-1].index("node_modules")])
    return real.parent


class RuntimeRun(HarnessRun):
    def __init__(self, run_dir: pathlib.Path, secrets: dict[str, Any]) -> None:
        super().__init__(run_dir, secrets)
        self.driver: str = self.spec["driver"]
        self.executable: str = self.spec.get("runtime_command") or ""
        self.edited: set[str] = set()
        """Paths the runtime's edit tools asked for (its tool_use events): no build outputs, whatever they look like."""

    def event(self, event: dict[str, Any]) -> None:
        self.output.write("event", as_json_line(event))
        if edited := edited_path(event, self.ws_dir / "repo"):
            self.edited.add(edited)

    def written(self) -> set[str]:
        return self.edited

    async def _run(self) -> RunEnded:
        h = self.spec["harness"]
        session: Session = SESSIONS[self.driver]()
        if not self.executable:
            return RunEnded("failed", f"no_driver: this agent has no {self.driver} command", code="start_failed")
        root, _ = self.open_root()
        if root is None:  # a Task without a repository still needs a folder to work in
            root = self.ws_dir / "repo"
            root.mkdir(parents=True, exist_ok=True)
        try:
            sandbox = sandbox_for(self.spec, bool(h.get("network")), memory_bytes=RUNTIME_ADDRESS_SPACE)
        except ValueError as err:
            raise SandboxFailed(str(err)) from None
        if not sandbox.isolated:
            self.output.write("system", f"WARNING: {UNSANDBOXED}\n")
        gate = self._gate(self.spec["model"], int(h["max_output_tokens"]), lambda: 0)
        gateway = self._gateway(gate)
        through_socket = sandbox.isolated and not bool(h.get("network"))
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
                    executable=self.executable,
                    workspace=root,
                    home=self.ws_dir / "home",
                    model=self.spec["model"],
                    base_url=base_url,
                    token=gateway.token,
                    instructions=h.get("instructions") or "",
                    mcp_command=(
                        sys.executable,
                        "-I",
                        "-S",
                        QUESTIONS_MCP_INSIDE if sandbox.isolated else str(QUESTIONS_MCP),
                    ),
                    held=self.held,
                    **{"prompt": self.spec["prompt"], **self._resume_parts()},
                )
                ended = await self._session(session, ctx, sandbox, scratch if through_socket else None, gateway)
            if ended.outcome == "completed" and self.workspace is not None:
                ended = await self._publish(gate, ended)
            elif ended.outcome == "parked":
                self.event({"kind": "session", "parked": True, "session_id": session.session_id})
                ended = await self.park(ended, session.session_id, session.state(ctx))
            return ended
        finally:
            await gateway.close()
            await gate.close()
            shutil.rmtree(scratch, ignore_errors=True)

    def _gateway(self, gate: Gate) -> Gateway:
        """The run's model gateway: a fresh token in (redacted from everything the run writes), the
        member's credential out, every call through the budget gate."""
        h = self.spec["harness"]
        gateway = Gateway(
            token=tokens.token_urlsafe(32),
            model=self.spec["model"],
            max_output_tokens=int(h["max_output_tokens"]),
            upstream=Upstream(
                self.spec["base_url"],
                self.secret_env.get("ANTHROPIC_API_KEY", ""),
                h.get("billing") or "PayPerApi",
                float(h.get("stall_timeout_seconds") or 120),
            ),
            reserve=lambda key, model, out, estimate: self._reserve(gate, key, model, out, estimate),
            settle=gate.settle_call,
            key_prefix=f"gw:{self.incarnation}",
            ask=lambda text, blocking: self.ask_question(gate, text, blocking),
        )
        self.output.hide(gateway.token)
        self.hidden.append(gateway.token)
        return gateway

    def _resume_parts(self) -> dict[str, Any]:
        """A run that resumes a parked session: its id and state, and the answers as the first message (with
        no state to resume, a new session gets the Task's prompt and the answers)."""
        h = self.spec["harness"]
        answers = h.get("resume_answers") or ""
        if not answers:
            return {}
        state = self.resume_state()
        if h.get("resume_session_id") and state:
            return {"resume_session_id": h["resume_session_id"], "resume_state": state, "prompt": answers}
        return {"prompt": f"{self.spec['prompt']}\n\n{answers}\n"}

    async def _reserve(self, gate: Any, key: str, model: str, max_output_tokens: int, estimate: int) -> str:
        try:
            reservation: str = await gate.reserve_call(key, model, max_output_tokens, estimate)
        except RunEnded as refused:
            self.output.write("system", f"model gateway: {refused.reason}\n")
            raise Refused(refused.code, refused.reason) from None
        return reservation

    async def _session(
        self, session: Session, ctx: SessionContext, sandbox: Sandbox, socket_dir: pathlib.Path | None, gateway: Gateway
    ) -> RunEnded:
        ctx.home.mkdir(parents=True, exist_ok=True)
        session.setup(ctx)
        for path in (ctx.workspace, ctx.home):  # the session user owns its workspace and $HOME, never the git dir
            workspace.hand_over(path, sandbox.policy.ids())
        argv = session.argv(ctx)
        binds = [
            Bind(install_root(ctx.executable), str(install_root(ctx.executable))),
            Bind(QUESTIONS_MCP, QUESTIONS_MCP_INSIDE),
        ]
        if socket_dir is not None:
            argv = [sys.executable, "-I", "-S", FORWARDER_INSIDE, "--port", str(GATEWAY_PORT)]
            argv += ["--socket", GATEWAY_INSIDE, "--", *session.argv(ctx)]
            binds += [Bind(FORWARDER, FORWARDER_INSIDE), Bind(socket_dir / "gw.sock", GATEWAY_INSIDE, writable=True)]
        git: dict[str, str] = {}
        if workspace.has_repository(ctx.workspace):  # git inside reads agentd's repository, read-only
            git = dict(workspace.SAFE_DIRECTORY_ENV)
            binds.append(Bind(workspace.git_dir(ctx.workspace), str(ctx.workspace / ".git")))
        env = {
            "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "LANG": "C.UTF-8",
            "TZ": "UTC",
            "HOME": str(ctx.home),
            "DROVER_WORKSPACE": str(ctx.workspace),
            "DROVER_RUN_ID": self.spec["run_id"],
            **git,
            **session.env(ctx),
        }
        try:
            writable = [ctx.workspace, ctx.home]
            with sandbox.wrap(argv, ctx.workspace, env, writable=writable, binds=binds) as launch:
                process = await asyncio.create_subprocess_exec(
                    *launch.argv,
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                    limit=16 << 20,  # a stream-json line carries whole tool results
                    **launch.spawn_kwargs(),
                )
        except (OSError, ValueError) as err:
            return RunEnded("failed", f"start_failed: cannot start {ctx.executable}: {err}", code="start_failed")
        self.output.write("system", f"{session.name}: session started ({os.path.basename(ctx.executable)})\n")
        stderr = asyncio.ensure_future(self._stderr(process))
        feeding = asyncio.ensure_future(self.feed_inputs(session_input.applied_through(self.run_dir)))
        driving = asyncio.ensure_future(session.drive(process, ctx, self.event, self.inputs))
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
        timeout = int(self.spec.get("timeout_seconds") or 0)
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
            if self.cancel_file.exists() or self.output.full:
                stop = "cancelled"
            elif self.park_requested:
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
            self.output.write("stderr", line.decode(errors="replace"))


def serve(run_dir: str, secrets: dict[str, Any]) -> None:
    """Supervise the runtime's run in `run_dir` (also what agentd/daemon/prefork.py calls in a forked supervisor)."""
    asyncio.run(RuntimeRun(pathlib.Path(run_dir), secrets).run())


def main() -> None:
    secrets = json.loads(sys.stdin.read() or "{}")
    sys.stdin.close()
    serve(sys.argv[1], secrets)


if __name__ == "__main__":
    main()
