"""Meter escrow: each holder (one writer thread of one control-plane process) keeps a slice of a
meter's headroom and admits model calls against it, so concurrent calls do not queue on the one
row of a shared meter (the provider month, the day's calls, a busy Project).

The invariant, for every meter with a limit L, after every transaction:

    meter.used + meter.reserved <= L        (meter.reserved counts each bounded slice's whole grant)
    slice.used + slice.reserved <= slice.granted                            (every bounded slice)

A call's amount is admitted into its holder's slice, or the slice first takes more of the meter's
headroom under the meter's row lock, or the call is refused; all in the transaction that records
the call. So what is admitted fleet-wide (the meter's own shares plus every slice's used and
reserved) is at most meter.used + meter.reserved <= L, whatever process is killed when: a dead
holder's slices stay in the database, counted, until the sweep folds them back. A share settles
at most at what it reserved (`settle` caps it), so what is used stays within the limit too.

Lock order: a holder's own slices, then meter rows by key, then other holders' slices with SKIP
LOCKED; a settle locks only its own shares (its slice or meter counts it later). A slice busy
elsewhere is not waited for, so close to a limit a call can be refused while another holder's
slice still has room; the sweep returns idle slices. A budget column that moved, and `fold_all`
(a limit raised), wait for every slice. Meter rows are locked FOR NO KEY UPDATE: inserting a share
or a slice (their foreign keys take KEY SHARE on the meter) never waits for a meter's lock holder.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

from sqlalchemy import Table, case, delete, func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from controlplane.store import escrow_statements as statements
from controlplane.store.models import Meter, MeterReservation, MeterSlice, utcnow

M, R, S = cast(Table, Meter.__table__), cast(Table, MeterReservation.__table__), cast(Table, MeterSlice.__table__)
CHUNK = 8
"""A slice that needs room takes what it lacks or 1/CHUNK of the meter's headroom, the larger."""


@dataclasses.dataclass
class Slice:
    key: str
    granted: int = 0
    reserved: int = 0
    used: int = 0
    unbounded: bool = False
    limit_seen: int = -1
    """The meter's limit when the slice was last granted; -1: take from the meter before admitting."""


@dataclasses.dataclass(frozen=True)
class Want:
    key: str
    amount: int
    limit: int | None
    """The limit the caller's budget column sets; None: the meter keeps its own (fleet meters)."""


