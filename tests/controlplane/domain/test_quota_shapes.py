"""The quota answers a probe reads (issue 29): the generic shape, the rate-limit shape with per-model
additional limits, Anthropic's OAuth usage body; anything else refused whole (the quota is then unknown);
and the bucket a member's model is gated on."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from controlplane.domain.quota_deadline import QuotaSnapshot
from controlplane.domain.quota_shapes import MAX_BUCKETS, ProbeFailed, Reading, model_bucket, parse_reading

AT = dt.datetime(2030, 1, 1, 0, 20, tzinfo=dt.UTC)
UNIX = int(AT.timestamp())


def window(used: float, reset: object = UNIX) -> dict[str, object]:
    return {"used_percent": used, "reset_at": reset}


def oauth(utilization: float, resets: str | None = "2030-01-01T00:20:00Z") -> dict[str, object]:
    return {"utilization": utilization, "resets_at": resets}


@pytest.mark.parametrize(
    "answer, reading",
    [
        ({"available_pct": 42}, Reading(42.0)),
        ({"available_pct": 0, "resets_at": "2030-01-01T00:20:00Z"}, Reading(0.0, AT)),
        # rate limit: the most used window binds, with its reset (unix seconds or ISO)
        (
            {"rate_limit": {"primary_window": window(20, UNIX - 3600), "secondary_window": window(70)}},
            Reading(30.0, AT),
        ),
        ({"rate_limit": {"primary_window": window(20, "2030-01-01T00:20:00+00:00")}}, Reading(80.0, AT)),
        ({"rate_limit": {"primary_window": {"used_percent": 5}, "secondary_window": None}}, Reading(95.0)),
        (
            {
                "rate_limit": {"primary_window": window(10)},
                "additional_rate_limits": [
                    {"limit_name": "claude-opus-4-7", "rate_limit": {"primary_window": window(60)}},
                    {
                        "limit_name": "Sonnet",
                        "rate_limit": {"primary_window": window(1), "secondary_window": window(3)},
                    },
                    {"limit_name": "GPT-5.3-Codex-Spark", "rate_limit": None},  # not on this account
                ],
            },
            Reading(90.0, AT, {"claude-opus-4-7": 40.0, "Sonnet": 97.0, "sonnet": 97.0}),
        ),
        # Anthropic's OAuth usage: five_hour and seven_day overall, opus and sonnet buckets
        (
            {
                "five_hour": oauth(12.0),
                "seven_day": oauth(30.5, "2030-01-05T00:00:00Z"),
                "seven_day_oauth_apps": None,
                "seven_day_opus": oauth(95.0),
                "seven_day_sonnet": None,
            },
            Reading(69.5, dt.datetime(2030, 1, 5, tzinfo=dt.UTC), {"opus": 5.0}),
        ),
        # a model window never leaves more than the overall ones, which count every model's use
        (
            {"five_hour": oauth(50.0, None), "seven_day": None, "seven_day_sonnet": oauth(20.0)},
            Reading(50.0, None, {"sonnet": 50.0}),
        ),
        (
            {"five_hour": oauth(10.0, None), "seven_day": None, "seven_day_sonnet": oauth(20.0)},
            Reading(90.0, None, {"sonnet": 80.0}),
        ),
    ],
)
def test_the_shapes_read(answer: dict[str, object], reading: Reading) -> None:
    assert parse_reading(json.dumps(answer).encode()) == reading


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"<html>garbage</html>",
        b"[50]",
        b'{"remaining": 12}',
        b'{"available_pct": 140}',
        b'{"available_pct": 42, "resets_at": 5}',  # the generic shape's reset is ISO only
        b'{"rate_limit": {}}',  # no window
        b'{"rate_limit": {"primary_window": {"used_percent": 101}}}',
        b'{"rate_limit": {"primary_window": {"used_percent": "20"}}}',
        b'{"rate_limit": {"primary_window": {"used_percent": true}}}',
        b'{"rate_limit": {"primary_window": {"used_percent": 20, "reset_at": "soon"}}}',
        b'{"rate_limit": {"primary_window": {"used_percent": 20, "reset_at": 1e300}}}',
        b'{"rate_limit": {"primary_window": {"used_percent": 20, "reset_at": "2030-01-01T00:20:00"}}}',  # no zone
        b'{"rate_limit": {"primary_window": [20]}}',
        b'{"rate_limit": {"primary_window": {"used_percent": 1}}, "additional_rate_limits": {"opus": 1}}',
        b'{"rate_limit": {"primary_window": {"used_percent": 1}}, "additional_rate_limits": [{"rate_limit": {}}]}',
        b'{"rate_limit": {"primary_window": {"used_percent": 1}}, "additional_rate_limits": '
        b'[{"limit_name": "opus", "rate_limit": {"primary_window": {"used_percent": -1}}}]}',
        b'{"five_hour": {"utilization": 120}}',
        b'{"five_hour": {"utilization": null}}',
        b'{"five_hour": {"utilization": 12}, "seven_day_opus": {"utilization": "lots"}}',
        b'{"five_hour": {"utilization": 12, "resets_at": "Friday"}}',
        b'{"five_hour": null, "seven_day": null}',
    ],
)
def test_anything_else_is_refused_whole_and_not_retried(body: bytes) -> None:
    with pytest.raises(ProbeFailed) as refused:
        parse_reading(body)
    assert not refused.value.transient


def test_more_than_32_buckets_are_ignored() -> None:
    extra = [{"limit_name": f"m{i}", "rate_limit": {"primary_window": window(i)}} for i in range(40)]
    answer = {"rate_limit": {"primary_window": window(0)}, "additional_rate_limits": extra}
    reading = parse_reading(json.dumps(answer).encode())
    assert sorted(reading.per_model) == sorted(f"m{i}" for i in range(MAX_BUCKETS))


@pytest.mark.parametrize(
    "per_model, model, bucket",
    [
        ({"claude-opus-4-7": 40.0, "opus": 5.0}, "claude-opus-4-7", "claude-opus-4-7"),  # the exact id first
        ({"Opus": 5.0, "opus": 5.0}, "claude-opus-4-7", "opus"),  # then the family word in the id
        ({"opus": 5.0}, "Claude-Opus-4-7", "opus"),
        ({"opus": 5.0}, "claude-sonnet-5-5", ""),  # buckets, none for it: the overall
        ({"opus": 5.0}, "", ""),  # the tier's model: the overall
        ({}, "claude-opus-4-7", ""),
        ({"gpt-5.5": 30.0}, "GPT-5.5", "gpt-5.5"),
    ],
)
def test_the_bucket_of_a_members_model(per_model: dict[str, float], model: str, bucket: str) -> None:
    assert model_bucket(per_model, model) == bucket


def test_a_snapshot_for_a_model_is_its_bucket_else_the_overall() -> None:
    snapshot = QuotaSnapshot(90.0, 1.0, AT, {"opus": 5.0})
    assert snapshot.for_model("claude-opus-4-7") == QuotaSnapshot(5.0, 1.0, AT, {"opus": 5.0}, "opus")
    assert snapshot.for_model("claude-sonnet-5-5") is snapshot
    assert QuotaSnapshot(-1.0, 1.0, None, {"opus": 5.0}).for_model("claude-opus-4-7").available_pct == -1.0
