"""The statements of every escrow admission and settle (`controlplane.store.escrow`), built once with
bound parameters and reused: building a statement and its cache key costs SQLAlchemy more CPU than running
it. The parameters each takes are named in its docstring."""

from __future__ import annotations

import functools
from typing import Any, cast

from sqlalchemy import BigInteger, String, Table, bindparam, case, false, func, literal, select, update
from sqlalchemy.dialects import postgresql

from controlplane.store.models import MeterReservation, MeterSlice

R, S = cast(Table, MeterReservation.__table__), cast(Table, MeterSlice.__table__)


@functools.cache
def held(n: int) -> Any:
    """Add `a{i}` to the reserved amount of the holder `h`'s slice of meter `k{i}`, for i < n."""
    keys: list[Any] = [bindparam(f"k{i}") for i in range(n)]
    added = case(*((S.c.meter_key == keys[i], bindparam(f"a{i}")) for i in range(n)), else_=0)
    return (
        update(S)
        .where(S.c.holder == bindparam("h"), S.c.meter_key.in_(keys))
        .values(reserved=S.c.reserved + added, updated_at=bindparam("now"))
    )


@functools.cache
def share_insert() -> Any:
    """One share of the reservation `rid`: `a` of meter `k`, held by `h` (run once a share)."""
    return R.insert().values(
        reservation_id=bindparam("rid"),
        meter_key=bindparam("k"),
        amount=bindparam("a"),
        settled=False,
        holder=bindparam("h"),
        used_amount=0,
        reconciled=False,
    )


@functools.cache
def shares_from_arrays() -> Any:
    """Every share of the reservation `rid` held by `h` in one statement (PostgreSQL): `amounts[i]` of
    meter `keys[i]`."""
    wants = (
        func.unnest(
            bindparam("keys", type_=postgresql.ARRAY(String)), bindparam("amounts", type_=postgresql.ARRAY(BigInteger))
        )
        .table_valued("key", "amount")
        .render_derived(name="wants")
    )
    rows = select(
        bindparam("rid", type_=String),
        wants.c.key,
        wants.c.amount,
        false(),
        bindparam("h", type_=String),
        literal(0, BigInteger),
        false(),
    ).select_from(wants)
    columns = ["reservation_id", "meter_key", "amount", "settled", "holder", "used_amount", "reconciled"]
    return R.insert().from_select(columns, rows)


@functools.cache
def settle_shares(prefixes: tuple[str, ...]) -> Any:
    """Mark a reservation's unsettled shares settled: a share of a meter whose key starts with
    `prefixes[i]` at the used amount `v{i}`, capped at what it reserved; any other at what it reserved."""
    return settle_shares_many(prefixes).returning(R.c.id)


@functools.cache
def own_slices() -> Any:
    """The holder `h`'s slices of the meters `keys`, locked, by key."""
    return (
        select(S.c.meter_key, S.c.granted, S.c.reserved, S.c.used, S.c.unbounded, S.c.limit_seen)
        .where(S.c.holder == bindparam("h"), S.c.meter_key.in_(bindparam("keys", expanding=True)))
        .order_by(S.c.meter_key)
        .with_for_update()
    )


@functools.cache
def settle_shares_many(prefixes: tuple[str, ...]) -> Any:
    """`settle_shares` without the rows returned, for an executemany of many reservations."""
    amount = R.c.amount
    at = [
        (
            func.substr(R.c.meter_key, 1, len(prefix)) == prefix,
            case((amount < bindparam(f"v{i}"), amount), else_=bindparam(f"v{i}", type_=amount.type)),
        )
        for i, prefix in enumerate(prefixes)
    ]
    return (
        update(R)
        .where(R.c.reservation_id == bindparam("rid"), R.c.settled.is_(False))
        .values(settled=True, used_amount=case(*at, else_=amount) if at else amount)
    )
