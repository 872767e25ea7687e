"""Group commit on a real store: concurrent units share transactions, each answered after its commit;
a unit that fails takes nothing of the others with it. On SQLite and on PostgreSQL."""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import Iterator

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from controlplane.metrics import after_commit
from controlplane.store.engine import Store, sqlite_url
from controlplane.store.events import add_event
from controlplane.store.group_commit import GroupCommit
from controlplane.store.models import Event


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Store]:
    url = sqlite_url(tmp_path) if request.param == "sqlite" else request.getfixturevalue("pg_url")
    s = Store(url)
    s.migrate()
    yield s
    s.close()


def record(s: Session, n: int) -> int:
    add_event(s, "test.unit", agent=f"u{n}")
    if n % 7 == 3:
        raise ValueError(f"unit {n} fails after writing")
    return n * 10


def kept(store: Store) -> set[str]:
    return set(store.transaction(lambda s: list(s.scalars(select(Event.agent).where(Event.kind == "test.unit")))))


def test_concurrent_units_share_transactions_and_a_failure_stays_its_own(store: Store) -> None:
    commits = GroupCommit(store, record)

    async def main() -> list[object]:
        return await asyncio.gather(*(commits.apply(n) for n in range(60)), return_exceptions=True)

    answers = asyncio.run(main())
    failing = {n for n in range(60) if n % 7 == 3}
    for n, answer in enumerate(answers):
        if n in failing:
            assert isinstance(answer, ValueError) and f"unit {n} fails" in str(answer)
        else:
            assert answer == n * 10
    assert kept(store) == {f"u{n}" for n in range(60) if n not in failing}  # committed, the failures not
    assert commits.units == 60 and commits.batches < 60  # units shared transactions


def test_a_batch_run_again_after_a_failure_runs_each_unit_s_after_commit_work_once(store: Store) -> None:
    # A batch goes first as one savepoint; when a unit fails it is rolled back and every unit runs again in
    # its own. What the first pass asked to do after the commit (metrics) must not be done twice.
    done: list[int] = []

    def counted(s: Session, n: int) -> int:
        add_event(s, "test.unit", agent=f"u{n}")
        if n % 7 == 3:
            raise ValueError(f"unit {n} fails after writing")
        after_commit(s, lambda: done.append(n))
        return n

    commits = GroupCommit(store, counted, lanes=1)

    async def main() -> list[object]:
        return await asyncio.gather(*(commits.apply(n) for n in range(40)), return_exceptions=True)

    asyncio.run(main())
    assert commits.batches < 40  # batches held failing units, so some ran twice
    assert sorted(done) == [n for n in range(40) if n % 7 != 3]
    assert kept(store) == {f"u{n}" for n in range(40) if n % 7 != 3}


def test_a_batch_answered_at_once_keeps_each_unit_s_answer_and_falls_back_to_units_when_it_fails(
    store: Store,
) -> None:
    # `many` answers a whole batch (an error as a value, its writes kept); when it raises, its savepoint is
    # rolled back and each unit runs by itself through `fn`, as without it.
    def many(s: Session, units: list[int]) -> list[object]:
        if 13 in units:
            add_event(s, "test.unit", agent="the failed batch")
            raise RuntimeError("this batch fails as a whole")
        for n in units:
            add_event(s, "test.unit", agent=f"u{n}")
        return [ValueError(f"unit {n} refused") if n % 5 == 0 else n * 10 for n in units]

    commits = GroupCommit(store, record, lanes=1, many=many)

    async def main() -> list[object]:
        return await asyncio.gather(*(commits.apply(n) for n in range(30)), return_exceptions=True)

    answers = asyncio.run(main())
    assert commits.batches < 30  # units shared batches, so `many` answered some of them
    for n, answer in enumerate(answers):
        if isinstance(answer, ValueError):  # refused by `many`, or failed in `fn` in the batch of unit 13
            assert f"unit {n}" in str(answer) and (n % 5 == 0 or n % 7 == 3)
        else:
            assert answer == n * 10
    written = kept(store)
    assert "the failed batch" not in written  # rolled back with its savepoint
    assert "u13" in written  # its batch ran again unit by unit
    assert {f"u{n}" for n in range(30) if n % 7 != 3} <= written


def test_after_commit_work_waits_for_the_real_commit_and_a_savepoint_rolled_back_drops_only_its_own(
    store: Store,
) -> None:
    # SQLAlchemy reports a released savepoint as a commit and a savepoint rolled back as a rollback: work
    # noted for after the commit must still wait for the transaction, and keep what was noted outside.
    done: list[str] = []

    def released_then_rolled_back(s: Session) -> None:
        with s.begin_nested():
            add_event(s, "test.unit", agent="released")
            after_commit(s, lambda: done.append("released"))
        assert done == []  # the savepoint is released, nothing has committed
        raise ValueError("the transaction fails after its savepoint")

    with pytest.raises(ValueError):
        store.transaction(released_then_rolled_back)
    assert done == [] and kept(store) == set()

    def noted_then_savepoint_rolled_back(s: Session) -> None:
        add_event(s, "test.unit", agent="outer")
        after_commit(s, lambda: done.append("outer"))
        try:
            with s.begin_nested():
                after_commit(s, lambda: done.append("dropped"))
                with s.begin_nested():
                    after_commit(s, lambda: done.append("inner, released into the dropped one"))
                raise ValueError("the savepoint fails")
        except ValueError:
            pass
        with s.begin_nested():
            after_commit(s, lambda: done.append("kept"))

    store.transaction(noted_then_savepoint_rolled_back)
    assert done == ["outer", "kept"] and kept(store) == {"outer"}


def test_a_unit_alone_is_answered_after_its_commit(store: Store) -> None:
    commits = GroupCommit(store, record)

    async def one() -> int:
        answer: int = await commits.apply(1)
        return answer

    assert asyncio.run(one()) == 10
    assert kept(store) == {"u1"}  # visible to another transaction once answered
    with pytest.raises(ValueError):
        asyncio.run(one_failing(commits))
    assert (
        store.transaction(lambda s: s.scalar(select(func.count()).select_from(Event).where(Event.agent == "u3"))) == 0
    )


async def one_failing(commits: GroupCommit) -> None:
    await commits.apply(3)


def test_a_unit_that_comes_while_the_last_batch_is_being_answered_is_not_left_waiting(store: Store) -> None:
    # One caller's answer wakes it before the lane that answered it has quite ended: its next unit
    # (an agent's settle right after its reserve) must still be drained, not wait for a lane that is
    # going away. Every unit here comes in that window.
    commits = GroupCommit(store, record, lanes=1)

    async def caller(first: int) -> list[int]:
        return [await commits.apply(n) for n in range(first, first + 20) if n % 7 != 3]

    async def main() -> list[list[int]]:
        return await asyncio.wait_for(asyncio.gather(caller(0), caller(100)), 60)

    answers = asyncio.run(main())
    assert answers == [[n * 10 for n in range(f, f + 20) if n % 7 != 3] for f in (0, 100)]
