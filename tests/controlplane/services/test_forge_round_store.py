"""Fix rounds' store side (issue 28), on SQLite and PostgreSQL: a round's Change, its link and its event
in one transaction, once per delivery and never beside a running Change of the issue; max_fix_rounds said
once; a closed pull request cancels its unfinished Changes once."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.domain import forge_rounds as rounds
from controlplane.domain import graph
from controlplane.domain.webhooks import DeliveryFields
from controlplane.services import forge_rounds as service
from controlplane.services.change_lifecycle import submit_change
from controlplane.services.forge_deliveries import record_delivery
from controlplane.services.projects import add_project
from controlplane.store.engine import Store
from controlplane.store.models import Change, Event, ForgeDelivery, ForgeIssueChange, Project, utcnow


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Store]:
    """Project web (max_fix_rounds 1) whose issue #4's Change succeeded and opened pull request #5."""
    url = f"sqlite:///{tmp_path / 't.db'}" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    s = Store(url)
    s.migrate()

    def setup(db: Session) -> None:
        add_project(db, "web", "")
        project = db.get(Project, "web")
        assert project is not None
        project.max_fix_rounds = 1
        task = graph.TaskSpec(key="implement", kind="implement", objective="fix it", command=("true",))
        first = submit_change(db, graph.ChangeSpec("web", "issue 4", (task,)), "github:alice")
        change = db.get(Change, first)
        assert change is not None
        change.status = "succeeded"
        db.add(ForgeIssueChange(change_id=first, project="web", issue_number=4, delivery_id="d0", created_at=utcnow()))
        db.flush()
        link = db.get(ForgeIssueChange, first)
        assert link is not None
        link.pr_number, link.pr_branch, link.outcome = 5, "drover/issue-4", "pr_opened"
        for n in range(1, 6):
            record_delivery(db, "web", f"d{n}", "check_run", DeliveryFields(action="completed", number=5))

    s.transaction(setup)
    yield s
    s.close()


def changed(store: Store, change_id: str) -> Change:
    found = store.transaction(lambda s: s.get(Change, change_id))
    assert found is not None
    return found


def kinds(store: Store, kind: str) -> list[Event]:
    return store.transaction(lambda s: list(s.scalars(select(Event).where(Event.kind == kind))))


def test_a_round_starts_once_and_never_beside_a_running_change(store: Store) -> None:
    state = store.transaction(lambda s: service.pull_state(s, "web", 5))
    assert state is not None and state.pull == rounds.Pull(4, 5, "drover/issue-4", 0, "", 1)
    assert store.transaction(lambda s: service.pull_state(s, "web", 6)) is None
    spec = rounds.round_spec("web", 1, state.pull, "evidence")
    fix = store.transaction(lambda s: service.start_round(s, "d1", spec, state.pull, 1))
    assert fix and store.transaction(lambda s: service.start_round(s, "d1", spec, state.pull, 1)) == ""
    assert store.transaction(lambda s: service.start_round(s, "d2", spec, state.pull, 1)) == ""
    d2 = store.transaction(lambda s: s.get(ForgeDelivery, "d2"))
    assert d2 is not None and (d2.state, d2.reason) == ("done", "the pull request's rounds moved on meanwhile")
    link = store.transaction(lambda s: s.get(ForgeIssueChange, fix))
    assert link is not None and (link.round, link.pr_number, link.pr_branch, link.issue_number) == (
        1, 5, "drover/issue-4", 4
    )  # fmt: skip
    assert changed(store, fix).base_branch == "drover/issue-4"
    (started,) = kinds(store, "forge.round_started")
    assert (started.change_id, started.data["round"], started.data["delivery_id"]) == (fix, 1, "d1")
    now = store.transaction(lambda s: service.pull_state(s, "web", 5))
    assert now is not None and (now.pull.rounds_done, now.pull.running_change) == (1, fix)


