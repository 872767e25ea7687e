"""A model call attempt's ten-minute ceiling (seed 002 "Retries"), at the harness level with the real model
client and `anthropic` against the scripted fake over loopback: an attempt that streams steadily but runs
over the ceiling is cancelled and retried like a stall, and when every attempt breaks off (a stall, the
ceiling, a dropped connection) the last words the model got out stay in the transcript, marked
`[response interrupted]`, and are never sent back to the model."""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator
from typing import Any

import anthropic  # imported here, at collection: on a loaded machine the import alone takes seconds
import pytest

from agentd.drivers.harness.loop import Harness, Limits, events_for
from agentd.drivers.harness.tools import TaskTools
from agentd.drivers.harness.transcript import Transcript, messages
from drover.core.allowlist import DEFAULT_PYTHON_POLICY
from drover.core.model import AnthropicModel, ModelError
from drover.core.retry import RetryPolicy
from drover.testing.fake_anthropic import FakeAnthropic, stall, tool_use, trickle

pytestmark = pytest.mark.timeout(120)
assert anthropic.AsyncAnthropic
STALL, CEILING = 1.5, 3.0
SLOW = "slowly, one letter at a time, the model explains"  # a piece every 0.5 s: 24 s in all, never silent
EVERY = 0.5


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    with FakeAnthropic() as server:
        yield server


async def run_harness(fake: FakeAnthropic, tmp_path: pathlib.Path, attempts: int) -> tuple[Any, Transcript, list]:
    """Run a harness to its end; answers how it ended, its transcript and each attempt's error."""
    errors: list[ModelError | None] = []

    async def seen(attempt: int, usage: object, error: ModelError | None) -> None:
        errors.append(error)

    async def no_sleep(seconds: float) -> None:
        pass

    workspace = tmp_path / "ws"
    workspace.mkdir()
    policy = RetryPolicy(max_attempts=attempts, stall_timeout=STALL, attempt_ceiling=CEILING, base_delay=0.01)
    limits = Limits(max_calls=8, max_output_tokens=1000)
    transcript = Transcript(tmp_path / "transcript.jsonl")
    tools = TaskTools(workspace, True, DEFAULT_PYTHON_POLICY, None, {}, lambda: 8)
    events: list[dict[str, Any]] = []
    async with AnthropicModel(fake.base_url, "k", "m", policy, sleep=no_sleep, on_attempt=seen) as model:
        harness = Harness(
            model, tools, transcript, limits, "Task: explain.", lambda i, e: events.extend(events_for(i, e))
        )
        ended = await harness.run()
    return ended, Transcript(tmp_path / "transcript.jsonl"), errors + [events]  # type: ignore[list-item]


async def test_an_attempt_over_the_ceiling_is_retried_like_a_stall(fake: FakeAnthropic, tmp_path: pathlib.Path) -> None:
    fake.extend([trickle(SLOW, every=EVERY, pieces=len(SLOW)), tool_use("complete_task", {"summary": "explained"})])
    ended, transcript, (first, second, _) = await run_harness(fake, tmp_path, attempts=2)
    assert (ended.outcome, ended.reason) == ("completed", "explained")
    assert first is not None and "the attempt ran over its 3 s ceiling" in str(first)  # never silent for 1.5 s
    assert second is None
    assert [e["kind"] for e in transcript.entries] == ["prompt", "reply", "tool_started", "tool_done", "outcome"]
    assert SLOW[:2] not in str(fake.requests[1].body["messages"])  # the cut-off answer is not sent as said


async def test_when_every_attempt_breaks_off_the_last_partial_is_kept_as_interrupted(
    fake: FakeAnthropic, tmp_path: pathlib.Path
) -> None:
    fake.extend(
        [
            stall(30, partial="First I will read"),  # stalls mid-answer
            trickle(SLOW, every=EVERY, pieces=len(SLOW)),  # steady, over the ceiling
            stall(0.05, partial="Last words before the drop"),  # the connection drops mid-answer
            tool_use("complete_task", {"summary": "never reached"}),
        ]
    )
    ended, transcript, (*errors, events) = await run_harness(fake, tmp_path, attempts=3)
    assert ended.outcome == "transient"
    assert len(errors) == 3 and all(e is not None for e in errors)
    assert "no stream event for 1.5 s" in str(errors[0])
    assert "the attempt ran over its 3 s ceiling" in str(errors[1])
    assert len(fake.requests) == 3 and fake.pending == 1
    partial = [e for e in transcript.entries if e["kind"] == "partial"]
    assert [e["kind"] for e in transcript.entries] == ["prompt", "partial", "outcome"]
    assert partial[0]["text"] == "Last words before the drop\n[response interrupted]"
    assert partial[0]["call"] == 1 and partial[0]["reason"] == ended.reason
    assert transcript.model_calls == 0  # not a reply: nothing the model finished saying
    assert "Last words" not in str(messages(transcript))  # a resumed conversation would not carry it
    assert {"kind": "text", "text": partial[0]["text"], "interrupted": True, "step": 1} in events


async def test_a_stall_before_any_text_leaves_no_partial(fake: FakeAnthropic, tmp_path: pathlib.Path) -> None:
    fake.extend([stall(30), stall(30)])
    ended, transcript, _ = await run_harness(fake, tmp_path, attempts=2)
    assert ended.outcome == "transient"
    assert [e["kind"] for e in transcript.entries] == ["prompt", "outcome"]
