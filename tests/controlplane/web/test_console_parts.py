"""The console's pure parts: the Task graph picture, transcript entries, the session cookie and CSRF field,
forms, and escaping of everything a run or a patch can contain."""

from __future__ import annotations

import datetime as dt
import json
import xml.etree.ElementTree as ET

import pytest

from controlplane.web import filters, project_form, receipts, session, spend_chart, task_graph, transcript
from drover.errors import InvalidArgument
from drover.models import Change, LogLine, Spend, SpendLine


def node(key: str, status: str = "ready", *deps: str) -> task_graph.Node:
    return task_graph.Node(key, status, tuple(deps), f"/runs/run_{key}")


def test_a_task_stands_right_of_everything_it_depends_on() -> None:
    nodes = [node("a"), node("b", "ready", "a"), node("c", "ready", "a", "b"), node("d")]
    assert task_graph.depths(nodes) == {"a": 0, "b": 1, "c": 2, "d": 0}


def test_a_cycle_or_a_missing_dependency_still_draws() -> None:
    nodes = [node("a", "blocked", "b"), node("b", "blocked", "a"), node("c", "ready", "gone")]
    drawn = ET.fromstring(task_graph.svg(nodes))  # well-formed XML
    assert len(drawn.findall(".//{http://www.w3.org/2000/svg}rect")) == 3


def test_the_graph_writes_each_status_and_links_each_run() -> None:
    picture = task_graph.svg([node("build", "succeeded"), node("test", "failed", "build")])
    root = ET.fromstring(picture)
    texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert texts == ["build", "succeeded", "test", "failed"]  # the status in words, not only in colour
    assert (
        'href="/runs/run_build"' in picture
        and 'aria-label="Task graph: build: succeeded; test: failed, after build"' in picture
    )


def test_names_in_the_graph_are_escaped() -> None:
    picture = task_graph.svg([task_graph.Node("<script>", "ready", (), "")])
    assert "<script>" not in picture and "&lt;script&gt;" in picture


def line(stream: str, text: str, seq: int = 1) -> LogLine:
    return LogLine("run_1", seq, stream, text, None)


def test_transcript_entries_of_plain_output_and_harness_events() -> None:
    assert transcript.entries(line("stdout", "a\nb\n")) == [
        {"seq": 1, "stream": "stdout", "kind": "stdout", "text": "a\nb", "failed": False}
    ]
    assert not transcript.entries(line("stderr", "Ran 3 tests\n\nOK\n"))[0]["failed"]  # stderr is no failure
    events = "\n".join(
        json.dumps(e)
        for e in (
            {"kind": "text", "text": "I will look"},
            {"kind": "tool_use", "tool": "read_file", "input": {"path": "a.py"}},
            {"kind": "tool_result", "tool": "read_file", "text": "print(1)", "error": False},
            {"kind": "result", "outcome": "completed", "text": "done"},
        )
    )
    kinds = [(e["kind"], e["text"].splitlines()[0]) for e in transcript.entries(line("event", events))]
    assert kinds == [
        ("text", "I will look"),
        ("tool_use", "read_file {"),
        ("tool_result", "read_file: print(1)"),
        ("result", "completed: done"),
    ]
    assert [e["failed"] for e in transcript.entries(line("event", events))] == [False] * 4
    failures = "\n".join(
        json.dumps(e)
        for e in (
            {"kind": "tool_result", "tool": "run_command", "text": "1 failed", "error": True},
            {"kind": "result", "outcome": "failed", "text": "gave up", "error": True},
        )
    )
    assert [e["failed"] for e in transcript.entries(line("event", failures))] == [True, True]
    assert transcript.entries(line("event", "not json")) == [
        {"seq": 1, "stream": "event", "kind": "event", "text": "not json", "failed": False}
    ]
    long = transcript.entries(line("stdout", "x" * 10_000))[0]["text"]
    assert len(long) < 4100 and long.endswith("(6000 more characters)")


def test_the_csrf_field_is_bound_to_the_token() -> None:
    assert session.csrf_ok("tok", session.csrf_token("tok"))
    assert not session.csrf_ok("tok", session.csrf_token("other"))
    assert not session.csrf_ok("", session.csrf_token(""))
    assert not session.csrf_ok("tok", "")


def test_the_cookie_is_http_only_strict_and_secure_under_tls() -> None:
    cookie = session.cookie_header("drv_u_x", secure=True)
    assert {"HttpOnly", "SameSite=Strict", "Secure", "Path=/"} <= set(cookie.split("; "))
    assert "Max-Age=0" in session.cookie_header("", secure=False)


def test_forms_are_parsed_and_bounded() -> None:
    assert session.parse_form(b"a=1&b=x%20y&a=2") == {"a": "2", "b": "x y"}
    with pytest.raises(ValueError):
        session.parse_form(b"a=" + b"x" * session.MAX_FORM_BYTES)


