"""`/drover` comments (issue 28), pure: the first line parsed strictly, and what a command does given its
author's permission and the issue's Changes."""

from __future__ import annotations

import pytest

from controlplane.domain import forge_commands as fc
from controlplane.domain.forge_commands import Command, Decision, decide, parse


@pytest.mark.parametrize(
    ("body", "command"),
    [
        ("/drover", Command(fc.START)),
        ("  /drover  \nplease fix this", Command(fc.START)),
        ("/drover budget $5", Command(fc.START, 5.0)),
        ("/drover budget $2.50", Command(fc.START, 2.5)),
        ("/drover   budget   $0.01\r\nthanks", Command(fc.START, 0.01)),
        ("/drover stop", Command(fc.STOP)),
        ("/drover retry", Command(fc.RETRY)),
    ],
)
def test_the_commands(body: str, command: Command) -> None:
    assert parse(body) == command


@pytest.mark.parametrize(
    "body",
    ["", "Looks good", "please /drover", "/droverx", "/Drover", "> /drover", "\n/drover",
     "Drover: `/drover budget $N` (start one)", "Drover started Change chg_1 for this issue.\n/drover"],
)  # fmt: skip
def test_other_comments_and_drovers_own_are_not_commands(body: str) -> None:
    assert parse(body) is None


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ("/drover budget", "takes one amount"),
        ("/drover budget 5", "takes one amount"),
        ("/drover budget $5 now", "takes one amount"),
        ("/drover budget $-5", "takes one amount"),
        ("/drover budget $1e3", "takes one amount"),
        ("/drover budget $5.555", "takes one amount"),
        ("/drover budget $nan", "takes one amount"),
        ("/drover budget $0", "more than $0"),
        ("/drover budget $0.00", "more than $0"),
        ("/drover budget $10000.01", "at most $10,000"),
        ("/drover please", "`/drover please` is not a Drover command"),
        ("/drover stop now", "`/drover stop now` is not a Drover command"),
        ("/drover STOP", "`/drover STOP` is not a Drover command"),
    ],
)
def test_anything_else_after_drover_is_answered_with_the_usage(body: str, why: str) -> None:
    command = parse(body)
    assert command is not None and command.verb == fc.USAGE and why in command.why
    said = decide(command, "alice", "write", "", ("", ""))
    assert said.action == fc.REPLY and why in said.why and "`/drover budget $N`" in said.why


@pytest.mark.parametrize("permission", ["read", "triage", "none", ""])
def test_without_write_permission_nothing_runs_and_the_reply_says_why(permission: str) -> None:
    for command in (Command(fc.START), Command(fc.STOP), Command(fc.RETRY), Command(fc.USAGE, why="x")):
        said = decide(command, "bob", permission, "chg_1", ("chg_1", "running"))
        assert said.action == fc.REPLY
        assert said.why == (
            "Drover: @bob, `/drover` commands need write permission on this repository "
            f"(you have {permission or 'none'}); nothing was run."
        )


@pytest.mark.parametrize("permission", ["write", "maintain", "admin"])
def test_write_or_more_starts_a_change_with_the_comments_budget(permission: str) -> None:
    assert decide(Command(fc.START, 3.0), "alice", permission, "", ("", "")) == Decision(
        fc.START, "/drover by github:alice", budget_usd=3.0
    )


def test_one_unfinished_change_per_issue() -> None:
    for command in (Command(fc.START), Command(fc.RETRY)):
        said = decide(command, "alice", "write", "chg_1", ("chg_1", "running"))
        assert said.action == fc.REPLY and "already has Change chg_1 running" in said.why


def test_stop_cancels_the_running_change_naming_who() -> None:
    assert decide(Command(fc.STOP), "alice", "admin", "chg_1", ("chg_1", "running")) == Decision(
        fc.CANCEL, "cancelled by github:alice", change_id="chg_1"
    )
    said = decide(Command(fc.STOP), "alice", "admin", "", ("chg_1", "succeeded"))
    assert said.action == fc.REPLY and "no Change is running" in said.why


@pytest.mark.parametrize("status", ["failed", "cancelled", "budget_blocked"])
def test_retry_starts_again_after_a_change_that_did_not_succeed(status: str) -> None:
    said = decide(Command(fc.RETRY), "alice", "write", "", ("chg_1", status))
    assert (said.action, said.why) == (fc.START, "/drover retry by github:alice")


def test_retry_with_nothing_to_retry_is_answered() -> None:
    said = decide(Command(fc.RETRY), "alice", "write", "", ("chg_1", "succeeded"))
    assert said.action == fc.REPLY and "its last Change, chg_1, succeeded" in said.why
    said = decide(Command(fc.RETRY), "alice", "write", "", ("", ""))
    assert said.action == fc.REPLY and "this issue has had no Change yet" in said.why
