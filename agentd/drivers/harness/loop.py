"""The harness loop: ask the model, run the tools it asks for, until complete_task or fail_task.

Small and exception-driven (STYLE.md rows 1-2): every way a run ends is an exception
carrying its outcome. The transcript is written after every step, so a restarted
supervisor resumes after the last committed step."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from agentd.drivers.harness import fold
from agentd.drivers.harness.tools import Finished, TaskTools
from agentd.drivers.harness.transcript import INTERRUPTED, RESPONSE_INTERRUPTED, Transcript, messages
from agentd.errors import AgentdError, RunEnded
from agentd.run.session_input import Input
from drover.core.model import ModelError, ModelReply
from drover.core.retry import is_context_limit

T = TypeVar("T")

SYSTEM = (
    "You are a coding agent working on one Task of a Change in a git repository, unattended. "
    "Use the tools to inspect and change the repository and to run the allowed commands. "
    "Make the smallest change that meets the Task's objective and the Change's criteria, check it, "
    "then call complete_task with your intent (summary, files changed, tests run, follow-ups). "
    "If you cannot do the Task, call fail_task with the reason. Every tool result says how many "
    "model calls remain; plan to finish before they run out."
)


class ModelClient(Protocol):
    async def complete(
        self,
        *,
        system: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        messages: list[dict[str, Any]],
        max_tokens: int,
        thinking: dict[str, Any] | None = None,
    ) -> ModelReply: ...


COMPACTION_EXHAUSTED = "compaction_exhausted"
"""The run's reason when the provider rejects the request as over its context window and folding cannot help."""

STOPPED = "stopped: a person interrupted this step before the tool finished; its effects are unknown"


class Interrupted(AgentdError):
    """A person's interrupt stopped the step under way."""


@dataclasses.dataclass(frozen=True)
class Limits:
    max_calls: int
    max_output_tokens: int
    thinking: dict[str, Any] | None = None
    context_window: int = 200_000
    fold_fraction: float = 0.7


Emit = Callable[[int, dict[str, Any]], None]


