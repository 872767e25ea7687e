"""Pages of list answers (AIP-158): at most `page_size` items, and never more bytes than one answer may
carry, so no list can grow past the message limit however large its items are. A page token is
opaque to callers: the sort key of the last item given (or an offset), base64url JSON.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime as dt
import json
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

from drover.errors import InvalidArgument

T = TypeVar("T")
PAGE_BYTES = 3 * 1024 * 1024
"""Bytes of items in one answer: under grpcurl's 4 MB default and far under the 16 MiB send limit."""


def encode(*values: Any) -> str:
    plain = [v.isoformat() if isinstance(v, dt.datetime) else v for v in values]
    return base64.urlsafe_b64encode(json.dumps(plain, separators=(",", ":")).encode()).decode().rstrip("=")


def decode(token: str, kinds: tuple[type, ...]) -> list[Any]:
    """The values of a page token made by `encode` with values of `kinds`; INVALID_ARGUMENT otherwise."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        values = json.loads(raw)
        if not isinstance(values, list) or len(values) != len(kinds):
            raise ValueError("shape")
        out: list[Any] = []
        for value, kind in zip(values, kinds, strict=True):
            if kind is dt.datetime:
                parsed = dt.datetime.fromisoformat(value)
                out.append(parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC))
            elif kind is int:
                if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**62:
                    raise ValueError("int")
                out.append(value)
            else:
                if not isinstance(value, str) or len(value) > 300:
                    raise ValueError("str")
                out.append(value)
        return out
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise InvalidArgument("not a page token this call gave", field="page_token") from None


@dataclasses.dataclass
class Page(Generic[T]):
    items: list[T]
    next_token: str = ""


def take(
    rows: Iterable[Any], size: int, convert: Callable[[Any], T], nbytes: Callable[[T], int], key: Callable[[Any], str]
) -> Page[T]:
    """The first `size` rows (converted) that fit PAGE_BYTES; `rows` may hold one more than `size`, which
    says whether there is a next page. At least one item is always given."""
    items: list[T] = []
    used = 0
    last = None
    for row in rows:
        if len(items) == size:
            return Page(items, key(last))
        item = convert(row)
        used += nbytes(item)
        if items and used > PAGE_BYTES:
            return Page(items, key(last))
        items.append(item)
        last = row
    return Page(items)


def page_size(requested: int, default: int, maximum: int) -> int:
    """AIP-158: 0 takes the default; more than the maximum takes the maximum."""
    return default if requested <= 0 else min(requested, maximum)
