"""`/drover` comments on a forge issue (issue 28), the pure part: a comment's first line parsed strictly
into a command, and what the command does given who wrote it (their permission on the repository, asked
of the forge) and the issue's Changes. Nothing here talks to the forge or the store.

    /drover                start a Change for the issue (the project's budget)
    /drover budget $N      start one with a budget of N USD ($5, $2.50)
    /drover stop           cancel the issue's running Change
    /drover retry          start a new Change after the last one failed, was cancelled or hit its budget

Only write, maintain or admin may command; anyone else gets one reply saying so and nothing runs."""

from __future__ import annotations

import dataclasses
import math
import re

START, RETRY, STOP, USAGE = "start", "retry", "stop", "usage"
REPLY, SKIP, CANCEL = "reply", "skip", "cancel"
MAX_BUDGET_USD = 10_000.0
"""The most a comment may give a Change: a typo of a few zeros stops here, not on the bill."""
PERMITTED = frozenset({"admin", "write", "maintain"})
AMOUNT = re.compile(r"\$(\d{1,7}(?:\.\d{1,2})?)")
USAGE_TEXT = (
    "Drover understands, as a comment's first line: `/drover` (start a Change for this issue), "
    "`/drover budget $N` (start one with a budget of N USD, e.g. `$5` or `$2.50`), `/drover stop` "
    "(cancel the running Change) and `/drover retry` (start again after a failed or cancelled Change)."
)
OWN_MARKERS = ("Drover ", "Drover:", "<!-- drover")
"""How each comment Drover posts begins: a comment that begins so is never read as a command."""
RETRYABLE = frozenset({"failed", "cancelled", "budget_blocked"})


@dataclasses.dataclass(frozen=True)
class Command:
    verb: str  # start | retry | stop | usage
    budget_usd: float = 0.0
    """`/drover budget $N`: N; 0: the project's budget."""
    why: str = ""
    """usage: what was wrong with it."""


def parse(body: str) -> Command | None:
    """The comment's command, from its first line; None when the first line is not `/drover ...` at all
    (an ordinary comment). Anything after `/drover` that is not exactly one of the commands: usage."""
    if body.startswith(OWN_MARKERS):
        return None
    words = (body.splitlines() or [""])[0].split()
    if not words or words[0] != "/drover":
        return None
    rest = words[1:]
    if not rest:
        return Command(START)
    if rest == ["stop"] or rest == ["retry"]:
        return Command(STOP if rest[0] == "stop" else RETRY)
    if rest[0] == "budget":
        amount = AMOUNT.fullmatch(rest[1]) if len(rest) == 2 else None
        value = float(amount.group(1)) if amount else 0.0
        if not amount:
            return Command(USAGE, why="`/drover budget` takes one amount in USD, written `$5` or `$2.50`")
        if not (math.isfinite(value) and 0 < value <= MAX_BUDGET_USD):
            return Command(USAGE, why=f"a budget must be more than $0 and at most ${MAX_BUDGET_USD:,.0f}")
        return Command(START, budget_usd=value)
    return Command(USAGE, why=f"`{' '.join(words)[:80]}` is not a Drover command")


@dataclasses.dataclass(frozen=True)
class Decision:
    action: str  # start | cancel | reply | skip
    why: str
    """Said in the delivery's reason, and as the reply when the action is reply."""
    budget_usd: float = 0.0
    change_id: str = ""
    """cancel: the Change cancelled."""


def decide(command: Command, login: str, permission: str, running: str, last: tuple[str, str]) -> Decision:
    """What `login`'s command does: `permission` is theirs on the repository (admin, write, read, none),
    `running` the issue's unfinished Change ("": none), `last` its newest Change and that Change's status
    (("", ""): none yet)."""
    if permission not in PERMITTED:
        return Decision(
            REPLY,
            f"Drover: @{login}, `/drover` commands need write permission on this repository "
            f"(you have {permission or 'none'}); nothing was run.",
        )
    if command.verb == USAGE:
        return Decision(REPLY, f"Drover: {command.why}. {USAGE_TEXT}")
    if command.verb == STOP:
        if running:
            return Decision(CANCEL, f"cancelled by github:{login}", change_id=running)
        return Decision(REPLY, "Drover: no Change is running for this issue; nothing to stop.")
    if running:
        return Decision(
            REPLY, f"Drover: this issue already has Change {running} running; `/drover stop` cancels it first."
        )
    last_id, last_status = last
    if command.verb == RETRY and last_status not in RETRYABLE:
        said = f"its last Change, {last_id}, {last_status}" if last_id else "this issue has had no Change yet"
        return Decision(REPLY, f"Drover: nothing to retry ({said}); `/drover` starts a new Change.")
    why = f"{'/drover retry' if command.verb == RETRY else '/drover'} by github:{login}"
    return Decision(START, why, budget_usd=command.budget_usd)
