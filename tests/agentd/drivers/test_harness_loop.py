"""The harness loop with the real model client (and the real `anthropic` client under it) against the
scripted fake Messages API over loopback: how runs end, resuming from a transcript, folding, caching."""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from agentd.drivers.harness.fold import estimate_tokens
from agentd.drivers.harness.loop import SYSTEM, Harness, Limits, RunEnded, events_for
from agentd.drivers.harness.tools import TaskTools
from agentd.drivers.harness.transcript import INTERRUPTED, Transcript
from agentd.run.session_input import Input
from drover.core.allowlist import DEFAULT_PYTHON_POLICY
from drover.core.model import AnthropicModel
from drover.core.retry import RetryPolicy
from drover.testing.fake_anthropic import (
    FakeAnthropic,
    error,
    stall,
    text,
    tool_use,
    tool_uses,
)

pytestmark = pytest.mark.timeout(30)
PROMPT = "Task: make add() add. The tests are in test_calc.py."
EPHEMERAL = {"type": "ephemeral"}


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as server:
        yield server


@pytest.fixture
def workspace(tmp_path: pathlib.Path) -> pathlib.Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    return root


@dataclasses.dataclass
class Rig:
    """One run's parts: the real model client, the tools on a tmp_path workspace, a transcript file."""

    model: AnthropicModel
    workspace: pathlib.Path
    transcript_path: pathlib.Path
    sleeps: list[float] = dataclasses.field(default_factory=list)
    events: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    summaries: list[list[dict[str, Any]]] = dataclasses.field(default_factory=list)

    def harness(
        self, limits: Limits = Limits(max_calls=8, max_output_tokens=1000), fold: bool = False, writable: bool = True
    ) -> Harness:
        transcript = Transcript(self.transcript_path)  # read back from disk, as after a restart
        tools = TaskTools(
            self.workspace,
            writable,
            DEFAULT_PYTHON_POLICY,
            None,
            {},
            lambda: max(limits.max_calls - transcript.model_calls, 0),
        )
        return Harness(self.model, tools, transcript, limits, PROMPT, self.emit, self.summarise if fold else None)

    def emit(self, index: int, entry: dict[str, Any]) -> None:
        self.events.extend(events_for(index, entry))

    async def summarise(self, request: list[dict[str, Any]]) -> str:
        self.summaries.append(request)
        return f"summary-{len(self.summaries)}"


@pytest.fixture
async def rig(fake: FakeAnthropic, workspace: pathlib.Path, tmp_path: pathlib.Path) -> AsyncIterator[Rig]:
    sleeps: list[float] = []

    async def no_sleep(seconds: float) -> None:
        sleeps.append(seconds)

    policy = RetryPolicy(max_attempts=3, stall_timeout=1, base_delay=0.01)
    async with AnthropicModel(fake.base_url, "k", "m", policy, sleep=no_sleep) as model:
        yield Rig(model, workspace, tmp_path / "transcript.jsonl", sleeps)


def kinds(transcript: Transcript) -> list[str]:
    return [e["kind"] for e in transcript.entries]


def user_text(request_body: dict[str, Any]) -> list[str]:
    """The text blocks of the first (opening) user message."""
    return [b["text"] for b in request_body["messages"][0]["content"] if b["type"] == "text"]


# --- (a) a whole run ---------------------------------------------------------------------------

FIX = [
    tool_use("read_file", {"path": "calc.py"}, text="Let me look at calc.py."),
    tool_use("edit_file", {"path": "calc.py", "edits": [{"old_text": "a - b", "new_text": "a + b"}]}),
    tool_use("complete_task", {"summary": "add adds", "files_changed": ["calc.py"]}),
]


