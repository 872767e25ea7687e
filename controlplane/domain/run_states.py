"""Run states and the transitions between them, as in seed 003's diagram."""

from __future__ import annotations

from drover.errors import FailedPrecondition

TRANSITIONS = frozenset(
    {
        ("queued", "starting"),  # assigned to an agent
        ("queued", "cancelled"),
        ("starting", "queued"),  # the agent refused it
        ("starting", "running"),  # session started
        ("starting", "failed"),  # could not start
        ("running", "succeeded"),  # exit code 0
        ("running", "failed"),  # non-zero exit, error, timeout, agent gone
        ("running", "cancelled"),
        ("failed", "succeeded"),  # judged agent_lost, then its agent's success came (domain/presence.py)
    }
)
TERMINAL = frozenset({"succeeded", "failed", "cancelled"})
ACTIVE = frozenset({"starting", "running"})


def can_move(current: str, target: str) -> bool:
    return (current, target) in TRANSITIONS


def check_move(current: str, target: str) -> None:
    if not can_move(current, target):
        raise FailedPrecondition(f"a {current} run cannot become {target}", field="state")
