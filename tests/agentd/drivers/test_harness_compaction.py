"""Reactive compaction (issue 29, seed 002): a provider context-limit rejection folds once and asks once more;
rejected again, or with nothing left to fold, the run ends `compaction_exhausted`. At the harness level with
the real model client and `anthropic` against the scripted fake over loopback; the fold's summary is a real
call to the same fake, as the driver makes it."""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import anthropic  # imported here, at collection: on a loaded machine the import alone takes seconds
import pytest

from agentd.drivers.harness.fold import FOLD_SYSTEM
from agentd.drivers.harness.loop import COMPACTION_EXHAUSTED, Harness, Limits, RunEnded, events_for
from agentd.drivers.harness.tools import TaskTools
from agentd.drivers.harness.transcript import Transcript
from drover.core.allowlist import DEFAULT_PYTHON_POLICY
from drover.core.model import AnthropicModel
from drover.core.retry import RetryPolicy, is_context_limit
from drover.testing.fake_anthropic import FakeAnthropic, context_limit, error, text, tool_use

pytestmark = pytest.mark.timeout(60)
assert anthropic.AsyncAnthropic
PROMPT = "Task: read the notes and say what they are about."
# Under the 0.7 fold threshold (5,600 tokens) all along, so no proactive fold; a tail of 2,000 tokens keeps
# the newest exchanges, so a forced fold has the older reads to fold.
LIMITS = Limits(max_calls=20, max_output_tokens=1000, context_window=8000, fold_fraction=0.7)
READS = 4
SUMMARY = "The notes are numbered lines of y."


@dataclasses.dataclass
class Ran:
    ended: RunEnded
    transcript: Transcript
    events: list[dict[str, Any]]


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    with FakeAnthropic() as server:
        yield server


async def run_harness(fake: FakeAnthropic, tmp_path: pathlib.Path) -> Ran:
    """Run a harness that folds (its summary asked of the fake too) to its end."""
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    (workspace / "notes.txt").write_text("".join(f"{n:04d} " + "y" * 45 + "\n" for n in range(40)))
    policy = RetryPolicy(max_attempts=2, base_delay=0.01)
    transcript = Transcript(tmp_path / "transcript.jsonl")
    tools = TaskTools(workspace, True, DEFAULT_PYTHON_POLICY, None, {}, lambda: LIMITS.max_calls)
    events: list[dict[str, Any]] = []
    async with (
        AnthropicModel(fake.base_url, "k", "sonnet", policy) as model,
        AnthropicModel(fake.base_url, "k", "haiku", policy) as folder,
    ):

        async def summarise(request: list[dict[str, Any]]) -> str:
            reply = await folder.complete(
                system=[{"type": "text", "text": FOLD_SYSTEM}], tools=[], messages=request, max_tokens=2000
            )
            return "".join(b.get("text", "") for b in reply.content if b.get("type") == "text")

        harness = Harness(
            model, tools, transcript, LIMITS, PROMPT, lambda i, e: events.extend(events_for(i, e)), summarise
        )
        ended = await harness.run()
    return Ran(ended, Transcript(tmp_path / "transcript.jsonl"), events)


def reads() -> list[Any]:
    return [tool_use("read_file", {"path": "notes.txt", "from_line": n + 1}) for n in range(READS)]


def kinds(transcript: Transcript) -> list[str]:
    return [e["kind"] for e in transcript.entries]