def test_a_closed_pull_request_cancels_its_running_round_once_and_max_fix_rounds_is_said_once(store: Store) -> None:
    state = store.transaction(lambda s: service.pull_state(s, "web", 5))
    assert state is not None
    fix = store.transaction(
        lambda s: service.start_round(s, "d1", rounds.round_spec("web", 1, state.pull, "e"), state.pull, 1)
    )
    assert store.transaction(lambda s: service.close_pull(s, "d2", 5)) == []  # its Task had no run yet
    assert store.transaction(lambda s: service.close_pull(s, "d2", 5)) == []
    (closed,) = kinds(store, "forge.pull_closed")
    assert closed.data["cancelled"] == [fix]
    assert changed(store, fix).status == "cancelled"
    after = store.transaction(lambda s: service.pull_state(s, "web", 5))
    assert after is not None and rounds.decide(rounds.CHECK, after.pull).action == rounds.EXHAUSTED
    assert store.transaction(lambda s: service.record_exhausted(s, "d3", after.pull)) is True
    assert store.transaction(lambda s: service.record_exhausted(s, "d4", after.pull)) is False
    (said,) = kinds(store, "forge.rounds_exhausted")
    assert (said.change_id, said.data["max_fix_rounds"]) == (fix, 1)
    final = store.transaction(lambda s: service.pull_state(s, "web", 5))
    assert final is not None and rounds.decide(rounds.REVIEW, final.pull).action == rounds.SKIP


def test_the_rounds_share_what_is_left_of_the_issues_budget(store: Store) -> None:
    """A pull request's rounds get what the issue's Change left of its budget, not a fresh one each; with
    no budget on the issue's Change, each round gets the project's per-issue budget."""

    def budget(s: Session, usd: float) -> None:
        first = s.scalar(select(ForgeIssueChange.change_id).where(ForgeIssueChange.round == 0))
        change = s.get(Change, first)
        assert change is not None
        change.budget_usd = usd
        s.get(Project, "web").forge_budget_usd = 0.75  # type: ignore[union-attr]

    store.transaction(lambda s: budget(s, 3.0))
    state = store.transaction(lambda s: service.pull_state(s, "web", 5))
    assert state is not None and (state.pull.budget_usd, state.pull.spent_usd, state.budget_usd) == (3.0, 0.0, 3.0)
    store.transaction(lambda s: budget(s, 0.0))
    state = store.transaction(lambda s: service.pull_state(s, "web", 5))
    assert state is not None and (state.pull.budget_usd, state.budget_usd) == (0.0, 0.75)


def test_a_rounds_failed_tries_are_counted_until_the_fifth_gives_up_and_a_push_done_is_remembered(
    store: Store,
) -> None:
    state = store.transaction(lambda s: service.pull_state(s, "web", 5))
    assert state is not None
    fix = store.transaction(
        lambda s: service.start_round(s, "d1", rounds.round_spec("web", 1, state.pull, "e"), state.pull, 1)
    )

    def succeed(s: Session) -> None:
        change = s.get(Change, fix)
        assert change is not None
        change.status, change.candidate_branch, change.candidate_commit = "succeeded", "cand", "c" * 40

    store.transaction(succeed)
    (done,) = store.transaction(service.finished_rounds)
    assert (done.change_id, done.failures, done.last_failure, done.pushed) == (fix, 0, None, False)
    store.transaction(lambda s: service.record_push(s, fix, "c" * 40))
    store.transaction(lambda s: service.record_push(s, fix, "c" * 40))  # once
    steps = [store.transaction(lambda s: service.record_failure(s, fix, "HTTP 502", True)) for _ in range(4)]
    assert steps == [rounds.RETRY] * 4
    (done,) = store.transaction(service.finished_rounds)
    assert (done.failures, done.pushed) == (4, True) and done.last_failure is not None
    assert store.transaction(lambda s: service.record_failure(s, fix, "HTTP 502", True)) == rounds.GIVE_UP
    assert store.transaction(service.finished_rounds) == []
    link = store.transaction(lambda s: s.get(ForgeIssueChange, fix))
    assert link is not None and (link.outcome, link.outcome_reason) == ("failed", "HTTP 502")
    (failed,) = kinds(store, "forge.round_failed")
    assert (failed.change_id, failed.data["attempts"], failed.data["pushed"]) == (fix, 5, True)
    assert len(kinds(store, "forge.round_pushed")) == 1 and len(kinds(store, "forge.round_retry")) == 4
    store.transaction(lambda s: service.record_end(s, fix, "pushed"))  # an end told already stays
    assert kinds(store, "forge.round_ended") == []
