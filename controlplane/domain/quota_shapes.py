"""What a quota endpoint answers, parsed (seed 004, "Quota probes"): pure functions over the body's bytes.

Three shapes are read; anything else is refused whole (`ProbeFailed`, not transient), so the member's
quota is unknown (-1) and follows `unknown_policy`:

- generic: `{"available_pct": 42, "resets_at": "2030-01-01T00:20:00Z"}` (`resets_at` optional);
- rate limit (Codex's WHAM and the seed's Claude probe): `{"rate_limit": {"primary_window":
  {"used_percent": 20, "reset_at": 1893456000}, "secondary_window": {...}}, "additional_rate_limits":
  [{"limit_name": "claude-opus-4-7", "rate_limit": {...}}]}`: available is 100 minus the most used
  window, the reset that window's (unix seconds or ISO 8601); each additional limit is a model bucket;
- Anthropic's OAuth usage (`GET https://api.anthropic.com/api/oauth/usage`): `{"five_hour":
  {"utilization": 12.0, "resets_at": "..."}, "seven_day": {...}, "seven_day_opus": {...} or null,
  "seven_day_sonnet": {...} or null}`: overall from five_hour and seven_day; buckets "opus", "sonnet", each
  at most the overall (unlike a rate-limit shape's additional limit, a separate pool, Anthropic's model
  windows come on top of the overall ones, which count every model's use).

A model bucket is kept under its name and its lower-cased name; `model_bucket` finds a member's.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import types
from collections.abc import Mapping
from typing import Any, NamedTuple

MAX_BUCKETS = 32
"""Additional rate limits read from one answer; more are ignored."""
FAMILIES = ("opus", "sonnet", "haiku")
"""Model family words: a member whose model id holds one uses that family's bucket when there is no exact one."""
OAUTH_WINDOWS = ("five_hour", "seven_day")
OAUTH_BUCKETS = {"seven_day_opus": "opus", "seven_day_sonnet": "sonnet"}
NO_BUCKETS: Mapping[str, float] = types.MappingProxyType({})


