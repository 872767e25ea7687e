"""Many reservations admitted against one holder's escrow slices in one pass, and many settles in one
statement: what a group-commit batch of model calls (`controlplane.services.call_batches`) does instead
of `escrow.take` and `escrow.settle` once a call.

The slices are locked once for the batch (`Admission.lock`), each reservation is admitted in memory
against them in the batch's order (`Admission.admit`: the same rule as `escrow.fits`, with the batch's
earlier holds counted), and the holds are written in two statements (`Admission.write`). A reservation
that does not fit, or whose meter or slice does not exist yet, is not admitted here: its caller runs it
through `escrow.take`, which takes more of the meter's headroom, after this batch's holds are written.
So the invariant of `controlplane.store.escrow` holds as it does there: what a slice admits is within
what it was granted, under the slice's row lock, in the transaction that records the calls.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.orm import Session

from controlplane.store import escrow
from controlplane.store import escrow_statements as statements
from controlplane.store.models import utcnow


@dataclasses.dataclass
class Admission:
    holder: str
    slices: dict[str, escrow.Slice]
    holds: list[tuple[str, list[escrow.Want]]] = dataclasses.field(default_factory=list)

    @classmethod
    def lock(cls, s: Session, keys: Sequence[str]) -> Admission:
        """This holder's slices of `keys`, locked (by key) until the transaction ends."""
        h = escrow.holder_of(s)
        if not keys:
            return cls(h, {})
        rows = s.execute(statements.own_slices(), {"h": h, "keys": sorted(set(keys))})
        return cls(h, {r[0]: escrow.Slice(*r) for r in rows})

    def admit(self, reservation_id: str, wants: Sequence[escrow.Want]) -> bool:
        """Hold every want in its slice as the batch stands, or none (False: the caller takes the slow path)."""
        if not all(w.key in self.slices and escrow.fits(self.slices[w.key], w) for w in wants):
            return False
        for w in wants:
            self.slices[w.key].reserved += w.amount
        self.holds.append((reservation_id, list(wants)))
        return True

    def forget(self, reservation_ids: set[str]) -> None:
        """Drop admitted holds that will not be written (their call row was not recorded)."""
        for rid, wants in self.holds:
            if rid in reservation_ids:
                for w in wants:
                    self.slices[w.key].reserved -= w.amount
        self.holds = [(rid, wants) for rid, wants in self.holds if rid not in reservation_ids]

    def write(self, s: Session) -> None:
        """The admitted holds: one statement for the slices' reserved amounts, one for all the shares."""
        if not self.holds:
            return
        added: dict[str, int] = {}
        for _, wants in self.holds:
            for w in wants:
                added[w.key] = added.get(w.key, 0) + w.amount
        keys = sorted(added)
        params: dict[str, Any] = {"h": self.holder, "now": utcnow()}
        for i, key in enumerate(keys):
            params |= {f"k{i}": key, f"a{i}": added[key]}
        s.execute(statements.held(len(keys)), params)
        shares = [{"rid": rid, "h": self.holder, "k": w.key, "a": w.amount} for rid, wants in self.holds for w in wants]
        s.execute(statements.share_insert(), shares)


def settle_many(s: Session, settles: Sequence[tuple[str, Mapping[str, int]]]) -> None:
    """`escrow.settle` of many reservations, one executemany for those settling by the same prefixes."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for reservation_id, used in settles:
        prefixes = tuple(sorted(used))
        values = {f"v{i}": used[prefix] for i, prefix in enumerate(prefixes)}
        groups.setdefault(prefixes, []).append({"rid": reservation_id, **values})
    for prefixes, params in groups.items():
        s.execute(statements.settle_shares_many(prefixes), params)