async def test_a_context_limit_rejection_folds_once_and_the_retry_goes_on(
    fake: FakeAnthropic, tmp_path: pathlib.Path
) -> None:
    fake.extend([*reads(), context_limit(), text(SUMMARY), tool_use("complete_task", {"summary": "about y"})])
    ran = await run_harness(fake, tmp_path)
    assert (ran.ended.outcome, ran.ended.code, ran.ended.reason) == ("completed", "completed", "about y")
    assert len(fake.requests) == READS + 3 and fake.pending == 0

    folds = [(i, e) for i, e in enumerate(ran.transcript.entries) if e["kind"] == "fold"]
    assert len(folds) == 1, "exactly one fold, the reactive one"
    index, entry = folds[0]
    assert entry["reactive"] is True and entry["summary"] == SUMMARY and entry["through"] >= 0
    assert kinds(ran.transcript)[index - 1] == "tool_done"  # no reply in between: the rejection left none
    assert {"kind": "fold", "through": entry["through"], "reactive": True, "step": index} in ran.events
    assert ran.transcript.compactions == 1 and ran.ended.extra["compactions"] == 1

    rejected, summary_call, retried = (r.body for r in fake.requests[READS : READS + 3])
    assert summary_call["system"][0]["text"] == FOLD_SYSTEM and summary_call["model"] == "haiku"
    assert len(retried["messages"]) < len(rejected["messages"])  # the folded exchanges are gone
    assert SUMMARY in str(retried["messages"][0]) and SUMMARY not in str(rejected["messages"])


async def test_rejected_again_after_folding_ends_compaction_exhausted(
    fake: FakeAnthropic, tmp_path: pathlib.Path
) -> None:
    fake.extend([*reads(), context_limit(), text(SUMMARY), context_limit(), tool_use("complete_task", {})])
    ran = await run_harness(fake, tmp_path)
    assert (ran.ended.outcome, ran.ended.code, ran.ended.status) == ("failed", COMPACTION_EXHAUSTED, "failed")
    assert ran.ended.reason.startswith("still over the context window after folding: 400 invalid_request_error")
    assert len(fake.requests) == READS + 3 and fake.pending == 1  # one retry only
    assert kinds(ran.transcript)[-2:] == ["fold", "outcome"]
    assert ran.ended.extra["compactions"] == 1
    outcome = ran.transcript.outcome
    assert outcome is not None and outcome["code"] == COMPACTION_EXHAUSTED

    # Started again on the finished transcript (a restarted supervisor), the run ends the same way, asking nothing.
    again = await run_harness(fake, tmp_path)
    assert (again.ended.outcome, again.ended.code) == ("failed", COMPACTION_EXHAUSTED)
    assert len(fake.requests) == READS + 3


async def test_nothing_to_fold_ends_compaction_exhausted_without_a_second_call(
    fake: FakeAnthropic, tmp_path: pathlib.Path
) -> None:
    fake.extend([context_limit(), tool_use("complete_task", {"summary": "never asked"})])
    ran = await run_harness(fake, tmp_path)
    assert (ran.ended.outcome, ran.ended.code) == ("failed", COMPACTION_EXHAUSTED)
    assert ran.ended.reason.startswith("nothing left to fold: 400 invalid_request_error: prompt is too long")
    assert len(fake.requests) == 1 and fake.pending == 1
    assert kinds(ran.transcript) == ["prompt", "outcome"]
    assert ran.ended.extra["compactions"] == 0
    assert {"kind": "result", "outcome": "failed", "error": True, "text": ran.ended.reason, "step": 1} in ran.events


async def test_another_invalid_request_is_a_plain_failure_without_a_fold(
    fake: FakeAnthropic, tmp_path: pathlib.Path
) -> None:
    fake.extend([*reads(), error(400, "invalid_request_error", "max_tokens: must be at most 64000")])
    ran = await run_harness(fake, tmp_path)
    assert (ran.ended.outcome, ran.ended.code) == ("failed", "failed")
    assert "fold" not in kinds(ran.transcript) and len(fake.requests) == READS + 1


@pytest.mark.parametrize(
    "status, error_type, message, limit",
    [
        (400, "invalid_request_error", "400 invalid_request_error: prompt is too long: 208310 tokens > 200000", True),
        (400, "invalid_request_error", "input length and `max_tokens` exceed context limit: 197000 + 21333", True),
        (400, "invalid_request_error", "max_tokens: must be at most 64000", False),
        (413, "request_too_large", "Request exceeds the maximum allowed number of bytes", False),
        (None, "overloaded_error", "prompt is too long", False),
    ],
)
def test_which_rejections_are_a_context_limit(status: int | None, error_type: str, message: str, limit: bool) -> None:
    assert is_context_limit(status, error_type, message) is limit
