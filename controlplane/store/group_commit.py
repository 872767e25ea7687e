"""Group commit: the units of work that arrive while a transaction is being applied wait and go
together in the next one, each in a savepoint of its own, and every caller is answered only after
the transaction that holds its work has committed (an agent's message is acked once it is durable).

At low load a unit goes alone at once (no timer adds latency); under load one transaction carries
the messages of many agent streams, so its fixed cost (BEGIN IMMEDIATE, commit, the session) is
paid once per batch instead of once per message. A unit that fails rolls back its savepoint only and
answers its caller with the error; the others commit.

Locks (`controlplane.store.locks`): `lock(session, batch)` runs first in every transaction and takes
the rows the batch's units will lock, in the documented order (a run message's Change, sorted by id).
A deadlock or serialization failure met by any unit is not the unit's own failure (the rows an earlier
unit of the batch locked may be the cause, and its savepoint keeps them): the whole batch is rolled
back and run again by the store; a batch that keeps failing is applied unit by unit, each in its own
transaction with the store's retries, so such an error reaches a caller only when its unit alone
kept meeting it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session

from controlplane.store import locks
from controlplane.store.engine import RETRIES, Store
from controlplane.store.metric_hooks import metrics

MAX_BATCH = 256
BATCH_RETRIES = 3
"""Times a whole batch is run again after a deadlock before its units go one by one."""
log = logging.getLogger("drover.store")

Lock = Callable[[Session, list[tuple[Any, ...]]], None]
Many = Callable[[Session, list[Any]], list[Any]]
"""fn's work for a batch of units, each of a single argument."""


class GroupCommit:
    def __init__(
        self,
        store: Store,
        fn: Callable[..., Any],
        max_batch: int = MAX_BATCH,
        lanes: int = 0,
        lock: Lock | None = None,
        many: Many | None = None,
    ) -> None:
        self.store, self.fn, self.max_batch = store, fn, max_batch
        self.many = many
        """Answers a whole batch's units at once (each as `fn` would, an error as a value), in fewer statements."""
        self.lock = lock
        """Takes, first in each transaction, the row locks the batch's units will take (sorted)."""
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
        """The batch in one transaction, run again by the store after a deadlock or serialization
        failure; if it keeps meeting one, its units go one by one. Any other failure of the transaction
        answers each unit with it."""
        try:
            return await self.store.run(self._apply_all, batch, retries=BATCH_RETRIES if len(batch) > 1 else RETRIES)
        except Exception as err:
            reason = locks.retry_reason(err)
            if len(batch) == 1 or reason is None:
                return [err] * len(batch)
        metrics.on_store_retry("batch_split")
        log.warning("a batch of %d units kept meeting %s; applying them one by one", len(batch), reason)
        return [await self._alone(args) for args in batch]

    async def _alone(self, args: tuple[Any, ...]) -> Any:
        try:
            return (await self.store.run(self._apply_all, [args]))[0]
        except Exception as err:
            return err

    def _apply_all(self, s: Session, batch: list[tuple[Any, ...]]) -> list[Any]:
        if self.lock is not None:
            self.lock(s, batch)
        if len(batch) == 1:  # alone: no savepoint needed, an error rolls the whole transaction back
            return [self.fn(s, *batch[0])]
        # Units rarely fail: first all of them in one savepoint (two statements a batch, not two a unit);
        # if one fails, that savepoint is rolled back and every unit runs again in a savepoint of its own,
        # so only the failing unit's work is lost, as before. (Rolling a savepoint back drops the hooks
        # its units left for after the commit, `controlplane.metrics.after_commit`: they run once.)
        try:
            with s.begin_nested():
                if self.many is not None:
                    return self.many(s, [args[0] for args in batch])
                return [self.fn(s, *args) for args in batch]
        except Exception as err:
            if locks.retry_reason(err) is not None:
                raise
        return [self._apply_one(s, args) for args in batch]

    def _apply_one(self, s: Session, args: tuple[Any, ...]) -> Any:
        """One unit in its savepoint. A deadlock or serialization failure rolls the whole batch back
        (raised on): the locks held against it may be an earlier unit's, which its savepoint keeps."""
        try:
            with s.begin_nested():
                return self.fn(s, *args)
        except Exception as err:
            if locks.retry_reason(err) is not None:
                raise
            return err