def grant_size(headroom: int, lacking: int) -> int:
    """What a slice lacking `lacking` takes from a meter with `headroom` left (never more)."""
    return min(headroom, max(lacking, headroom // CHUNK))


def fits(sl: Slice, want: Want) -> bool:
    """Whether the slice admits the want without its meter: granted under the limit in force, with room."""
    if sl.limit_seen < 0 or (want.limit is not None and want.limit != sl.limit_seen):
        return False
    return sl.unbounded or sl.used + sl.reserved + want.amount <= sl.granted


def holder_of(s: Session) -> str:
    return str(s.info.get("holder") or "main")


# --- admitting and settling ------------------------------------------------------------------------


def take(
    s: Session, reservation_id: str, wants: Sequence[Want], create_meters: Callable[[list[str]], None]
) -> tuple[str, int] | None:
    """Hold every want in this holder's slices, taking more from a meter where a slice lacks room,
    or hold nothing: answers None, or the key and limit of the first meter (by key) that refused."""
    h, wants = holder_of(s), sorted(wants, key=lambda w: w.key)
    keys = [w.key for w in wants]
    own = _own(s, h, keys)
    if len(own) < len(keys):
        missing = [k for k in keys if k not in own]
        create_meters(missing)
        _insert_ignore(s, [_empty(k, h) for k in missing])
        own = _own(s, h, keys)
    need = [w for w in wants if not fits(own[w.key], w)]
    if need and (refused := _out_of_reach(s, need) or _refill(s, h, need, own)) is not None:
        return refused
    # One statement for all the wants' slices (they are locked already, by key), one for their shares.
    params: dict[str, Any] = {"rid": reservation_id, "h": h, "now": utcnow()}
    for i, w in enumerate(wants):
        params |= {f"k{i}": w.key, f"a{i}": w.amount}
    s.execute(statements.held(len(wants)), params)
    _insert_shares(s, reservation_id, h, wants)
    return None


def settle(s: Session, reservation_id: str, used: Mapping[str, int]) -> int:
    """Settle the reservation's unsettled shares in one statement: a share of a meter whose key starts
    with a prefix in `used` at that amount, any other at the amount it reserved; never above the
    amount reserved (callers cap and report a usage above it first); answers how many.
    A share is only marked: its slice, or its meter for a share held on the meter row, counts it
    later under that row's lock, so a settle waits for no meter and no slice."""
    prefixes = tuple(sorted(used))
    values = {f"v{i}": used[prefix] for i, prefix in enumerate(prefixes)}
    marked = s.execute(statements.settle_shares(prefixes), {"rid": reservation_id, **values})
    return len(marked.all())


def _insert_shares(s: Session, reservation_id: str, holder: str, wants: Sequence[Want]) -> None:
    """The reservation's unsettled shares, one a want: on PostgreSQL one statement over arrays, elsewhere
    one statement run for each want (a statement with a row of values per want is compiled every time)."""
    if s.get_bind().dialect.name == "postgresql":
        keys, amounts = [w.key for w in wants], [w.amount for w in wants]
        s.execute(
            statements.shares_from_arrays(), {"rid": reservation_id, "h": holder, "keys": keys, "amounts": amounts}
        )
        return
    s.execute(
        statements.share_insert(), [{"rid": reservation_id, "h": holder, "k": w.key, "a": w.amount} for w in wants]
    )


def _count_settled(s: Session, holder: str, key: str) -> tuple[int, int]:
    """Mark the settled, not yet counted shares of a slice ("": of the meter row itself) counted;
    answers what they had reserved and what they used."""
    counted = s.execute(
        update(R)
        .where(R.c.holder == holder, R.c.meter_key == key, R.c.settled.is_(True), R.c.reconciled.is_(False))
        .values(reconciled=True)
        .returning(R.c.amount, R.c.used_amount)
    ).all()
    return sum(a for a, _ in counted), sum(u for _, u in counted)


def _reconcile_meter(s: Session, key: str) -> None:
    """Count the settled shares held on the meter row itself (the row is locked by the caller)."""
    reserved, used = _count_settled(s, "", key)
    if reserved or used:
        s.execute(update(M).where(M.c.key == key).values(reserved=M.c.reserved - reserved, used=M.c.used + used))


# --- slices ------------------------------------------------------------------------------------------


def _empty(key: str, holder: str) -> dict[str, Any]:
    return {
        "meter_key": key,
        "holder": holder,
        "granted": 0,
        "reserved": 0,
        "used": 0,
        "unbounded": False,
        "limit_seen": -1,
        "updated_at": utcnow(),
    }


def _insert_ignore(s: Session, rows: list[dict[str, Any]]) -> None:
    dialect = s.get_bind().dialect.name
    upsert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    s.execute(upsert(S).values(rows).on_conflict_do_nothing(index_elements=["meter_key", "holder"]))


def _own(s: Session, h: str, keys: Sequence[str]) -> dict[str, Slice]:
    rows = s.execute(statements.own_slices(), {"h": h, "keys": list(keys)})
    return {r[0]: Slice(*r) for r in rows}


def _lock_meters(s: Session, keys: Sequence[str]) -> dict[str, list[int]]:
    rows = s.execute(
        select(M.c.key, M.c.limit_amount, M.c.used, M.c.reserved)
        .where(M.c.key.in_(keys))
        .order_by(M.c.key)
        .with_for_update(key_share=True)
    )
    return {r[0]: [r[1], r[2], r[3]] for r in rows}


def _meter(s: Session, key: str) -> list[int]:
    row = s.execute(select(M.c.limit_amount, M.c.used, M.c.reserved).where(M.c.key == key)).one()
    return [row[0], row[1], row[2]]


def _out_of_reach(s: Session, need: Sequence[Want]) -> tuple[str, int] | None:
    """A want past what its meter has left even before any reservation or slice (read without a
    lock: used only grows while the limit stands): refused without queueing for the meter's row."""
    rows = s.execute(select(M.c.key, M.c.limit_amount, M.c.used).where(M.c.key.in_([w.key for w in need])))
    settled = {key: (limit, used) for key, limit, used in rows}
    for w in need:
        limit, used = settled[w.key]
        limit = limit if w.limit is None else w.limit
        if limit and limit - used < w.amount:
            return w.key, limit
    return None


def _refill(s: Session, h: str, need: Sequence[Want], own: dict[str, Slice]) -> tuple[str, int] | None:
    """Take room for each want from its meter (locked, by key); None, or the first meter that has none."""
    meters = _lock_meters(s, [w.key for w in need])
    grants: list[tuple[str, int, int]] = []
    for w in need:
        limit = meters[w.key][0]
        _reconcile_meter(s, w.key)
        if w.limit is not None and w.limit != limit:  # the budget column moved since the meter last saw it
            fold_all(s, w.key)
            s.execute(update(M).where(M.c.key == w.key).values(limit_amount=w.limit))
            limit = w.limit
        sl = _reconcile(s, h, w.key)
        if sl.unbounded != (limit == 0) and (sl.granted or sl.reserved or sl.used):
            _fold(s, h, w.key)  # the meter gained or lost its limit: the slice starts afresh
            sl = Slice(w.key, granted=sl.reserved, reserved=sl.reserved)
        if limit == 0:  # no limit: nothing is granted, and a bounded grant goes back to the meter
            grants.append((w.key, 0 if sl.unbounded else -sl.granted, 0))
            continue
        lacking = w.amount - (sl.granted - sl.reserved - sl.used)
        _, used, reserved = _meter(s, w.key)
        if limit - used - reserved < lacking:
            _fold_others(s, h, w.key)
            _, used, reserved = _meter(s, w.key)
        if limit - used - reserved < lacking:
            return w.key, limit
        grants.append((w.key, grant_size(limit - used - reserved, lacking), limit))
    now = utcnow()
    for key, grant, limit in grants:
        s.execute(update(M).where(M.c.key == key).values(reserved=M.c.reserved + grant))
        s.execute(
            update(S)
            .where(S.c.meter_key == key, S.c.holder == h)
            .values(granted=S.c.granted + grant, limit_seen=limit, unbounded=limit == 0, updated_at=now)
        )
    return None


def _reconcile(s: Session, h: str, key: str) -> Slice:
    """Count the slice's settled shares in the slice (the slice is locked by the caller)."""
    reserved, used = _count_settled(s, h, key)
    if reserved or used:
        s.execute(
            update(S)
            .where(S.c.meter_key == key, S.c.holder == h)
            .values(reserved=S.c.reserved - reserved, used=S.c.used + used)
        )
    row = s.execute(
        select(S.c.meter_key, S.c.granted, S.c.reserved, S.c.used, S.c.unbounded, S.c.limit_seen).where(
            S.c.meter_key == key, S.c.holder == h
        )
    ).one()
    return Slice(*row)


def _fold(s: Session, h: str, key: str) -> None:
    """Give a slice's unused grant back to its meter (both locked by the caller): what the slice
    counted settled becomes the meter's used, and the slice keeps a grant of exactly what is still
    outstanding in it (counted as its shares settle). No share row is touched but settled ones, so a
    fold never waits for a settle in flight."""
    sl = _reconcile(s, h, key)
    grant = 0 if sl.unbounded else sl.granted
    s.execute(
        update(M).where(M.c.key == key).values(used=M.c.used + sl.used, reserved=M.c.reserved + sl.reserved - grant)
    )
    s.execute(
        update(S)
        .where(S.c.meter_key == key, S.c.holder == h)
        .values(granted=sl.reserved, used=0, unbounded=False, limit_seen=-1)
    )


def _fold_others(s: Session, h: str, key: str) -> None:
    others = s.execute(
        select(S.c.holder)
        .where(S.c.meter_key == key, S.c.holder != h, (S.c.granted > 0) | (S.c.reserved > 0) | (S.c.used > 0))
        .with_for_update(skip_locked=True)
    ).scalars()
    for other in list(others):
        _fold(s, other, key)


def fold_all(s: Session, key: str) -> None:
    """Empty every slice of a meter into it, waiting for busy ones (a limit is about to change)."""
    holders = s.execute(select(S.c.holder).where(S.c.meter_key == key).order_by(S.c.holder).with_for_update())
    held = list(holders.scalars())
    _lock_meters(s, [key])
    _reconcile_meter(s, key)
    for holder in held:
        _fold(s, holder, key)


# --- the sweep and the figures -------------------------------------------------------------------------


def idle_meters(s: Session, older_than: dt.timedelta) -> list[str]:
    """Meters with a slice untouched for `older_than` (a holder that stopped, or went quiet), or
    with settled shares not yet counted: the sweep folds and counts them."""
    cutoff = utcnow() - older_than
    idle = select(S.c.meter_key).where(S.c.updated_at < cutoff)
    pending = select(R.c.meter_key).where(R.c.settled.is_(True), R.c.reconciled.is_(False))
    return sorted(set(s.scalars(idle.distinct())) | set(s.scalars(pending.distinct())))


def return_idle(s: Session, key: str, older_than: dt.timedelta) -> int:
    """Count a meter's settled shares, fold its idle slices back into it and drop them; answers how
    many slices. A busy slice (locked now) is left to its holder."""
    cutoff = utcnow() - older_than
    _lock_meters(s, [key])
    _reconcile_meter(s, key)
    idle = list(
        s.scalars(
            select(S.c.holder)
            .where(S.c.meter_key == key, S.c.updated_at < cutoff)
            .order_by(S.c.holder)
            .with_for_update(skip_locked=True)
        )
    )
    for holder in idle:
        _fold(s, holder, key)
    busy = s.scalars(
        select(S.c.holder).where(S.c.meter_key == key, S.c.updated_at >= cutoff).with_for_update(skip_locked=True)
    )
    for holder in list(busy):
        _reconcile(s, holder, key)
    if idle:  # a slice with calls still outstanding stays until they settle
        s.execute(delete(S).where(S.c.meter_key == key, S.c.holder.in_(idle), S.c.granted == 0))
    return len(idle)


def adjustments(s: Session, keys: Iterable[str] | None = None) -> dict[str, tuple[int, int]]:
    """For each meter with slices: what to add to its row's used and reserved to read what the calls
    used and hold (slices' counted and uncounted settles; their grants are not reservations)."""
    slices = select(
        S.c.meter_key,
        func.sum(case((S.c.unbounded, 0), else_=S.c.granted)),
        func.sum(S.c.reserved),
        func.sum(S.c.used),
    ).group_by(S.c.meter_key)
    pending = (
        select(R.c.meter_key, func.sum(R.c.amount), func.sum(R.c.used_amount))
        .where(R.c.settled.is_(True), R.c.reconciled.is_(False))
        .group_by(R.c.meter_key)
    )
    if keys is not None:
        wanted = sorted(set(keys))
        slices, pending = slices.where(S.c.meter_key.in_(wanted)), pending.where(R.c.meter_key.in_(wanted))
    out: dict[str, tuple[int, int]] = {}
    for key, granted, reserved, used in s.execute(slices):
        out[key] = (int(used), int(reserved) - int(granted))
    for key, amount, used in s.execute(pending):
        u, r = out.get(key, (0, 0))
        out[key] = (u + int(used), r - int(amount))
    return out


def violations(s: Session) -> list[str]:
    """The invariant above, checked: every meter and bounded slice that breaks it (none, ever)."""
    bad = [
        f"meter {key}: used {used} + reserved {reserved} > limit {limit}"
        for key, limit, used, reserved in s.execute(select(M.c.key, M.c.limit_amount, M.c.used, M.c.reserved))
        if limit and used + reserved > limit
    ]
    rows = s.execute(select(S.c.meter_key, S.c.holder, S.c.granted, S.c.reserved, S.c.used, S.c.unbounded))
    bad += [
        f"slice {key}/{holder}: used {used} + reserved {reserved} > granted {granted}"
        for key, holder, granted, reserved, used, unbounded in rows
        if not unbounded and used + reserved > granted
    ]
    return bad
