"""What a kept forge delivery starts (issue 28), the pure part: an `issues` delivery labelled with the
project's forge label starts a Change, unless the issue already has one that has not finished; every
comment created on an issue is read as a possible `/drover` command (controlplane.domain.forge_commands);
every other delivery is done without action for now. And what the started Change is made of: its goal
from the issue, its acceptance criteria from the body's checklist, and the project's plan: an implement
Task, then a check Task running the project's check command when it has one."""

from __future__ import annotations

import dataclasses
import re

from controlplane.domain import graph

START, SKIP, COMMENT = "start", "skip", "comment"
MAX_ISSUE_TEXT = 60 * 1024
"""The most of an issue's title and body kept in the goal (GitHub allows 65536 characters of body)."""
MAX_CRITERIA = 50
MAX_CRITERION = 1000
"""The most checklist items taken as criteria, and the characters kept of each (SubmitChange allows 100 of 4 KiB)."""
CHECKLIST_ITEM = re.compile(r"^[ \t]*[-*+][ \t]+\[[ xX]\][ \t]+(\S.*?)[ \t]*$")
"""`- [ ] text`, `* [x] text`, `+ [X] text`: a Markdown task list item, unchecked or checked."""


@dataclasses.dataclass(frozen=True)
class Decision:
    action: str  # start | skip
    why: str


def decide(event: str, action: str, label: str, forge_label: str, running_change: str) -> Decision:
    """Whether this delivery starts a Change: `running_change` is the issue's unfinished Change ("": none)."""
    if event == "issue_comment" and action == "created":
        return Decision(COMMENT, "a comment: read for a /drover command")
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


def criteria(body: str) -> tuple[str, ...]:
    """The body's checklist items (`- [ ] text`, checked or not), in order, at most MAX_CRITERIA, each cut
    to MAX_CRITERION characters; lines inside ``` fences are code, not a checklist."""
    found: list[str] = []
    fenced = False
    for line in body.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        item = None if fenced else CHECKLIST_ITEM.match(line)
        if item:
            found.append(item.group(1)[:MAX_CRITERION])
            if len(found) == MAX_CRITERIA:
                break
    return tuple(found)


def plan(objective: str, check_command: str = "") -> tuple[graph.TaskSpec, ...]:
    """The project's plan template: one `implement` Task worked by the model (complexity medium), then,
    when the project has a check command, a `check` Task running it with `sh -c` on the implement Task's
    work."""
    implement = graph.TaskSpec(key="implement", kind="implement", objective=objective, traits={"complexity": "medium"})
    if not check_command.strip():
        return (implement,)
    check = graph.TaskSpec(
        key="check",
        kind="check",
        objective=f"Run the project's check command on the implement Task's work: {check_command}"[: graph.MAX_TEXT],
        depends_on=("implement",),
        command=("sh", "-c", check_command),
    )
    return (implement, check)


def change_spec(
    project: str, number: int, title: str, body: str, budget_usd: float = 0.0, check_command: str = ""
) -> graph.ChangeSpec:
    """The issue as a Change: its goal, its checklist as criteria, the plan's Tasks and the budget."""
    text = goal(number, title, body)
    return graph.ChangeSpec(
        project=project, goal=text, tasks=plan(text, check_command), criteria=criteria(body), budget_usd=budget_usd
    )


def started_comment(change_id: str, console_url: str = "") -> str:
    """The one comment on the issue: which Change started; a console link only when its URL is known."""
    text = f"Drover started Change {change_id} for this issue."
    if console_url:
        text += f" Follow it at {console_url.rstrip('/')}/changes/{change_id}"
    return text