async def test_a_scripted_run_reads_edits_and_completes(rig: Rig, fake: FakeAnthropic) -> None:
    fake.extend(FIX)
    harness = rig.harness()
    ended = await harness.run()

    assert (ended.outcome, ended.reason) == ("completed", "add adds")
    assert ended.intent == {"summary": "add adds", "files_changed": ["calc.py"], "tests_run": [], "follow_ups": []}
    assert (rig.workspace / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert len(fake.requests) == 3 and fake.pending == 0

    transcript = Transcript(rig.transcript_path)  # what is on disk
    assert transcript.entries == harness.transcript.entries
    assert kinds(transcript) == [
        "prompt",
        "reply",
        "tool_started",
        "tool_done",
        "reply",
        "tool_started",
        "tool_done",
        "reply",
        "tool_started",
        "tool_done",
        "outcome",
    ]
    assert transcript.prompt == PROMPT
    replies = [e for e in transcript.entries if e["kind"] == "reply"]
    assert [r["call"] for r in replies] == [1, 2, 3]
    assert replies[0]["content"][0] == {"type": "text", "text": "Let me look at calc.py."}
    assert replies[0]["usage"]["input_tokens"] == 100
    for started, done in zip(transcript.entries[2::3], transcript.entries[3::3], strict=False):
        assert (started["kind"], done["kind"]) == ("tool_started", "tool_done")
        assert started["id"] == done["id"] and started["name"] == done["name"]
    done = [e for e in transcript.entries if e["kind"] == "tool_done"]
    assert done[0]["text"] == "def add(a, b):\n    return a - b\n\n[7 model calls remain]"
    assert done[1]["text"] == "edited calc.py (1 edit)\n[6 model calls remain]"
    assert (done[2]["text"], done[2]["error"]) == ("completed: recorded", False)
    assert transcript.outcome == {
        "kind": "outcome",
        "outcome": "completed",
        "reason": "add adds",
        "intent": ended.intent,
    }

    # The events, in step order, as the control plane would see them.
    assert [e["step"] for e in rig.events] == sorted(e["step"] for e in rig.events)
    assert [(e["kind"], e.get("tool")) for e in rig.events] == [
        ("text", None),
        ("tool_use", "read_file"),
        ("tool_result", "read_file"),
        ("tool_use", "edit_file"),
        ("tool_result", "edit_file"),
        ("tool_use", "complete_task"),
        ("tool_result", "complete_task"),
        ("result", None),
    ]
    assert rig.events[0] == {"kind": "text", "text": "Let me look at calc.py.", "step": 1}
    assert rig.events[-1] == {"kind": "result", "text": "add adds", "outcome": "completed", "error": False, "step": 10}

    # Each request carries the conversation so far: the edit's request holds the read's result.
    second = fake.requests[1].body["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "user"]
    assert second[0]["content"][0]["text"] == PROMPT
    result = second[2]["content"][0]
    assert (result["type"], result["tool_use_id"], result["content"], result["is_error"]) == (
        "tool_result",
        replies[0]["content"][1]["id"],
        done[0]["text"],
        False,
    )


# --- (b)-(d) other ends --------------------------------------------------------------------------


async def test_a_reply_without_a_tool_ends_with_no_outcome(rig: Rig, fake: FakeAnthropic) -> None:
    fake.add(text("I think it works now."))
    ended = await rig.harness().run()
    assert ended.outcome == "no_outcome"
    assert len(fake.requests) == 1
    assert kinds(Transcript(rig.transcript_path)) == ["prompt", "reply", "outcome"]
    assert rig.events[-1]["outcome"] == "no_outcome" and rig.events[-1]["error"] is True


async def test_the_call_cap_ends_the_run(rig: Rig, fake: FakeAnthropic) -> None:
    fake.extend([tool_use("list_files", {}), tool_use("read_file", {"path": "calc.py"}), tool_use("list_files", {})])
    ended = await rig.harness(Limits(max_calls=2, max_output_tokens=1000)).run()
    assert (ended.outcome, ended.reason) == ("run_call_cap", "2 model calls used")
    assert len(fake.requests) == 2 and fake.pending == 1
    done = [e for e in Transcript(rig.transcript_path).entries if e["kind"] == "tool_done"]
    assert done[-1]["text"].endswith("\n[0 model calls remain]")


@pytest.mark.parametrize(
    "script, outcome, requests",
    [
        ([error(400, "invalid_request_error", "prompt is too long")], "failed", 1),
        ([error(402, "billing_error", "no credit")], "spend_limited", 1),
        ([error(500, "api_error", "boom")] * 3, "transient", 3),
        ([error(429, "rate_limit_error", "slow down")] * 3, "rate_limited", 3),
    ],
)
async def test_model_errors_end_the_run(
    rig: Rig, fake: FakeAnthropic, script: list[Any], outcome: str, requests: int
) -> None:
    fake.extend(script)
    ended = await rig.harness().run()
    assert ended.outcome == outcome
    assert len(fake.requests) == requests
    assert rig.sleeps == [0.01, 0.02][: requests - 1]
    transcript = Transcript(rig.transcript_path)
    assert kinds(transcript) == ["prompt", "outcome"]
    assert transcript.outcome is not None and transcript.outcome["outcome"] == outcome


async def test_a_transient_error_then_success_goes_on(rig: Rig, fake: FakeAnthropic) -> None:
    fake.extend([error(529, "overloaded_error", "busy"), tool_use("fail_task", {"reason": "cannot"})])
    ended = await rig.harness().run()
    assert (ended.outcome, ended.reason, ended.intent) == ("failed", "cannot", {})
    assert len(fake.requests) == 2 and rig.sleeps == [0.01]
    assert Transcript(rig.transcript_path).model_calls == 1


async def test_a_stalled_stream_is_asked_again(rig: Rig, fake: FakeAnthropic) -> None:
    fake.extend([stall(5), tool_use("complete_task", {"summary": "after the stall"})])
    ended = await rig.harness().run()
    assert (ended.outcome, ended.reason) == ("completed", "after the stall")
    assert len(fake.requests) == 2 and rig.sleeps == [0.01]
    assert Transcript(rig.transcript_path).model_calls == 1  # the stalled attempt committed nothing


async def test_a_tool_call_with_bad_arguments_does_not_end_the_run(rig: Rig, fake: FakeAnthropic) -> None:
    fake.extend(
        [
            tool_use("edit_file", {"path": "calc.py", "edits": "a + b"}),
            tool_use("complete_task", {"summary": "recovered"}),
        ]
    )
    ended = await rig.harness().run()
    assert (ended.outcome, ended.reason) == ("completed", "recovered")
    result = fake.requests[1].body["messages"][-1]["content"][0]
    assert result["is_error"] is True and result["content"].startswith("bad arguments for edit_file: ")
    assert (rig.workspace / "calc.py").read_text() == "def add(a, b):\n    return a - b\n"


# --- (e) resuming --------------------------------------------------------------------------------


async def test_resume_never_runs_an_interrupted_tool_again(rig: Rig, fake: FakeAnthropic) -> None:
    written = Transcript(rig.transcript_path)
    written.append("prompt", text=PROMPT)
    reply = [
        {"type": "text", "text": "Three things."},
        {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "calc.py"}},
        {"type": "tool_use", "id": "toolu_2", "name": "write_file", "input": {"path": "second.txt", "content": "two"}},
        {"type": "tool_use", "id": "toolu_3", "name": "write_file", "input": {"path": "third.txt", "content": "three"}},
    ]
    written.append("reply", call=1, content=reply, usage={})
    written.append("tool_started", id="toolu_1", name="read_file", input={"path": "calc.py"})
    written.append("tool_done", id="toolu_1", name="read_file", text="as recorded\n[3 model calls remain]", error=False)
    written.append("tool_started", id="toolu_2", name="write_file", input={"path": "second.txt", "content": "two"})

    fake.add(tool_use("complete_task", {"summary": "resumed"}))
    harness = rig.harness()
    ended = await harness.run()
    assert (ended.outcome, ended.reason) == ("completed", "resumed")

    assert not (rig.workspace / "second.txt").exists()  # started before the restart: never again
    assert (rig.workspace / "third.txt").read_text() == "three"  # never started: runs now
    sent = fake.requests[0].body["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[0]["content"][0]["text"] == PROMPT
    assert sent[1]["content"] == reply
    results = [(b["tool_use_id"], b["content"], b["is_error"]) for b in sent[2]["content"]]
    assert results[0] == ("toolu_1", "as recorded\n[3 model calls remain]", False)
    assert results[1] == ("toolu_2", INTERRUPTED, True)
    assert results[2][0] == "toolu_3" and results[2][1].startswith("wrote third.txt (5 characters)\n")
    assert results[2][2] is False
    assert kinds(Transcript(rig.transcript_path))[5:] == [
        "tool_done",
        "tool_started",
        "tool_done",
        "reply",
        "tool_started",
        "tool_done",
        "outcome",
    ]
    assert harness.transcript.entries[5] == {
        "kind": "tool_done",
        "id": "toolu_2",
        "name": "write_file",
        "text": INTERRUPTED,
        "error": True,
    }


async def test_resume_after_a_torn_append_reports_the_tool_interrupted(rig: Rig, fake: FakeAnthropic) -> None:
    written = Transcript(rig.transcript_path)
    written.append("prompt", text=PROMPT)
    use = {"type": "tool_use", "id": "toolu_w", "name": "write_file", "input": {"path": "w.txt", "content": "w"}}
    written.append("reply", call=1, content=[use], usage={})
    written.append("tool_started", id="toolu_w", name="write_file", input=use["input"])
    with open(rig.transcript_path, "a", encoding="utf-8") as f:
        f.write('{"kind": "tool_done", "id": "toolu_w", "na')  # the crash came mid-append
    fake.add(tool_use("complete_task", {"summary": "checked"}))
    ended = await rig.harness().run()
    assert ended.outcome == "completed"
    assert not (rig.workspace / "w.txt").exists()
    result = fake.requests[0].body["messages"][-1]["content"][0]
    assert (result["tool_use_id"], result["content"], result["is_error"]) == ("toolu_w", INTERRUPTED, True)
    assert kinds(Transcript(rig.transcript_path)) == [
        "prompt",
        "reply",
        "tool_started",
        "tool_done",
        "reply",
        "tool_started",
        "tool_done",
        "outcome",
    ]


async def test_resume_after_a_model_call_in_flight_asks_again(rig: Rig, fake: FakeAnthropic) -> None:
    written = Transcript(rig.transcript_path)
    written.append("prompt", text=PROMPT)
    fake.add(tool_use("complete_task", {"summary": "asked again"}))
    ended = await rig.harness().run()
    assert ended.outcome == "completed"
    assert len(fake.requests) == 1
    assert kinds(Transcript(rig.transcript_path)) == ["prompt", "reply", "tool_started", "tool_done", "outcome"]


async def test_a_finished_transcript_returns_its_outcome_without_a_request(rig: Rig, fake: FakeAnthropic) -> None:
    written = Transcript(rig.transcript_path)
    written.append("prompt", text=PROMPT)
    written.append("outcome", outcome="completed", reason="done before", intent={"summary": "done before"})
    before = rig.transcript_path.read_bytes()
    ended = await rig.harness().run()
    assert (ended.outcome, ended.reason, ended.intent) == ("completed", "done before", {"summary": "done before"})
    assert fake.requests == []
    assert rig.transcript_path.read_bytes() == before and rig.events == []


# --- (f) folding -------------------------------------------------------------------------------

FOLD_LIMITS = Limits(max_calls=20, max_output_tokens=1000, context_window=4000, fold_fraction=0.5)


def numbered_file(path: pathlib.Path, lines: int) -> None:
    path.write_text("".join(f"{n:04d} " + "y" * 45 + "\n" for n in range(lines)))  # 50 characters a line


async def test_a_long_run_folds_its_older_exchanges(rig: Rig, fake: FakeAnthropic) -> None:
    numbered_file(rig.workspace / "big.txt", 40)  # each read result is about 2,000 characters
    reads = 8
    fake.extend([tool_use("read_file", {"path": "big.txt", "from_line": n + 1}) for n in range(reads)])
    fake.add(tool_use("complete_task", {"summary": "read it all"}))
    harness = rig.harness(FOLD_LIMITS, fold=True)
    ended = await harness.run()
    assert ended.outcome == "completed"
    assert len(fake.requests) == reads + 1

    transcript = Transcript(rig.transcript_path)
    folds = [(i, e) for i, e in enumerate(transcript.entries) if e["kind"] == "fold"]
    assert folds, "the run never folded"
    assert len(rig.summaries) == len(folds)
    assert [e["summary"] for _, e in folds] == [f"summary-{n + 1}" for n in range(len(folds))]
    assert [e["through"] for _, e in folds] == sorted({e["through"] for _, e in folds})  # never folded twice
    assert {"kind": "fold", "through": folds[0][1]["through"], "step": folds[0][0]} in rig.events

    for n, (index, entry) in enumerate(folds):
        calls = sum(1 for e in transcript.entries[:index] if e["kind"] == "reply")  # the fold preceded this call
        before, after = fake.requests[calls - 1].body, fake.requests[calls].body
        assert len(after["messages"]) < len(before["messages"])
        opening = user_text(after)
        assert opening[0] == PROMPT  # verbatim, first
        assert opening[1].endswith(f"summary-{n + 1}")
        # The request keeps exactly the exchanges after `through`: one assistant and one user message each.
        assert len(after["messages"]) == 1 + 2 * (calls - entry["through"] - 1)
        # The summary call got the previous summary and the newly folded exchanges.
        request = rig.summaries[n][0]["content"][0]["text"]
        assert request.startswith(f"Previous summary:\n{f'summary-{n}' if n else '(none)'}\n")

    # Every request after the first fold is back under the fold threshold.
    first_after = sum(1 for e in transcript.entries[: folds[0][0]] if e["kind"] == "reply")
    threshold = FOLD_LIMITS.context_window * FOLD_LIMITS.fold_fraction
    for request in fake.requests[first_after:]:
        sent = request.body
        assert sum(map(estimate_tokens, (sent["system"], sent["tools"], *sent["messages"]))) <= threshold
    assert not harness.fold_stalled


async def test_a_fold_with_nothing_to_fold_makes_no_call(rig: Rig, fake: FakeAnthropic) -> None:
    numbered_file(rig.workspace / "huge.txt", 600)  # one read of 30,000 characters: over the window alone
    fake.extend([tool_use("read_file", {"path": "huge.txt"}), tool_use("complete_task", {"summary": "ok"})])
    harness = rig.harness(FOLD_LIMITS, fold=True)
    ended = await harness.run()
    assert ended.outcome == "completed"
    assert rig.summaries == []
    assert not harness.fold_stalled  # only a fold that cannot get under the threshold stalls folding
    assert "fold" not in kinds(Transcript(rig.transcript_path))
    assert len(fake.requests[1].body["messages"]) == 3  # the newest exchange stays whole


async def test_without_a_summariser_nothing_folds(rig: Rig, fake: FakeAnthropic) -> None:
    numbered_file(rig.workspace / "big.txt", 40)
    fake.extend([tool_use("read_file", {"path": "big.txt"})] * 4 + [tool_use("complete_task", {"summary": "ok"})])
    ended = await rig.harness(FOLD_LIMITS, fold=False).run()
    assert ended.outcome == "completed"
    assert "fold" not in kinds(Transcript(rig.transcript_path))
    assert len(fake.requests[-1].body["messages"]) == 9


# --- (g) prompt caching ------------------------------------------------------------------------


async def test_requests_mark_the_cache_breakpoints(rig: Rig, fake: FakeAnthropic) -> None:
    fake.extend(
        [
            tool_uses([("list_files", {}), ("read_file", {"path": "calc.py"})]),
            tool_use("complete_task", {"summary": "ok"}),
        ]
    )
    assert (await rig.harness().run()).outcome == "completed"
    for request in fake.requests:
        body = request.body
        assert body["model"] == "m" and body["stream"] is True and body["max_tokens"] == 1000
        assert body["system"] == [{"type": "text", "text": SYSTEM, "cache_control": EPHEMERAL}]
        assert body["tools"][-1]["cache_control"] == EPHEMERAL
        assert all("cache_control" not in t for t in body["tools"][:-1])
        assert body["messages"][-1]["content"][-1]["cache_control"] == EPHEMERAL
        blocks = [b for m in body["messages"] for b in m["content"]]
        assert sum("cache_control" in b for b in blocks) == 1  # only the latest message's last block
    last = fake.requests[-1].body["messages"][-1]["content"]
    assert [b["type"] for b in last] == ["tool_result", "tool_result"]
    # The marker is added to what is sent, never written into the transcript.
    assert "cache_control" not in str(Transcript(rig.transcript_path).entries)


async def test_run_ended_carries_its_outcome() -> None:
    ended = RunEnded("run_call_cap", "2 model calls used")
    assert (str(ended), ended.code, ended.intent) == ("run_call_cap: 2 model calls used", "run_call_cap", {})


# --- people's input ----------------------------------------------------------------------------


def said(body: dict[str, Any]) -> list[str]:
    return [
        b["text"]
        for m in body["messages"]
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "text" and b["text"].startswith("A person working with you says:")
    ]


async def test_a_message_goes_with_the_next_request_as_the_users(rig: Rig, fake: FakeAnthropic) -> None:
    fake.extend(FIX)
    inputs: asyncio.Queue[Input] = asyncio.Queue()
    inputs.put_nowait(Input("message", "Keep the signature.", "inp_1", 1))
    harness = rig.harness()
    harness.inputs = inputs
    ended = await harness.run()

    assert ended.outcome == "completed"
    assert said(fake.requests[0].body) == ["A person working with you says:\nKeep the signature."]
    assert said(fake.requests[2].body) == said(fake.requests[0].body)  # it stays in the conversation
    assert next(e for e in rig.events if e["kind"] == "user")["text"] == "Keep the signature."
    assert harness.transcript.inputs_applied == 1


async def test_an_interrupt_stops_the_model_call_and_its_text_is_the_next_message(
    rig: Rig, fake: FakeAnthropic
) -> None:
    fake.extend([stall(5), *FIX])
    inputs: asyncio.Queue[Input] = asyncio.Queue()
    harness = rig.harness()
    harness.inputs = inputs
    asyncio.get_running_loop().call_later(0.3, inputs.put_nowait, Input("interrupt", "Use a + b.", "inp_1", 1))
    ended = await harness.run()

    assert ended.outcome == "completed"
    shown = [(e["kind"], e.get("text")) for e in rig.events if e["kind"] in ("result", "user")]
    assert shown[:2] == [("result", "interrupted by a person"), ("user", "Use a + b.")]
    assert said(fake.requests[1].body) == ["A person working with you says:\nUse a + b."]
    assert kinds(harness.transcript)[:3] == ["prompt", "interrupted", "user"]


async def test_an_interrupt_without_text_ends_the_run_failed(rig: Rig, fake: FakeAnthropic) -> None:
    fake.extend([stall(5), *FIX])
    inputs: asyncio.Queue[Input] = asyncio.Queue()
    harness = rig.harness()
    harness.inputs = inputs
    asyncio.get_running_loop().call_later(0.3, inputs.put_nowait, Input("interrupt", "", "inp_1", 1))
    ended = await harness.run()

    assert (ended.outcome, ended.code) == ("failed", "interrupted")
    assert len(fake.requests) == 1
    assert harness.transcript.outcome is not None and harness.transcript.inputs_applied == 1
