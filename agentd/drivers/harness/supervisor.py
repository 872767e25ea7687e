"""The supervisor of one harness run: `python -m agentd.drivers.harness.supervisor RUN_DIR`.

Secrets arrive as JSON on stdin ({"secret_env", "agent_token", "channel"}; "channel" is
agentd's ChannelSettings, TLS as file paths) and never touch the disk. Like the command
supervisor it is detached from agentd and writes everything to RUN_DIR/output.jsonl:
events (stream "event", one JSON object per line, each with the transcript step it comes
from), full tool inputs and outputs (stream "tool"), system lines, and last the exit
record. Started again on the same RUN_DIR it resumes from the transcript."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import sys
import traceback
from collections.abc import Callable
from typing import Any

from agentd.daemon import run_disk
from agentd.daemon.connection import ChannelSettings
from agentd.daemon.outbox import is_full
from agentd.drivers.harness.gate import Gate
from agentd.drivers.harness.loop import Harness, Limits, RunEnded, as_json_line, events_for
from agentd.drivers.harness.talk import Talk
from agentd.drivers.harness.tools import TaskTools
from agentd.drivers.harness.transcript import Transcript
from agentd.drivers.runtimes import Input
from agentd.run.output import Output
from agentd.run.sandbox import UNSANDBOXED, Bind, SandboxFailed
from agentd.run.supervisor import GIT_TOKEN, attach_disk, limits_hit, sandbox_for
from drover.core import allowlist, build_outputs, gitspace, workspace
from drover.core.model import AnthropicModel
from drover.core.retry import RetryPolicy
from drover.v1 import agent_pb2

STATUS = {"completed": "succeeded", "cancelled": "cancelled", "parked": "succeeded"}


def emitted_through(path: pathlib.Path) -> int:
    """The last transcript step whose events are already in output.jsonl (-1: none)."""
    last = -1
    if path.exists():
        for raw in path.read_bytes().splitlines():
            try:
                record = json.loads(raw)
            except ValueError:
                continue
            if record.get("s") == "event":
                last = max(last, json.loads(record["t"]).get("step", -1))
    return last


class HarnessRun(Talk):
    def __init__(self, run_dir: pathlib.Path, secrets: dict[str, Any]) -> None:
        self.run_dir = run_dir
        self.spec = json.loads((run_dir / "assignment.json").read_text())
        self.secret_env: dict[str, str] = secrets.get("secret_env", {})
        self.agent_token = secrets.get("agent_token", "")
        self.channel = ChannelSettings(**secrets.get("channel", {"control_plane": ""}))
        self.already = emitted_through(run_dir / "output.jsonl")
        hidden = [*self.secret_env.values(), self.agent_token]
        self.hidden = hidden
        self.output = Output(run_dir / "output.jsonl", hidden, int(self.spec.get("output_limit_bytes", 8 << 20)))
        resumed = self._restore_transcript(run_dir / "transcript.jsonl")
        self.transcript = Transcript(run_dir / "transcript.jsonl")
        if resumed:  # the parked session goes on with the answers as its next message
            for question_id in self.transcript.open_questions:
                self.transcript.append("answered", id=question_id)
            answers = self.spec["harness"].get("resume_answers") or ""
            self.transcript.append("user", text=answers, input_seq=0, resumed=True)
        counter = run_dir / "incarnation"
        self.incarnation = int(counter.read_text()) + 1 if counter.exists() else 1
        counter.write_text(str(self.incarnation))
        self.cancel_file = run_dir / "cancel"
        self.ws_dir = pathlib.Path(self.spec["workspace_dir"])
        self.workspace: gitspace.Workspace | None = None
        self.inputs: asyncio.Queue[Input] = asyncio.Queue()
        # blocking questions not answered yet: id -> text (kept in the transcript: a restart is still held)
        self.open_questions: dict[str, str] = self.transcript.open_questions
        self.asked = 0
        self.park_requested = False  # the control plane said: held too long, park

    def emit(self, index: int, entry: dict[str, Any]) -> None:
        if index <= self.already:
            return  # emitted before a restart
        for event in events_for(index, entry):
            self.output.write("event", as_json_line(event))
        if entry["kind"] == "tool_done":
            started = next(
                (e for e in self.transcript.entries if e["kind"] == "tool_started" and e["id"] == entry["id"]), {}
            )
            self.output.write(
                "tool",
                json.dumps(
                    {
                        "id": entry["id"],
                        "tool": entry["name"],
                        "input": started.get("input", {}),
                        "output": entry["text"],
                        "error": entry["error"],
                    },
                    ensure_ascii=False,
                )
                + "\n",
            )

    # --- the workspace ---------------------------------------------------------------------------

    def open_root(self) -> tuple[pathlib.Path | None, bool]:
        h = self.spec["harness"]
        mode, repo_dir = h["workspace_mode"], self.ws_dir / "repo"
        token = self.secret_env.get(GIT_TOKEN, "")
        state = self.run_dir / "workspace.json"
        if mode == "none":
            return None, False
        attach_disk(self.spec)
        if mode == "read":
            if not workspace.has_repository(repo_dir):
                workspace.prepare(repo_dir, self.spec["repo"], self.spec["branch"], token)
            return repo_dir, False
        if h.get("resume_branch") and not state.exists():  # resuming a parked session: its WIP branch
            saved = json.loads(h.get("resume_workspace_json") or "{}")
            self.output.write("system", f"workspace: resuming {h['resume_branch']}\n")
            workspace.prepare(repo_dir, self.spec["repo"], h["resume_branch"], token)
            gitspace.detach(repo_dir)
            state.write_text(json.dumps(saved))
        if state.exists() and workspace.has_repository(repo_dir):  # resumed: the workspace is as the run left it
            saved = json.loads(state.read_text())
            self.workspace = gitspace.Workspace(
                repo_dir,
                saved["base_commit"],
                saved["start_commit"],
                saved["stacked_on"],
                token,
                gitspace.DEFAULT_IDENTITY,
                self.spec["repo"],
            )
            return repo_dir, True
        stack = [gitspace.StackItem(**item) for item in self.spec.get("stack", [])]
        self.output.write(
            "system",
            f"workspace: cloning {workspace.redact_url(self.spec['repo'])} at "
            f"{self.spec['branch']}" + (f", merging {len(stack)} ChangeSets" if stack else "") + "\n",
        )
        self.workspace = gitspace.open_workspace(repo_dir, self.spec["repo"], self.spec["branch"], stack, token)
        state.write_text(
            json.dumps(
                {
                    "base_commit": self.workspace.base_commit,
                    "start_commit": self.workspace.start_commit,
                    "stacked_on": self.workspace.stacked_on,
                }
            )
        )
        return repo_dir, True

    # --- the run ---------------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            ended = await self._run()
        except gitspace.MergeConflict as conflict:
            ended = RunEnded(
                "failed",
                f"dependency_merge_conflict: {', '.join(conflict.files)} ({conflict.changeset_id})",
                code="dependency_merge_conflict",
            )
        except workspace.WorkspaceError as err:
            ended = RunEnded("failed", f"workspace_failed: {err}", code="workspace_failed")
        except SandboxFailed as err:  # never run the model's commands any other way
            ended = RunEnded("failed", f"sandbox_failed: {err}", code="sandbox_failed")
        except Exception as err:  # a bug or an unreachable control plane: end the run, say why
            traceback.print_exc()
            if is_full(err):  # the transcript or the workspace state could not be written
                ended = RunEnded("failed", f"disk_full: {err}", code="disk_full")
            else:
                ended = RunEnded("failed", f"harness_error: {type(err).__name__}: {err}", code="harness_error")
        ok = ended.outcome in ("completed", "parked")
        for line in limits_hit(self.spec):
            self.output.write("system", f"{line}\n")
        self.output.exit(
            STATUS.get(ended.outcome, "failed"), 0 if ok else 1, ended.code, "" if ok else ended.reason, **ended.extra
        )
        if not self.spec.get("keep_workspace"):
            run_disk.release(self.ws_dir)
            workspace.remove(self.ws_dir)

    async def _run(self) -> RunEnded:
        h = self.spec["harness"]
        root, writable = self.open_root()
        limits = Limits(
            max_calls=int(h["max_calls"]),
            max_output_tokens=int(h["max_output_tokens"]),
            thinking=json.loads(h["thinking_json"]) if h.get("thinking_json") else None,
            context_window=int(h.get("context_window_tokens") or 200_000),
            fold_fraction=float(h.get("fold_fraction") or 0.7),
        )
        fold_model = h.get("fold_model") or self.spec["model"]
        gate = self._gate(self.spec["model"], limits.max_output_tokens, lambda: self.transcript.model_calls + 1)
        fold_gate = self._gate(fold_model, 2000, lambda: len(self.transcript.entries), "fold")
        tools = self._tools(
            root, writable, lambda: max(limits.max_calls - max(gate.calls_used, self.transcript.model_calls), 0)
        )
        tools.ask = lambda text, blocking: self.ask_question(gate, text, blocking)
        model, folder = self._model(self.spec["model"], gate), self._model(fold_model, fold_gate)

        async def summarise(request: list[dict[str, Any]]) -> str:
            reply = await folder.complete(
                system=[{"type": "text", "text": _fold_system()}], tools=[], messages=request, max_tokens=2000
            )
            return "".join(b.get("text", "") for b in reply.content if b.get("type") == "text")

        harness = Harness(model, tools, self.transcript, limits, self.spec["prompt"], self.emit, summarise, self.inputs)
        harness.held = self.held
        gate.input_estimate = lambda: harness.request_tokens
        # Input the transcript has taken is never taken again (a resumed run starts after it).
        feeding = asyncio.ensure_future(self.feed_inputs(self.transcript.inputs_applied))
        try:
            ended = await self._watch(harness, int(self.spec.get("timeout_seconds") or 0))
            if ended.outcome == "completed" and self.workspace is not None:
                ended = await self._publish(gate, ended)
            elif ended.outcome == "parked":  # the transcript is the state the resuming run goes on from
                ended = await self.park(ended, "", self.transcript.path.read_bytes())
            return ended
        finally:
            feeding.cancel()
            for closable in (model, folder, gate, fold_gate):
                await closable.close()

    def _gate(self, model: str, max_output_tokens: int, call_number: Callable[[], int], purpose: str = "agent") -> Gate:
        """The budget gate of one kind of model call (the loop's, or folding's)."""
        return Gate(
            self.channel,
            self.agent_token,
            self.spec["run_id"],
            model,
            max_output_tokens,
            self.incarnation,
            call_number,
            purpose,
        )

    def _model(self, model: str, gate: Gate) -> AnthropicModel:
        """A model client whose every attempt is reserved and settled through `gate`."""
        h = self.spec["harness"]
        policy = RetryPolicy(
            max_attempts=int(h.get("max_attempts") or 4), stall_timeout=float(h.get("stall_timeout_seconds") or 120)
        )
        return AnthropicModel(
            self.spec["base_url"],
            self.secret_env.get("ANTHROPIC_API_KEY", ""),
            model,
            policy,
            before_attempt=gate.reserve,
            on_attempt=gate.settle,
        )

    def _tools(self, root: pathlib.Path | None, writable: bool, calls_left: Callable[[], int]) -> TaskTools:
        """The Task tools, their commands run in the sandbox as the session user."""
        h = self.spec["harness"]
        sandbox, owner = None, None
        home = self.ws_dir / "home"
        home.mkdir(parents=True, exist_ok=True)
        if self.spec.get("sandbox") == "none":
            self.output.write("system", f"WARNING: {UNSANDBOXED}\n")
        if writable:
            try:
                sandbox = sandbox_for(self.spec, bool(h.get("network")))
                owner = sandbox.policy.ids() if os.geteuid() == 0 else None
            except ValueError as err:
                raise SandboxFailed(str(err)) from None
            for path in (root, home):  # the commands run as the session user; the git directory stays root's
                if path is not None:
                    workspace.hand_over(path, owner)
        env = {
            "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "LANG": "C.UTF-8",
            "TZ": "UTC",
            "HOME": str(home),
            "DROVER_WORKSPACE": str(root or ""),
            "DROVER_RUN_ID": self.spec["run_id"],
            # test runs leave no caches behind to end up in the ChangeSet
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTEST_ADDOPTS": "-p no:cacheprovider",
        }
        binds = []
        if root is not None and workspace.has_repository(root):  # git inside reads agentd's repository
            env.update(workspace.SAFE_DIRECTORY_ENV)
            binds.append(Bind(workspace.git_dir(root), str(root / ".git")))
        rules = h.get("command_rules") or list(allowlist.DEFAULT_PYTHON_POLICY.rules)
        return TaskTools(
            root,
            writable,
            allowlist.policy_from_strings(rules),
            sandbox,
            env,
            calls_left,
            shown=[path for path in (root, home) if path is not None],
            binds=binds,
            owner=owner,
        )

    async def _watch(self, harness: Harness, timeout: int) -> RunEnded:
        """Run the loop; a cancel file or the timeout stops it (a running tool is killed)."""
        task = asyncio.create_task(harness.run())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout if timeout > 0 else None
        stopped = ""
        while not task.done():
            await asyncio.wait({task}, timeout=0.1)
            if task.done():
                break
            if self.cancel_file.exists() or self.output.full:  # a full disk: the exit says disk_full
                stopped = "cancelled"
            elif deadline is not None and loop.time() >= deadline:
                stopped = "timeout"
            elif self.park_requested:  # no outcome in the transcript: the run that resumes it goes on from it
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                return RunEnded("parked", "parked while waiting for answers")
            if stopped:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                ended = RunEnded(
                    stopped, "cancelled by request" if stopped == "cancelled" else f"timed out after {timeout} s"
                )
                harness._append("outcome", outcome=ended.outcome, reason=ended.reason, intent={})
                return ended
        return task.result()

    async def _publish(self, gate: Gate, ended: RunEnded) -> RunEnded:
        summary = ended.intent.get("summary", "") or ended.reason
        result = await self.commit_workspace(f"{self.spec['task_key']}: {summary}"[:500])
        left_out = build_outputs.summary(result.left_out, self.build_outputs)
        ref = await gate.publish(
            agent_pb2.PublishChangeSetRequest(
                run_id=self.spec["run_id"],
                branch=result.branch,
                commit=result.commit,
                base_commit=result.base_commit,
                start_commit=result.start_commit,
                stacked_on=result.stacked_on,
                files=result.files,
                own_files=result.own_files,
                patch=result.patch,
                summary=summary,
                intent_json=json.dumps(ended.intent),
                left_out=left_out,
            )
        )
        left = f"; left out as build outputs: {', '.join(left_out)}" if left_out else ""
        self.output.write(
            "system",
            f"published ChangeSet {ref.changeset_id} on {result.branch} ({len(result.own_files)} files{left})\n",
        )
        return ended


def _fold_system() -> str:
    from agentd.drivers.harness.fold import FOLD_SYSTEM

    return FOLD_SYSTEM


def serve(run_dir: str, secrets: dict[str, Any]) -> None:
    """Supervise the harness run in `run_dir` (also what agentd/daemon/prefork.py calls in a forked supervisor)."""
    asyncio.run(HarnessRun(pathlib.Path(run_dir), secrets).run())


def main() -> None:
    secrets = json.loads(sys.stdin.read() or "{}")
    sys.stdin.close()
    serve(sys.argv[1], secrets)


if __name__ == "__main__":
    main()
