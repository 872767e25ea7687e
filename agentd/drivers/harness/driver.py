"""The harness driver: Drover's own model loop (agentd/drivers/harness/loop.py) works the Task with the
Task tools, every model call attempt reserved and settled through the control plane.

What it writes to the run's output: events (stream "event", one JSON object per line, each with the
transcript step it comes from), full tool inputs and outputs (stream "tool") and system lines. Started
again on the same RUN_DIR (a supervisor that died) it resumes from the transcript, emitting nothing twice."""

from __future__ import annotations

import asyncio
import json
import pathlib
from collections.abc import Callable
from typing import Any

import anthropic  # noqa: F401  drover.core.model imports it when first used: the prefork template's preload of this driver imports it now
import httpx2  # noqa: F401

from agentd import run_dir as run_dir_files
from agentd.drivers.harness.fold import FOLD_SYSTEM
from agentd.drivers.harness.loop import Harness, Limits, as_json_line, events_for
from agentd.drivers.harness.meter import Meter
from agentd.drivers.harness.tools import TaskTools
from agentd.drivers.harness.transcript import Transcript
from agentd.errors import RunEnded
from agentd.run import preparation
from agentd.run.conversation import Conversation
from agentd.run.sandbox import UNSANDBOXED
from agentd.run.spec import RunSpec
from agentd.run.supervisor import Run
from drover.core import allowlist
from drover.core.model import AnthropicModel
from drover.core.retry import RetryPolicy


def driver(spec: RunSpec) -> HarnessDriver:
    return HarnessDriver()


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


def start_transcript(run: Run) -> Transcript:
    """The run's transcript: a harness run that resumes a parked session starts from the parked one's
    (once: a restart finds it), the answers its next message."""
    path = run.run_dir / run_dir_files.TRANSCRIPT
    resumed = False
    if run.spec.driver == "harness" and not path.exists() and (state := run.resume_state()):
        path.write_bytes(state)
        resumed = True
    transcript = Transcript(path)
    if resumed:
        for question_id in transcript.open_questions:
            transcript.append("answered", id=question_id)
        transcript.append("user", text=run.spec.harness.resume_answers, input_seq=0, resumed=True)
    return transcript


def incarnation(run: Run) -> int:
    """How often a supervisor has started on this run, this one included (a resumed run's attempts get new keys)."""
    counter = run.run_dir / run_dir_files.INCARNATION
    count = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(count))
    return count


