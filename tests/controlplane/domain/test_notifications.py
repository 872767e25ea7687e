"""The pure part of notifications out: which stored events notify, the payload and Slack text, the
signature headers, the backoff, what an attempt's answer does, and how far the cursor may move."""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
from typing import Any

import pytest

from controlplane.domain import notifications as n

T0 = dt.datetime(2026, 12, 3, 13, 0, 0, tzinfo=dt.UTC)


def stored(kind: str, **data: Any) -> n.StoredEvent:
    return n.StoredEvent(7, kind, "chg_1", "tsk_1", "run_1", "web", data, T0)


@pytest.mark.parametrize(
    ("kind", "data", "event"),
    [
        ("change.finished", {"status": "succeeded"}, "change.finished"),
        ("change.finished", {"status": "budget_blocked", "limit": "change-usd"}, "change.finished"),
        ("question.asked", {"blocking": True}, "question.asked"),
        ("budget.stopped", {"limit": "change-usd"}, "budget.stopped"),
        ("run.finished", {"status": "failed", "reason": "exit_code"}, "run.failed"),
        ("run.finished", {"status": "succeeded"}, None),
        ("run.finished", {"status": "cancelled"}, None),
        ("forge.round_started", {"round": 2}, "round.started"),
        ("change.submitted", {}, None),
        ("task.failed", {"reason": "boom"}, None),
        ("notification.delivered", {}, None),
    ],
)
def test_which_stored_events_notify(kind: str, data: dict[str, Any], event: str | None) -> None:
    assert n.notification_event(kind, data) == event
    if event is not None:
        assert kind in n.SOURCE_KINDS and event in n.EVENTS


def test_a_payload_holds_ids_status_reason_time_and_link_but_never_text() -> None:
    asked = stored("question.asked", question_id="q_1", blocking=True, text="the secret plan is hunter2")
    p = n.payload("question.asked", asked, "https://drover.example/")
    assert p == {
        "event": "question.asked",
        "change": "chg_1",
        "project": "web",
        "task": "tsk_1",
        "run": "run_1",
        "status": "",
        "reason": "a blocking question",
        "time": "2026-12-03T13:00:00Z",
        "question": "q_1",
        "console": "https://drover.example/changes/chg_1",
    }
    assert "hunter2" not in json.dumps(p)
    failed = n.payload("run.failed", stored("run.finished", status="failed", reason="x" * 2000, error="output..."))
    assert len(failed["reason"]) == n.MAX_REASON and "console" not in failed and "output" not in json.dumps(failed)
    stop = n.payload("budget.stopped", stored("budget.stopped", limit="change-usd", reason="would pass $5.00"))
    assert stop["reason"] == "change-usd: would pass $5.00"
    round_ = n.payload("round.started", stored("forge.round_started", round=2, pr_number=14))
    assert (round_["round"], round_["pull_request"]) == (2, 14)


@pytest.mark.parametrize(
    ("event", "data", "text"),
    [
        ("change.finished", {"status": "succeeded"}, "Drover: Change chg_1 in web finished: succeeded"),
        (
            "change.finished",
            {"status": "budget_blocked", "limit": "change-usd"},
            "Drover: Change chg_1 in web finished: budget_blocked (change-usd)",
        ),
        ("question.asked", {"blocking": False}, "Drover: Change chg_1 in web asks a question (task tsk_1)"),
        ("budget.stopped", {"limit": "change-usd"}, "Drover: Change chg_1 in web stopped on a budget (change-usd)"),
        (
            "run.failed",
            {"status": "failed", "reason": "timeout"},
            "Drover: Run run_1 of Change chg_1 in web failed (timeout)",
        ),
        ("round.started", {"round": 3}, "Drover: Change chg_1 in web started fix round 3"),
    ],
)
def test_slack_text_says_what_happened_in_one_line(event: str, data: dict[str, Any], text: str) -> None:
    p = n.payload(event, stored("x", **data))
    assert n.slack_text(p) == text
    linked = n.payload(event, stored("x", **data), "https://drover.example")
    assert n.slack_text(linked) == text + " <https://drover.example/changes/chg_1|open in the console>"
    assert json.loads(n.body("slack", linked)) == {"text": n.slack_text(linked)}


def test_the_body_is_canonical_json_and_the_signature_is_its_hmac() -> None:
    p = n.payload("change.finished", stored("change.finished", status="failed", reason="conflict"))
    sent = n.body("json", p)
    assert json.loads(sent) == p and sent == n.body("json", dict(reversed(p.items())))
    headers = n.headers(b"s3cret", "ntf_1", "change.finished", sent)
    expected = "sha256=" + hmac.new(b"s3cret", sent, hashlib.sha256).hexdigest()
    assert headers == {
        "Content-Type": "application/json",
        "X-Drover-Signature-256": expected,
        "X-Drover-Delivery": "ntf_1",
        "X-Drover-Event": "change.finished",
    }


def test_a_targets_secret_is_not_in_its_repr() -> None:
    target = n.Target("ops", "https://hooks.example/x", ("change.finished",), secret=b"s3cret")
    assert "s3cret" not in repr(target)


def test_backoff_doubles_from_one_second_to_five_minutes() -> None:
    assert [n.backoff(a) for a in range(1, 12)] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]


@pytest.mark.parametrize(
    ("attempts", "status", "error", "outcome"),
    [
        (1, 200, "", n.AttemptOutcome("delivered")),
        (3, 204, "", n.AttemptOutcome("delivered")),
        (1, 500, "", n.AttemptOutcome("pending", 1.0, "HTTP 500")),
        (2, 500, "", n.AttemptOutcome("pending", 2.0, "HTTP 500")),
        (4, 0, "ConnectError: refused", n.AttemptOutcome("pending", 8.0, "ConnectError: refused")),
        (9, 301, "", n.AttemptOutcome("pending", 256.0, "HTTP 301")),  # a redirect is not followed
        (10, 500, "", n.AttemptOutcome("failed", error="HTTP 500")),
        (10, 200, "", n.AttemptOutcome("delivered")),
    ],
)
def test_what_an_attempts_answer_does(attempts: int, status: int, error: str, outcome: n.AttemptOutcome) -> None:
    assert n.after_attempt(attempts, status, error) == outcome


def test_the_cursor_moves_through_contiguous_ids_and_past_a_gap_only_once_it_is_old() -> None:
    now = T0 + dt.timedelta(minutes=5)
    fresh, old = now - dt.timedelta(seconds=1), now - dt.timedelta(seconds=n.GAP_SECONDS + 1)
    assert n.advance_cursor(10, [(11, fresh), (12, fresh), (13, fresh)], now) == 13
    assert n.advance_cursor(10, [(11, fresh), (13, fresh), (14, fresh)], now) == 11  # 12 may commit yet
    assert n.advance_cursor(10, [(11, old), (13, old), (14, fresh)], now) == 14  # 12 was rolled back
    assert n.advance_cursor(10, [(12, fresh)], now) == 10
    assert n.advance_cursor(10, [], now) == 10
