"""Which kept forge deliveries start a Change (issue 28), and what that Change is made of: pure."""

from __future__ import annotations

import pytest

from controlplane.domain import forge_start, graph
from controlplane.domain.forge_start import SKIP, START, decide


def test_only_an_issue_labelled_with_the_projects_label_starts_a_change() -> None:
    assert decide("issues", "labeled", "drover", "drover", "").action == START
    assert decide("issues", "labeled", "ai: fix me", "ai: fix me", "").action == START


@pytest.mark.parametrize(
    ("event", "action", "label", "says"),
    [
        ("issues", "labeled", "bug", "label 'bug' is not the project's 'drover'"),
        ("issues", "labeled", "Drover", "label 'Drover' is not the project's 'drover'"),
        ("issues", "unlabeled", "drover", "issues unlabeled: nothing to do yet"),
        ("issues", "opened", "", "issues opened: nothing to do yet"),
        ("issue_comment", "edited", "", "issue_comment edited: nothing to do yet"),
        ("pull_request", "labeled", "drover", "pull_request labeled: nothing to do yet"),
        ("check_suite", "completed", "", "check_suite completed: nothing to do yet"),
    ],
)
def test_every_other_delivery_is_skipped_saying_why(event: str, action: str, label: str, says: str) -> None:
    assert decide(event, action, label, "drover", "") == forge_start.Decision(SKIP, says)


def test_an_issue_with_a_running_change_starts_no_second() -> None:
    assert decide("issues", "labeled", "drover", "drover", "chg_1") == forge_start.Decision(
        SKIP, "the issue already has Change chg_1"
    )


def test_the_change_is_the_issue_as_one_medium_implement_task() -> None:
    spec = forge_start.change_spec("web", 7, " Crash on save ", "Steps:\n1. save\n", 2.5)
    graph.validate(spec)
    assert spec.project == "web" and spec.budget_usd == 2.5
    assert spec.goal == "Crash on save (issue #7)\n\nSteps:\n1. save"
    (task,) = spec.tasks
    assert (task.key, task.kind, task.objective, task.command) == ("implement", "implement", spec.goal, ())
    assert dict(task.traits) == {"complexity": "medium"}
    assert forge_start.goal(3, "Title", "  ") == "Title (issue #3)"


def test_a_long_issue_is_cut_to_the_goals_limit() -> None:
    spec = forge_start.change_spec("web", 1, "T", "x" * (graph.MAX_TEXT * 2))
    graph.validate(spec)
    assert len(spec.goal) == forge_start.MAX_ISSUE_TEXT <= graph.MAX_TEXT


def test_the_comment_names_the_change_and_links_only_a_known_console() -> None:
    assert forge_start.started_comment("chg_abc") == "Drover started Change chg_abc for this issue."
    linked = forge_start.started_comment("chg_abc", "https://drover.example.com/")
    assert linked.endswith("Follow it at https://drover.example.com/changes/chg_abc")


def test_a_created_issue_comment_is_read_for_a_command() -> None:
    assert decide("issue_comment", "created", "", "drover", "chg_1").action == forge_start.COMMENT


def test_the_checklist_items_are_the_criteria_in_order() -> None:
    body = """Saving twice crashes.

- [ ] saving twice keeps the file
* [x] the error names the file
+ [X]   a test covers it
  - [ ] nested items count too
- [] not an item
- [ ]
-[ ] not an item either
1. [ ] numbered lists are not checklists
```
- [ ] inside a fence: code
```
- plain bullet"""
    assert forge_start.criteria(body) == (
        "saving twice keeps the file",
        "the error names the file",
        "a test covers it",
        "nested items count too",
    )
    assert forge_start.criteria("") == ()


def test_the_criteria_are_bounded() -> None:
    many = "\n".join(f"- [ ] item {i}" for i in range(forge_start.MAX_CRITERIA + 10))
    assert len(forge_start.criteria(many)) == forge_start.MAX_CRITERIA
    (long,) = forge_start.criteria("- [ ] " + "y" * 5000)
    assert len(long) == forge_start.MAX_CRITERION


def test_the_plan_adds_a_check_task_running_the_projects_command_after_implement() -> None:
    spec = forge_start.change_spec("web", 7, "Crash", "- [ ] no crash", 3.0, "pytest -q && ruff check .")
    graph.validate(spec)
    implement, check = spec.tasks
    assert (implement.key, implement.command) == ("implement", ())
    assert (check.key, check.kind, check.depends_on) == ("check", "check", ("implement",))
    assert check.command == ("sh", "-c", "pytest -q && ruff check .")
    assert "pytest -q && ruff check ." in check.objective
    assert (spec.criteria, spec.budget_usd) == (("no crash",), 3.0)
    assert [t.key for t in forge_start.change_spec("web", 7, "Crash", "", 0.0, "  ").tasks] == ["implement"]