def cached(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A copy whose last block carries cache_control (prompt caching)."""
    if not blocks:
        return blocks
    return [*blocks[:-1], {**blocks[-1], "cache_control": {"type": "ephemeral"}}]


class Harness:
    def __init__(
        self,
        model: ModelClient,
        tools: TaskTools,
        transcript: Transcript,
        limits: Limits,
        prompt: str,
        emit: Emit,
        summarise: Callable[[list[dict[str, Any]]], Awaitable[str]] | None = None,
        inputs: asyncio.Queue[Input] | None = None,
    ) -> None:
        self.model, self.tools, self.transcript, self.limits = model, tools, transcript, limits
        self.inputs = inputs  # people's messages and interrupts (agentd/run/session_input.py)
        self.messages: list[Input] = []  # waiting for the next step
        self.interrupts: list[Input] = []
        self._interrupted = asyncio.Event()
        self._arrived = asyncio.Event()  # an input came in
        self.held: Callable[[], bool] = lambda: False
        """An open blocking question: a reply without a tool call waits for input instead of ending the run."""
        self.prompt = prompt
        self.emit = emit  # projects a transcript entry into run events
        self.summarise = summarise  # the fold's haiku call
        self.fold_stalled = False
        self.request_tokens = 0

    def _append(self, kind: str, **fields: Any) -> None:
        index = self.transcript.append(kind, **fields)
        self.emit(index, self.transcript.entries[index])

    async def run(self) -> RunEnded:
        """Run (or resume) to the end; answers how it ended, recorded in the transcript."""
        done = self.transcript.outcome
        final = ""
        if done is not None:
            return RunEnded(done["outcome"], done.get("reason", ""), done.get("intent"), code=done.get("code"))
        if not self.transcript.entries:
            self._append("prompt", text=self.prompt)
        listening = asyncio.ensure_future(self._listen()) if self.inputs is not None else None
        await asyncio.sleep(0)  # input already waiting goes with the first request
        try:
            await self._finish_open_tools()
            await self._resume_between_turns()
            while True:
                try:
                    await self.step()
                except Interrupted:
                    self._stopped()
        except Finished as finished:
            ended = RunEnded(finished.outcome, finished.reason, finished.intent)
            final = finished.reason  # complete_task's summary, fail_task's reason
        except ModelError as err:
            ended = RunEnded(err.outcome, str(err))
        except RunEnded as err:
            ended = err
        finally:
            if listening is not None:
                listening.cancel()
        extra = {"code": ended.code} if ended.code != ended.outcome else {}
        self._append("outcome", outcome=ended.outcome, reason=ended.reason, intent=ended.intent, **extra)
        ended.extra["compactions"] = self.transcript.compactions
        ended.extra["result"] = {
            "text": final or self.transcript.last_said(),
            "turns": self.transcript.model_calls,
            "success": ended.ok,
            "compactions": self.transcript.compactions,
        }
        return ended

    # --- people's input ----------------------------------------------------------------------------

    async def _listen(self) -> None:
        assert self.inputs is not None
        while True:
            item = await self.inputs.get()
            if item.kind == "interrupt":
                self.interrupts.append(item)
                self._interrupted.set()
            else:
                self.messages.append(item)
            self._arrived.set()

    def _deliver(self) -> bool:
        """Messages waiting go into the conversation (each a user event); answers whether there were any."""
        delivered = bool(self.messages)
        while self.messages:
            item = self.messages.pop(0)
            self._append("user", text=item.text, input_seq=item.seq)
        return delivered

    async def _interruptible(self, work: Awaitable[T]) -> T:
        """`work`, unless an interrupt comes first: then it is stopped and Interrupted raised."""
        task = asyncio.ensure_future(work)
        stop = asyncio.ensure_future(self._interrupted.wait())
        try:
            await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        if task.done():
            return task.result()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise Interrupted()

    def _stopped(self) -> None:
        """After an interrupt: the open tool calls are answered as stopped, the turn ends failed, and the
        interrupt's text is the next message; without text the run ends."""
        exchanges = self.transcript.exchanges()
        if exchanges:
            for use in exchanges[-1].tool_uses:
                if use["id"] not in exchanges[-1].results:
                    self._append("tool_done", id=use["id"], name=use["name"], text=STOPPED, error=True)
        item = self.interrupts.pop(0)
        if not self.interrupts:
            self._interrupted.clear()
        self._append("interrupted", text=item.text, input_seq=item.seq)
        if not item.text:
            raise RunEnded("failed", "interrupted by a person", code="interrupted")
        self.messages.insert(0, dataclasses.replace(item, kind="message", seq=0))

    async def step(self) -> None:
        if self._interrupted.is_set():
            raise Interrupted()
        self._deliver()
        if self.transcript.model_calls >= self.limits.max_calls:
            raise RunEnded("run_call_cap", f"{self.limits.max_calls} model calls used")
        await self._maybe_fold()
        try:
            reply = await self._call()
        except ModelError as err:
            if not is_context_limit(err.status, err.error_type, err.message):
                raise
            # seed 002: one reactive fold and one more call; over the window again, the run ends
            if not await self._fold(reactive=True):
                raise RunEnded("failed", f"nothing left to fold: {err}", code=COMPACTION_EXHAUSTED) from err
            try:
                reply = await self._call()
            except ModelError as again:
                if not is_context_limit(again.status, again.error_type, again.message):
                    raise
                reason = f"still over the context window after folding: {again}"
                raise RunEnded("failed", reason, code=COMPACTION_EXHAUSTED) from again
        self._append(
            "reply", call=self.transcript.model_calls + 1, content=reply.content, usage=dataclasses.asdict(reply.usage)
        )
        uses = [b for b in reply.content if b.get("type") == "tool_use"]
        if not uses:
            await self._turn_ended()
            return
        for use in uses:
            await self._run_tool(use)

    async def _call(self) -> ModelReply:
        """One model call with the conversation as it stands; a failed one keeps its last partial words."""
        conversation = messages(self.transcript)
        conversation[-1] = {**conversation[-1], "content": cached(conversation[-1]["content"])}
        self.request_tokens = self._context_tokens()  # the meter reserves on this estimate
        try:
            return await self._interruptible(
                self.model.complete(
                    system=cached([{"type": "text", "text": SYSTEM}]),
                    tools=cached(self.tools.definitions()),
                    messages=conversation,
                    max_tokens=self.limits.max_output_tokens,
                    thinking=self.limits.thinking,
                )
            )
        except ModelError as err:
            if err.partial:  # every attempt failed: the last words the model got out, marked as cut off
                text = f"{err.partial}\n{RESPONSE_INTERRUPTED}"
                self._append("partial", call=self.transcript.model_calls + 1, text=text, reason=str(err))
            raise

    async def _turn_ended(self) -> None:
        """The model ended its turn without a tool call: held by an open blocking question, wait for input;
        with input waiting, the next step delivers it; else the run ends as no_outcome."""
        await asyncio.sleep(0)  # input that came with the reply is in
        while self.held() and not (self.messages or self._interrupted.is_set()):
            self._arrived.clear()  # held: wait for the answer (or any message, or an interrupt)
            await self._arrived.wait()
        if self.messages or self._interrupted.is_set():
            return  # the next step delivers it: a person answered the model
        raise RunEnded("no_outcome", "the model ended its turn without complete_task or fail_task")

    async def _resume_between_turns(self) -> None:
        """After a restart: a last reply without a tool call, with nothing said since, was a turn that ended
        (held, or about to end the run); go on from there instead of asking the model again."""
        exchanges = self.transcript.exchanges()
        if exchanges and not exchanges[-1].tool_uses and not exchanges[-1].said:
            await self._turn_ended()

    async def _run_tool(self, use: dict[str, Any]) -> None:
        self._append("tool_started", id=use["id"], name=use["name"], input=use.get("input", {}))
        try:
            result = await self._interruptible(self.tools.call(use["name"], use.get("input") or {}))
        except Finished as finished:
            self._append("tool_done", id=use["id"], name=use["name"], text=f"{finished.outcome}: recorded", error=False)
            raise
        self._append("tool_done", id=use["id"], name=use["name"], text=result.text, error=result.error)

    async def _finish_open_tools(self) -> None:
        """After a restart: tool calls of the last reply that never started run now; one that started
        and did not finish is reported as interrupted, never run again."""
        exchanges = self.transcript.exchanges()
        if not exchanges:
            return
        last = exchanges[-1]
        for use in last.tool_uses:
            if use["id"] in last.results:
                continue
            if use["id"] in last.started and use["name"] not in ("complete_task", "fail_task"):
                self._append("tool_done", id=use["id"], name=use["name"], text=INTERRUPTED, error=True)
            else:
                await self._run_tool(use)

    def _fixed_tokens(self) -> int:
        """The system prompt, the tools and the opening message (with the running summary)."""
        return (
            fold.estimate_tokens(SYSTEM)
            + fold.estimate_tokens(self.tools.definitions())
            + fold.estimate_tokens(messages(self.transcript, [])[0])
        )

    def _context_tokens(self) -> int:
        return (
            fold.estimate_tokens(SYSTEM)
            + fold.estimate_tokens(self.tools.definitions())
            + sum(fold.estimate_tokens(m) for m in messages(self.transcript))
        )

    async def _maybe_fold(self) -> None:
        if not self.fold_stalled:
            await self._fold(reactive=False)

    async def _fold(self, reactive: bool) -> bool:
        """Fold older exchanges into the running summary; answers whether it did. A proactive fold waits
        for the threshold; a reactive one (the provider said the request is over its window) folds
        whatever lies outside the tail now, stalled or not."""
        if self.summarise is None:
            return False
        exchanges = _exchange_messages(self.transcript.exchanges())
        previous = self.transcript.latest_fold()
        through = previous["through"] if previous else -1
        plan = fold.plan(
            [fold.estimate_tokens(m) for m in exchanges],
            through,
            self._fixed_tokens(),
            self.limits.context_window,
            0.0 if reactive else self.limits.fold_fraction,
        )
        if plan is None:
            return False
        if plan.fold_through < 0:
            return False  # nothing left to fold: no call (a later exchange may give the fold something to fold)
        summary = await self.summarise(
            fold.fold_request(previous["summary"] if previous else "", exchanges[through + 1 : plan.fold_through + 1])
        )
        self._append("fold", summary=summary, through=plan.fold_through, **({"reactive": True} if reactive else {}))
        if self._context_tokens() > self.limits.context_window * self.limits.fold_fraction:
            self.fold_stalled = True  # still over the threshold: stop folding for the rest of the turn
        return True


def _exchange_messages(exchanges: list[Any]) -> list[dict[str, Any]]:
    """One plain record per exchange (the reply and its results), for sizing and summarising."""
    return [
        {
            "reply": ex.reply["content"],
            "results": [{"id": k, "text": v["text"], "error": v["error"]} for k, v in ex.results.items()],
        }
        for ex in exchanges
    ]


def events_for(index: int, entry: dict[str, Any]) -> list[dict[str, Any]]:
    """The run events (seed 003's kinds) that a transcript entry stands for."""
    kind = entry["kind"]
    if kind == "reply":
        out = []
        for block in entry["content"]:
            if block.get("type") == "text" and block.get("text"):
                out.append({"kind": "text", "text": block["text"]})
            elif block.get("type") == "tool_use":
                out.append({"kind": "tool_use", "tool": block["name"], "input": block.get("input", {})})
        return [{**e, "step": index} for e in out]
    if kind == "tool_done":
        text = entry["text"].encode()[:4000].decode(errors="ignore")
        return [{"kind": "tool_result", "tool": entry["name"], "text": text, "error": entry["error"], "step": index}]
    if kind == "outcome":
        return [
            {
                "kind": "result",
                "text": entry.get("reason", ""),
                "outcome": entry["outcome"],
                "error": entry["outcome"] != "completed",
                "step": index,
            }
        ]
    if kind == "fold":
        reactive = {"reactive": True} if entry.get("reactive") else {}
        return [{"kind": "fold", "through": entry["through"], **reactive, "step": index}]
    if kind == "partial":
        return [{"kind": "text", "text": entry["text"], "interrupted": True, "step": index}]
    if kind == "user":
        return [{"kind": "user", "text": entry["text"], "step": index}]
    if kind == "interrupted":
        return [
            {
                "kind": "result",
                "text": "interrupted by a person",
                "outcome": "interrupted",
                "error": True,
                "step": index,
            }
        ]
    return []


def as_json_line(event: dict[str, Any]) -> str:
    return json.dumps(event, ensure_ascii=False) + "\n"