class ProbeFailed(Exception):
    """The quota endpoint answered, but not with a usable percentage."""

    def __init__(self, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


class Reading(NamedTuple):
    """A quota endpoint's answer: the overall available percentage (0-100), when its binding window resets
    (if it said), and the available percentage of each model bucket."""

    available_pct: float
    resets_at: dt.datetime | None = None
    per_model: Mapping[str, float] = NO_BUCKETS


def _refuse(message: str) -> ProbeFailed:
    return ProbeFailed(message, transient=False)


def parse_reading(body: bytes) -> Reading:
    """The Reading in a JSON body of one of the three shapes; `ProbeFailed` for anything else."""
    try:
        answer = json.loads(body)
    except ValueError as err:
        raise _refuse("unrecognised quota response") from err
    if not isinstance(answer, dict):
        raise _refuse("unrecognised quota response")
    if "available_pct" in answer:
        return _generic(answer)
    if isinstance(answer.get("rate_limit"), dict):
        return _rate_limit(answer)
    if any(isinstance(answer.get(key), dict) for key in OAUTH_WINDOWS):
        return _oauth_usage(answer)
    raise _refuse("unrecognised quota response")


def _generic(answer: dict[str, Any]) -> Reading:
    pct = _percent(answer["available_pct"], "available_pct")
    resets = answer.get("resets_at")
    return Reading(pct, None if resets is None else _instant(resets, "resets_at", unix=False))


def _percent(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 100:
        raise _refuse(f"{name} {value!r} is not a number in 0-100")
    return float(value)


def _instant(value: Any, name: str, *, unix: bool = True) -> dt.datetime:
    """An ISO 8601 instant with a zone, or (`unix`) unix seconds."""
    at = None
    if isinstance(value, str):
        try:
            at = dt.datetime.fromisoformat(value)
        except ValueError:
            at = None
    elif (
        unix and isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    ):
        try:
            at = dt.datetime.fromtimestamp(value, dt.UTC)
        except (OverflowError, OSError, ValueError):
            at = None
    if at is None or at.tzinfo is None:
        raise _refuse(f"{name} {value!r} is not an ISO 8601 instant with a zone" + (" or unix seconds" if unix else ""))
    return at


def _binding(windows: list[tuple[float, dt.datetime | None]], name: str) -> tuple[float, dt.datetime | None]:
    """(available, reset) of the most used of (used, reset) windows."""
    if not windows:
        raise _refuse(f"{name}: no rate-limit window")
    used, reset = max(windows, key=lambda w: w[0])
    return 100.0 - used, reset


def _windows(rate_limit: dict[str, Any], name: str) -> tuple[float, dt.datetime | None]:
    found = []
    for key in ("primary_window", "secondary_window"):
        window = rate_limit.get(key)
        if window is None:
            continue
        if not isinstance(window, dict):
            raise _refuse(f"{name}.{key} is not an object")
        reset = window.get("reset_at")
        used = _percent(window.get("used_percent"), f"{name}.{key}.used_percent")
        found.append((used, None if reset is None else _instant(reset, f"{name}.{key}.reset_at")))
    return _binding(found, name)


def _buckets(pairs: list[tuple[str, float]]) -> Mapping[str, float]:
    """Each bucket under its name and its lower-cased name (the first of a name wins)."""
    out: dict[str, float] = {}
    for name, pct in pairs[:MAX_BUCKETS]:
        out.setdefault(name, pct)
        out.setdefault(name.lower(), pct)
    return types.MappingProxyType(out)


def _rate_limit(answer: dict[str, Any]) -> Reading:
    pct, resets_at = _windows(answer["rate_limit"], "rate_limit")
    extra = answer.get("additional_rate_limits") or []
    if not isinstance(extra, list):
        raise _refuse("additional_rate_limits is not a list")
    pairs = []
    for index, limit in enumerate(extra[:MAX_BUCKETS]):
        where = f"additional_rate_limits[{index}]"
        if not isinstance(limit, dict) or not isinstance(limit.get("limit_name"), str) or not limit["limit_name"]:
            raise _refuse(f"{where} has no limit_name")
        if limit.get("rate_limit") is None:  # a bucket the account does not have
            continue
        if not isinstance(limit["rate_limit"], dict):
            raise _refuse(f"{where}.rate_limit is not an object")
        pairs.append((limit["limit_name"], _windows(limit["rate_limit"], where)[0]))
    return Reading(pct, resets_at, _buckets(pairs))


def _oauth_window(answer: dict[str, Any], key: str) -> tuple[float, dt.datetime | None] | None:
    window = answer.get(key)
    if window is None:
        return None
    if not isinstance(window, dict):
        raise _refuse(f"{key} is not an object")
    reset = window.get("resets_at")
    used = _percent(window.get("utilization"), f"{key}.utilization")
    return used, None if reset is None else _instant(reset, f"{key}.resets_at")


def _oauth_usage(answer: dict[str, Any]) -> Reading:
    overall = [w for key in OAUTH_WINDOWS if (w := _oauth_window(answer, key)) is not None]
    pct, resets_at = _binding(overall, "usage")
    pairs = [  # every model's use counts in five_hour and seven_day: a bucket never has more left than they do
        (bucket, min(100.0 - window[0], pct))
        for key, bucket in OAUTH_BUCKETS.items()
        if (window := _oauth_window(answer, key)) is not None
    ]
    return Reading(pct, resets_at, _buckets(pairs))


def model_bucket(per_model: Mapping[str, float], model: str) -> str:
    """The bucket a member naming `model` is gated on: the model id's own, else (lower-cased) the bucket of
    the family word (opus, sonnet, haiku) the id holds; "" when none (the overall quota is used)."""
    if not model or not per_model:
        return ""
    if model in per_model:
        return model
    lowered = model.lower()
    if lowered in per_model:
        return lowered
    return next((family for family in FAMILIES if family in lowered and family in per_model), "")
