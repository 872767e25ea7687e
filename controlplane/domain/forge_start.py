"""What a kept forge delivery starts (issue 28), the pure part: an `issues` delivery labelled with the
project's forge label starts a Change, unless the issue already has one that has not finished; every
other delivery is done without action for now (comments, pull requests and fix rounds come later).
And what the started Change is made of: its goal and its one implement Task, from the issue."""

from __future__ import annotations

import dataclasses

from controlplane.domain import graph

START, SKIP = "start", "skip"
MAX_ISSUE_TEXT = 60 * 1024
"""The most of an issue's title and body kept in the goal (GitHub allows 65536 characters of body)."""


@dataclasses.dataclass(frozen=True)
class Decision:
    action: str  # start | skip
    why: str


def decide(event: str, action: str, label: str, forge_label: str, running_change: str) -> Decision:
    """Whether this delivery starts a Change: `running_change` is the issue's unfinished Change ("": none)."""
    if event != "issues" or action != "labeled":
        return Decision(SKIP, f"{event} {action}: nothing to do yet")
    if label != forge_label:
        return Decision(SKIP, f"label {label!r} is not the project's {forge_label!r}")
    if running_change:
        return Decision(SKIP, f"the issue already has Change {running_change}")
    return Decision(START, "labelled for Drover")


def goal(number: int, title: str, body: str) -> str:
    """The Change's goal: the issue's title, then its body, within the goal's limit."""
    text = f"{title.strip()} (issue #{number})"
    if body.strip():
        text += "\n\n" + body.strip()
    return text[: min(MAX_ISSUE_TEXT, graph.MAX_TEXT)]


def change_spec(project: str, number: int, title: str, body: str, budget_usd: float = 0.0) -> graph.ChangeSpec:
    """One `implement` Task, worked by the model, with the issue as its objective; complexity medium."""
    text = goal(number, title, body)
    task = graph.TaskSpec(key="implement", kind="implement", objective=text, traits={"complexity": "medium"})
    return graph.ChangeSpec(project=project, goal=text, tasks=(task,), budget_usd=budget_usd)


def started_comment(change_id: str, console_url: str = "") -> str:
    """The one comment on the issue: which Change started; a console link only when its URL is known."""
    text = f"Drover started Change {change_id} for this issue."
    if console_url:
        text += f" Follow it at {console_url.rstrip('/')}/changes/{change_id}"
    return text