class HarnessDriver:
    crash_code = "harness_error"
    output_slack = 0

    async def drive(self, run: Run) -> RunEnded:
        self.run = run
        self.already = emitted_through(run.run_dir / run_dir_files.OUTPUT)
        self.transcript = start_transcript(run)
        self.incarnation = incarnation(run)
        self.conversation = Conversation(run.control_plane, self.transcript, run.output, self.incarnation)
        spec, h = run.spec, run.spec.harness
        root, writable = run.open_task_workspace()
        run.home.mkdir(parents=True, exist_ok=True)
        if root is not None and writable:
            await asyncio.to_thread(preparation.setup_workspace, run, root)
        limits = Limits(
            max_calls=h.max_calls,
            max_output_tokens=h.max_output_tokens,
            thinking=h.thinking,
            context_window=h.context_window_tokens,
            fold_fraction=h.fold_fraction,
        )
        fold_model = h.fold_model or spec.model
        meter = self._meter(spec.model, limits.max_output_tokens, lambda: self.transcript.model_calls + 1)
        fold_meter = self._meter(fold_model, 2000, lambda: len(self.transcript.entries), "fold")
        tools = self._tools(
            root, writable, lambda: max(limits.max_calls - max(meter.calls_used, self.transcript.model_calls), 0)
        )
        tools.ask = self.conversation.ask
        # the loop's calls think at the run's effort; a fold summary is a one-shot call that does not
        model, folder = self._model(spec.model, meter, h.effort), self._model(fold_model, fold_meter)

        async def summarise(request: list[dict[str, Any]]) -> str:
            reply = await folder.complete(
                system=[{"type": "text", "text": FOLD_SYSTEM}], tools=[], messages=request, max_tokens=2000
            )
            return "".join(b.get("text", "") for b in reply.content if b.get("type") == "text")

        harness = Harness(
            model, tools, self.transcript, limits, spec.prompt, self.emit, summarise, self.conversation.inputs
        )
        harness.held = self.conversation.held
        meter.input_estimate = lambda: harness.request_tokens
        # Input the transcript has taken is never taken again (a resumed run starts after it).
        feeding = asyncio.ensure_future(self.conversation.feed(self.transcript.inputs_applied))
        try:
            ended = await self._watch(harness, spec.timeout_seconds)
            if ended.outcome == "completed" and run.workspace is not None:
                ended = await run.publish(ended, self.transcript.written)
            elif ended.outcome == "parked":  # the transcript is the state the resuming run goes on from
                ended = await run.park(ended, "", self.transcript.path.read_bytes(), self.transcript.written)
            return ended
        finally:
            feeding.cancel()
            for closable in (model, folder):
                await closable.close()

    def emit(self, index: int, entry: dict[str, Any]) -> None:
        """A transcript entry as the run's events, and a finished tool call as its tool record."""
        if index <= self.already:
            return  # emitted before a restart
        output = self.run.output
        for event in events_for(index, entry):
            output.write("event", as_json_line(event))
        if entry["kind"] == "tool_done":
            started = next(
                (e for e in self.transcript.entries if e["kind"] == "tool_started" and e["id"] == entry["id"]), {}
            )
            record = {
                "id": entry["id"],
                "tool": entry["name"],
                "input": started.get("input", {}),
                "output": entry["text"],
                "error": entry["error"],
            }
            output.write("tool", json.dumps(record, ensure_ascii=False) + "\n")

    def _meter(
        self, model: str, max_output_tokens: int, call_number: Callable[[], int], purpose: str = "agent"
    ) -> Meter:
        """The meter of one kind of model call (the loop's, or folding's)."""
        return Meter(self.run.control_plane, model, max_output_tokens, self.incarnation, call_number, purpose)

    def _model(self, model: str, meter: Meter, effort: str = "") -> AnthropicModel:
        """A model client whose every attempt is reserved and settled through `meter`."""
        h = self.run.spec.harness
        policy = RetryPolicy(
            max_attempts=h.max_attempts,
            stall_timeout=h.stall_timeout_seconds,
            attempt_ceiling=h.attempt_ceiling_seconds,
        )
        return AnthropicModel(
            self.run.spec.base_url,
            self.run.secret_env.get("ANTHROPIC_API_KEY", ""),
            model,
            policy,
            before_attempt=meter.reserve,
            on_attempt=meter.settle,
            workspace_id=h.anthropic_workspace_id,
            effort=effort,
        )

    def _tools(self, root: pathlib.Path | None, writable: bool, calls_left: Callable[[], int]) -> TaskTools:
        """The Task tools, their commands run in the sandbox as the session user."""
        run, h = self.run, self.run.spec.harness
        sandbox, owner = None, None
        if writable:  # the commands run as the session user; the git directory stays root's
            sandbox = run.sandbox(h.network, hand_over=(root, run.home))
            owner = sandbox.policy.ids()
        elif run.spec.sandbox == "none":
            run.output.write("system", f"WARNING: {UNSANDBOXED}\n")
        env, binds = run.command_env(root, run.home)
        # test runs leave no caches behind to end up in the ChangeSet
        env.update({"PYTHONDONTWRITEBYTECODE": "1", "PYTEST_ADDOPTS": "-p no:cacheprovider"})
        rules = list(h.command_rules) or list(allowlist.DEFAULT_PYTHON_POLICY.rules)
        return TaskTools(
            root,
            writable,
            allowlist.policy_from_strings(rules),
            sandbox,
            env,
            calls_left,
            shown=[path for path in (root, run.home) if path is not None],
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
            if self.run.cancelled:  # a full disk too: the exit says disk_full
                stopped = "cancelled"
            elif deadline is not None and loop.time() >= deadline:
                stopped = "timeout"
            elif self.conversation.park_requested:  # no outcome in the transcript: the resuming run goes on
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