def test_a_preparation_form_is_read_line_by_line() -> None:
    assert project_form.lines(" make a \r\n\r\n\tmake b\n") == ["make a", "make b"]
    assert project_form.env_lines("A=1\r\n B = x=y \n\nC=\n") == {"A": "1", "B": " x=y", "C": ""}
    with pytest.raises(InvalidArgument) as no_eq:
        project_form.env_lines("A=1\n\nJUST_A_NAME\n")
    assert no_eq.value.field == "project.env" and "line 3" in str(no_eq.value)
    with pytest.raises(InvalidArgument) as twice:
        project_form.env_lines("A=1\nA=2\n")
    assert twice.value.field == 'project.env["A"]'
    assert [project_form.checked(v) for v in ("on", "off", None)] == [True, False, True]
    read = project_form.preparation({"setup": "x\ny", "setup_network": "off", "git_name": " Bot "})
    assert set(read) == set(project_form.PREPARATION)
    assert (read["setup"], read["setup_network"], read["git_name"], read["env"]) == (["x", "y"], False, "Bot", {})
    assert project_form.env_text({"B": "2", "A": "1"}) == "A=1\nB=2"
    assert not project_form.spans_lines(["make"], {"A": "1"})
    assert project_form.spans_lines(["make \\\n  all"], {}) and project_form.spans_lines([], {"A": "1\r\n2"})


def test_a_patch_is_escaped_and_marked_line_by_line() -> None:
    shown = str(filters.diff("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-<b>old</b>\n+<script>alert(1)</script>\n same"))
    assert "<script>" not in shown and "&lt;script&gt;" in shown
    kinds = [part.split('"')[1] for part in shown.split("<span class=")[1:]]
    assert kinds == ["d-file", "d-file", "d-hunk", "d-del", "d-add", "d-ctx"]
    # Each line is a block: a newline between blocks inside <pre> would show as an empty line after each.
    assert "\n" not in shown and shown.count("</span><span") == 5


RECEIPT = {
    "tier": "sonnet",
    "base_tier": "haiku",
    "rule": "default",
    "floor": "sonnet",
    "opus_disabled": False,
    "model_tier": "sonnet",
    "classifier": {"tier": "haiku", "confidence": 0.8, "reason": "answered"},
    "members": [
        {
            "route_key": "anthropic",
            "model": "m1",
            "billing": "PayPerApi",
            "base": 5,
            "effective": 5,
            "verdict": "chosen",
        },
        {"route_key": "sub", "model": "m2", "billing": "Subscription", "base": 7, "effective": 0, "verdict": "quota"},
    ],
    "outcome": "chosen",
    "member": "anthropic",
    "agent": "a1",
}


def test_a_receipt_reads_as_the_steps_of_the_decision() -> None:
    rows = [(s.name, s.result) for s in receipts.steps(RECEIPT)]
    assert rows == [
        ("Rules", "default"),
        ("Classifier", "haiku"),
        ("Floor", "sonnet"),
        ("Tier", "sonnet"),
        ("Member", "anthropic"),
        ("Agent", "a1"),
    ]
    assert receipts.steps(RECEIPT)[1].detail == "confidence 0.80, answered"
    assert receipts.candidates(RECEIPT)[1] == ["sub", "m2", "Subscription", "7", "0", "quota"]
    escalated = receipts.steps({"rule": "escalation", "escalation": "two_failures_at_haiku", "opus_disabled": True})
    assert [s.name for s in escalated][:3] == ["Escalation", "Rules", "Classifier"]
    assert (escalated[2].name, escalated[2].result, escalated[4].name) == ("Classifier", "not asked", "Opus gate")
    assert receipts.steps({})[-1].result == "not assigned yet"  # a receipt of a run not routed yet still reads


def test_spend_is_summed_by_project_tier_member_and_day() -> None:
    day = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)

    def change(project: str) -> Change:
        return Change(f"chg_{project}", project, "g", [], [], 0.0, [], "succeeded", "me", day, None, "", "", "", [], [])

    def spend(*lines: tuple[str, str, int]) -> Spend:
        return Spend("c", 0, 0, [SpendLine(t, m, m, 1, c) for t, m, c in lines], [])

    charts = spend_chart.charts(
        [
            (change("web"), spend(("sonnet", "s1", 3_000_000), ("haiku", "h1", 1_000_000))),
            (change("api"), spend(("sonnet", "s1", 500_000))),
        ]
    )
    rows = {c.title.split(" (")[0]: dict(c.rows) for c in charts}
    assert rows["Spend by project"] == {"web": 4_000_000, "api": 500_000}
    assert rows["Spend by tier"] == {"sonnet": 3_500_000, "haiku": 1_000_000}
    assert rows["Spend by member"] == {"s1": 3_500_000, "h1": 1_000_000}
    assert rows["Spend by day"] == {"2026-11-30": 4_500_000}
    assert "$3.5000" in str(charts[1].svg) and "no spend yet" in str(spend_chart.bars("Empty", ()))
