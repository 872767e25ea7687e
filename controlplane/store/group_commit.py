"""Group commit: the units of work that arrive while a transaction is being applied wait and go
together in the next one, each in a savepoint of its own, and every caller is answered only after
the transaction that holds its work has committed (an agent's message is acked once it is durable).

At low load a unit goes alone at once (no timer adds latency); under load one transaction carries
the messages of many agent streams, so its fixed cost (BEGIN IMMEDIATE, commit, the session) is
paid once per batch instead of once per message. A unit that fails rolls back its savepoint only and
answers its caller with the error; the others commit.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from controlplane.store.engine import Store

MAX_BATCH = 256
RETRIES = 3
RETRYABLE = frozenset({"40P01", "40001"})  # PostgreSQL: deadlock detected, serialization failure


class GroupCommit:
    def __init__(self, store: Store, fn: Callable[..., Any], max_batch: int = MAX_BATCH, lanes: int = 0) -> None:
        self.store, self.fn, self.max_batch = store, fn, max_batch
        self.lanes = lanes or (1 if store.url.startswith("sqlite") else 4)
        """Batches in flight at once: SQLite has one writer; PostgreSQL overlaps their round trips."""
        self._pending: list[tuple[tuple[Any, ...], asyncio.Future[Any]]] = []
        self._draining: set[asyncio.Task[None]] = set()
        self._running = 0
        """Lanes that will look at `_pending` again: counted down by the lane itself as it stops looking,
        not by its done callback (which runs later: a unit added in between would wait for nobody)."""
        self.batches = 0
        self.units = 0

    async def apply(self, *args: Any) -> Any:
        """fn(session, *args) in the next transaction; its answer once that has committed."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending.append((args, future))
        if self._running < self.lanes:
            self._running += 1
            lane = asyncio.create_task(self._drain(), name="group-commit")
            self._draining.add(lane)
            lane.add_done_callback(self._draining.discard)
        return await future

    async def _drain(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch :]
                results = await self._commit([args for args, _ in batch])
                self.batches, self.units = self.batches + 1, self.units + len(batch)
                for (_, future), result in zip(batch, results, strict=True):
                    if future.done():  # its caller went away (the stream ended); the work stays done
                        continue
                    if isinstance(result, BaseException):
                        future.set_exception(result)
                    else:
                        future.set_result(result)
        finally:
            self._running -= 1  # no await since `_pending` was seen empty: nothing came in between

    async def _commit(self, batch: list[tuple[Any, ...]]) -> list[Any]:
        """The batch in one transaction. A deadlock or serialization failure (two replicas' batches
        locking meter rows) rolled everything back: the batch is applied again, up to 3 times (every
        unit is idempotent). Any other failure of the transaction answers each unit with it."""
        for attempt in range(RETRIES + 1):
            try:
                return await self.store.run(self._apply_all, batch)
            except OperationalError as err:
                if attempt == RETRIES or getattr(err.orig, "sqlstate", "") not in RETRYABLE:
                    return [err] * len(batch)
            except Exception as err:
                return [err] * len(batch)
        raise AssertionError("unreachable")

    def _apply_all(self, s: Session, batch: list[tuple[Any, ...]]) -> list[Any]:
        if len(batch) == 1:  # alone: no savepoint needed, an error rolls the whole transaction back
            return [self.fn(s, *batch[0])]
        return [self._apply_one(s, args) for args in batch]

    def _apply_one(self, s: Session, args: tuple[Any, ...]) -> Any:
        """One unit in its savepoint. A deadlock victim is applied again in a fresh savepoint (rolling
        back to the savepoint released the locks the unit took, so the other side goes on)."""
        for attempt in range(RETRIES + 1):
            try:
                with s.begin_nested():
                    return self.fn(s, *args)
            except OperationalError as err:
                if attempt == RETRIES or getattr(err.orig, "sqlstate", "") not in RETRYABLE:
                    return err
            except Exception as err:
                return err
        raise AssertionError("unreachable")
