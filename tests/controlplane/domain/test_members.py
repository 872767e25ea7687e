"""Class members: ranking, gates, intra-kind order and start-up validation, as tables from seed 004."""

from __future__ import annotations

import datetime as dt
import tomllib

import pytest

from controlplane.domain.member_config import ConfigError, parse_classes, parse_modifiers, parse_quota_router
from controlplane.domain.members import (
    PAY_PER_API,
    SUBSCRIPTION,
    Member,
    QuotaPolicy,
    QuotaSnapshot,
    TierClass,
    TodModifier,
    effective_score,
    intra_kind_order,
    quota_allows,
    rank,
    select,
)

NOON = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.UTC)
NIGHT = dt.datetime(2030, 1, 1, 23, 0, tzinfo=dt.UTC)
POLICY = QuotaPolicy()


def member(
    agent: str,
    score: int = 100,
    billing: str = "Subscription",
    *,
    instance: str = "",
    model: str = "",
    caps: tuple[str, ...] = (),
    order: int = 0,
    max_concurrent: int = 0,
) -> Member:
    return Member(
        agent=agent,
        instance_id=instance,
        billing=billing,
        model=model,
        quality_score=score,
        capabilities=frozenset(caps),
        order=order,
        max_concurrent=max_concurrent,
    )


def keys(ranked) -> list[str]:
    return [r.member.route_key for r in ranked]


def verdicts(selection) -> dict[str, str]:
    return {c["route_key"]: c["verdict"] for c in selection.candidates}


def route(
    members,
    *,
    snapshots=None,
    observed=None,
    active=None,
    policy=POLICY,
    caps=(),
    now=NOON,
    modifiers=(),
    sticky="",
    rr=None,
    class_id="opus",
):
    all_full = {m.route_key: QuotaSnapshot(80.0) for m in members}
    return select(
        TierClass(class_id, tuple(members)),
        caps,
        modifiers,
        all_full if snapshots is None else snapshots,
        observed or {},
        active or {},
        policy,
        now,
        sticky=sticky,
        rr_counters=rr,
    )


# --- time-of-day modifiers --------------------------------------------------------------------------------

FRONTIER = (
    member("claude", 100, model="claude-opus-4-7", order=0),
    member("codex", 100, model="gpt-5.5", order=1),
    member("gemini", 95, model="gemini-3-flash-preview", order=2),
)
OPUS_NIGHT = (TodModifier(route_key="claude", start="22:00", end="06:00", delta=-1),)


@pytest.mark.parametrize(
    "now, order, effective",
    [
        (NOON, ["claude", "codex", "gemini"], [100, 100, 95]),  # no modifier: config order breaks the tie
        (NIGHT, ["codex", "claude", "gemini"], [100, 99, 95]),  # Opus 99 loses the tie to Codex 100 ...
        (NIGHT.replace(hour=3), ["codex", "claude", "gemini"], [100, 99, 95]),  # the window wraps midnight
        (NIGHT.replace(hour=6), ["claude", "codex", "gemini"], [100, 100, 95]),  # end is exclusive
    ],
)
def test_time_of_day_modifier_breaks_ties_but_never_demotes_below_a_weaker_model(now, order, effective) -> None:
    ranked, rejected = rank(FRONTIER, [], OPUS_NIGHT, now)
    assert (keys(ranked), [r.effective for r in ranked], rejected) == (order, effective, [])
    assert [r.base for r in ranked] == [{"claude": 100, "codex": 100, "gemini": 95}[k] for k in order]
    assert route(FRONTIER, modifiers=OPUS_NIGHT, now=now).chosen.route_key == order[0]


@pytest.mark.parametrize(
    "modifier, score",
    [
        (TodModifier(route_key="claude", start="22:00", end="06:00", delta=-1), 99),
        (TodModifier(route_key="claude/acct-a", start="22:00", end="23:30", delta=2), 102),
        (TodModifier(route_key="claude/acct-b", start="22:00", end="23:30", delta=2), 100),  # another instance
        (TodModifier(model="claude-opus-4-7", start="00:00", end="24:00", delta=-5), 95),
        (TodModifier(model="gpt-5.5", start="00:00", end="24:00", delta=-5), 100),
        (TodModifier(route_key="claude", start="08:00", end="20:00", delta=-1), 100),  # not active at 23:00
    ],
)
def test_effective_score_adds_matching_active_modifiers(modifier, score) -> None:
    acct_a = member("claude", 100, instance="acct-a", model="claude-opus-4-7")
    assert effective_score(acct_a, [modifier], NIGHT) == score


# --- capability gate -----------------------------------------------------------------------------------------

GATED = (
    member("claude", 100, caps=("sensitive", "architectural"), order=0),
    member("codex", 100, caps=("sensitive",), order=1),
    member("gemini", 95, order=2),
)


@pytest.mark.parametrize(
    "required, eligible, rejected",
    [
        ([], ["claude", "codex", "gemini"], {}),
        (["sensitive"], ["claude", "codex"], {"gemini": "missing capabilities [sensitive]"}),
        ([" Sensitive "], ["claude", "codex"], {"gemini": "missing capabilities [sensitive]"}),  # case-insensitive
        (
            ["architectural", "sensitive"],
            ["claude"],
            {
                "codex": "missing capabilities [architectural]",
                "gemini": "missing capabilities [architectural, sensitive]",
            },
        ),
    ],
)
def test_capability_gate_routes_only_to_members_holding_every_required_tag(required, eligible, rejected) -> None:
    ranked, lost = rank(GATED, required, [], NOON)
    assert keys(ranked) == eligible
    assert {m.route_key: reason for m, reason in lost} == rejected


def test_no_eligible_member_fails_with_routing_no_eligible_naming_the_gate() -> None:
    selection = route(GATED, caps=["security", "Sensitive"])
    assert (selection.chosen, selection.outcome) == (None, "no_eligible")
    assert selection.message == (
        "ROUTING_NO_ELIGIBLE: no member of class 'opus' meets RequiredCapabilities=[security, sensitive]"
    )
    assert verdicts(selection) == {
        "claude": "missing capabilities [security]",
        "codex": "missing capabilities [security]",
        "gemini": "missing capabilities [security, sensitive]",
    }


# --- billing and order ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "members, order",
    [
        ((member("claude", 100, "PayPerApi", order=0), member("codex", 100, order=1)), ["codex", "claude"]),
        ((member("claude", 100, "PayPerApi", order=0), member("codex", 99, order=1)), ["claude", "codex"]),
        ((member("claude", 100, order=0), member("codex", 100, order=1)), ["claude", "codex"]),
        ((member("claude", 100, order=1), member("codex", 100, order=0)), ["codex", "claude"]),
        ((member("claude", 80, order=0), member("codex", 100, "PayPerApi", order=1)), ["codex", "claude"]),
    ],
)
def test_ties_go_to_subscription_then_config_order(members, order) -> None:
    assert keys(rank(members, [], [], NOON)[0]) == order


# --- quota gate ----------------------------------------------------------------------------------------------

SUB = member("claude", instance="acct-a")
PAYG = member("claude", billing="PayPerApi")
THREE_MIN_AGO, ELEVEN_MIN_AGO = NOON - dt.timedelta(minutes=3), NOON - dt.timedelta(minutes=11)


@pytest.mark.parametrize(
    "who, pct, failures, unknown_policy, allowed",
    [
        (PAYG, -1, [THREE_MIN_AGO], "FailCautious", True),  # PayPerApi is never gated on quota
        (SUB, 50, [], "UseObservedFailures", True),
        (SUB, 10, [], "UseObservedFailures", True),  # at min_quota_pct is enough
        (SUB, 9.5, [], "UseObservedFailures", False),
        (SUB, 50, [THREE_MIN_AGO], "UseObservedFailures", True),  # a known quota ignores observed failures
        (SUB, -1, [], "UseObservedFailures", True),
        (SUB, -1, [THREE_MIN_AGO], "UseObservedFailures", False),  # a 429 in the last 10 minutes blocks
        (SUB, -1, [ELEVEN_MIN_AGO], "UseObservedFailures", True),  # an older one does not
        (SUB, -1, [], "FailCautious", False),
        (SUB, -1, [THREE_MIN_AGO], "FailOpen", True),
    ],
)
def test_quota_gate(who, pct, failures, unknown_policy, allowed) -> None:
    policy = QuotaPolicy(unknown_policy=unknown_policy)
    ok, reason = quota_allows(who, QuotaSnapshot(pct), failures, policy, NOON)
    assert ok is allowed, reason


@pytest.mark.parametrize(
    "failures, chosen",
    [
        ([], "claude/acct-a"),
        ([THREE_MIN_AGO], "claude/acct-b"),
        ([ELEVEN_MIN_AGO], "claude/acct-a"),
    ],
)
def test_unknown_probe_follows_observed_failures_in_select(failures, chosen) -> None:
    members = (member("claude", 100, instance="acct-a", order=0), member("claude", 99, instance="acct-b", order=1))
    selection = route(members, snapshots={"claude/acct-b": QuotaSnapshot(50.0)}, observed={"claude/acct-a": failures})
    assert selection.chosen.route_key == chosen
    if failures == [THREE_MIN_AGO]:
        assert verdicts(selection)["claude/acct-a"] == "quota unknown and a quota failure in the last 10 min"


@pytest.mark.parametrize(
    "active, chosen, verdict",
    [
        ({}, "claude/acct-a", "ranked below claude/acct-a"),
        ({"claude/acct-a": 1}, "claude/acct-b", "at max_concurrent"),
        ({"claude/acct-a": 2}, "claude/acct-b", "at max_concurrent"),
    ],
)
def test_member_at_max_concurrent_is_skipped(active, chosen, verdict) -> None:
    members = (
        member("claude", 100, "PayPerApi", instance="acct-a", max_concurrent=1, order=0),
        member("claude", 90, "PayPerApi", instance="acct-b", order=1),
    )
    selection = route(members, active=active)
    assert selection.chosen.route_key == chosen
    assert verdicts(selection)["claude/acct-a" if active else "claude/acct-b"] == verdict


def test_all_subscription_members_exhausted_waits() -> None:
    members = (member("claude", 100, instance="acct-a", order=0), member("codex", 100, order=1))
    selection = route(members, snapshots={"claude/acct-a": QuotaSnapshot(5.0), "codex": QuotaSnapshot(2.0)})
    assert (selection.chosen, selection.outcome) == (None, "wait")
    assert selection.message == "all Subscription members of class 'opus' are exhausted; recheck in 300 s"
    assert verdicts(selection) == {
        "claude/acct-a": "quota 5% below min_quota_pct 10%",
        "codex": "quota 2% below min_quota_pct 10%",
    }


def test_exhausted_subscriptions_fall_back_to_pay_per_api() -> None:
    members = (member("claude", 100, order=0), member("claude", 100, "PayPerApi", instance="payg", order=1))
    selection = route(members, snapshots={"claude": QuotaSnapshot(5.0)})
    assert (selection.outcome, selection.chosen.billing) == ("chosen", "PayPerApi")


@pytest.mark.parametrize("unknown_policy", ["UseObservedFailures", "FailCautious", "FailOpen"])
def test_only_pay_per_api_never_waits(unknown_policy) -> None:
    members = (member("claude", 100, "PayPerApi", instance="acct-a"), member("claude", 90, "PayPerApi", order=1))
    selection = route(
        members,
        snapshots={},
        observed={"claude/acct-a": [THREE_MIN_AGO]},
        policy=QuotaPolicy(unknown_policy=unknown_policy, min_quota_pct=100),
    )
    assert (selection.outcome, selection.chosen.route_key) == ("chosen", "claude/acct-a")


def test_busy_pay_per_api_class_waits_for_a_slot() -> None:
    members = (member("claude", 100, "PayPerApi", max_concurrent=1),)
    selection = route(members, active={"claude": 1})
    assert selection.outcome == "wait"
    assert selection.message == "every eligible member of class 'opus' is at max_concurrent; recheck in 300 s"


# --- intra-kind policies on pooled instances --------------------------------------------------------------

POOL = (
    member("claude", 100, instance="acct-a", order=0),
    member("claude", 100, instance="acct-b", order=1),
    member("codex", 95, order=2),
)


@pytest.mark.parametrize(
    "quota, order",
    [
        ({"claude/acct-a": 30.0, "claude/acct-b": 80.0}, ["claude/acct-b", "claude/acct-a", "codex"]),
        ({"claude/acct-a": 80.0, "claude/acct-b": 30.0}, ["claude/acct-a", "claude/acct-b", "codex"]),
        ({"claude/acct-a": 50.0, "claude/acct-b": 50.0}, ["claude/acct-a", "claude/acct-b", "codex"]),  # config order
        ({"claude/acct-b": 20.0}, ["claude/acct-b", "claude/acct-a", "codex"]),  # unknown last
    ],
)
def test_most_quota_first_spends_the_fuller_account_first(quota, order) -> None:
    snapshots = {k: QuotaSnapshot(v) for k, v in quota.items()}
    ranked, _ = rank(POOL, [], [], NOON)
    assert keys(intra_kind_order(ranked, "MostQuotaFirst", snapshots, {}, "")) == order
    assert route(POOL, snapshots=snapshots).chosen.route_key == order[0]


def test_intra_kind_order_keeps_other_kinds_and_score_tiers_in_place() -> None:
    members = (
        member("claude", 100, instance="acct-a", order=0),
        member("codex", 100, order=1),
        member("claude", 100, instance="acct-b", order=2),
        member("claude", 99, instance="acct-c", order=3),
    )
    snapshots = {
        "claude/acct-a": QuotaSnapshot(10.0),
        "claude/acct-b": QuotaSnapshot(90.0),
        "claude/acct-c": QuotaSnapshot(100.0),
    }
    ranked, _ = rank(members, [], [], NOON)
    assert keys(intra_kind_order(ranked, "MostQuotaFirst", snapshots, {}, "")) == [
        "claude/acct-b",
        "codex",
        "claude/acct-a",
        "claude/acct-c",
    ]


def test_round_robin_alternates_across_calls() -> None:
    counters: dict[str, int] = {}
    policy = QuotaPolicy(intra_kind_policy="RoundRobin")
    chosen = [route(POOL, policy=policy, rr=counters).chosen.route_key for _ in range(4)]
    assert chosen == ["claude/acct-a", "claude/acct-b", "claude/acct-a", "claude/acct-b"]
    assert counters == {"claude": 4}


def test_round_robin_skips_an_exhausted_sibling() -> None:
    counters = {"claude": 1}
    snapshots = {"claude/acct-a": QuotaSnapshot(50.0), "claude/acct-b": QuotaSnapshot(1.0), "codex": QuotaSnapshot(50)}
    selection = route(POOL, snapshots=snapshots, policy=QuotaPolicy(intra_kind_policy="RoundRobin"), rr=counters)
    assert selection.chosen.route_key == "claude/acct-a"
    assert [c["route_key"] for c in selection.candidates] == ["claude/acct-b", "claude/acct-a", "codex"]


@pytest.mark.parametrize(
    "acct_b_pct, chosen",
    [
        (20.0, "claude/acct-b"),  # usable: the Task stays on its instance, though acct-a has more quota
        (5.0, "claude/acct-a"),  # exhausted: it moves to the sibling
    ],
)
def test_sticky_keeps_the_instance_while_usable(acct_b_pct, chosen) -> None:
    snapshots = {"claude/acct-a": QuotaSnapshot(90.0), "claude/acct-b": QuotaSnapshot(acct_b_pct)}
    selection = route(POOL, snapshots=snapshots, policy=QuotaPolicy(intra_kind_policy="Sticky"), sticky="claude/acct-b")
    assert selection.chosen.route_key == chosen


def test_selection_records_every_candidate_and_why_it_lost() -> None:
    members = (
        member("claude", 100, model="opus", caps=("sensitive",), order=0),
        member("codex", 100, model="gpt", caps=("sensitive",), order=1),
        member("claude", 100, "PayPerApi", instance="payg", model="opus", caps=("sensitive",), order=2),
        member("gemini", 95, order=3),
    )
    selection = route(
        members,
        caps=["sensitive"],
        modifiers=OPUS_NIGHT,
        now=NIGHT,
        snapshots={"claude": QuotaSnapshot(80.0), "codex": QuotaSnapshot(3.0)},
    )
    assert selection.outcome == "chosen"
    assert selection.candidates == [
        {
            "route_key": "codex",
            "model": "gpt",
            "billing": "Subscription",
            "base": 100,
            "effective": 100,
            "modifiers": [],
            "verdict": "quota 3% below min_quota_pct 10%",
        },
        {
            "route_key": "claude",
            "model": "opus",
            "billing": "Subscription",
            "base": 100,
            "effective": 99,
            "modifiers": ["claude 22:00-06:00 -1"],
            "verdict": "chosen",
        },
        {
            "route_key": "claude/payg",
            "model": "opus",
            "billing": "PayPerApi",
            "base": 100,
            "effective": 99,
            "modifiers": ["claude 22:00-06:00 -1"],
            "verdict": "ranked below claude",
        },
        {
            "route_key": "gemini",
            "model": "",
            "billing": "Subscription",
            "base": 95,
            "effective": 95,
            "modifiers": [],
            "verdict": "missing capabilities [sensitive]",
        },
    ]
    assert selection.message == "class 'opus': chose claude model 'opus' (Subscription), score 100, effective 99"


# --- start-up validation -------------------------------------------------------------------------------------

CONFIG = """
[[classes]]
id = "sonnet"
display_name = "Sonnet members"

[[classes.members]]
agent = "anthropic"
instance_id = "acct-a"
billing = "Subscription"
model = "claude-sonnet-5-5"
quality_score = 100
capabilities = ["Sensitive", " architectural "]
reasoning = "high"
max_concurrent = 1
base_url = "https://a.example"
credential_file = "/run/secrets/acct-a"
probe_url = "https://a.example/quota"

[[classes.members]]
agent = "Anthropic"
instance_id = "anthropic/acct-b"
billing = "subscription"
model = "claude-sonnet-5-5"
quality_score = 100

[[classes.members]]
agent = "anthropic"
instance_id = "payg"
billing = "PayPerApi"
model = "claude-sonnet-5-5"
quality_score = 99
max_concurrent = 4
credential_env = "ANTHROPIC_KEY_A"

[[classes]]
id = "haiku"
[[classes.members]]
agent = "anthropic"
billing = "Subscription"
quality_score = 50

[[modifiers]]
route_key = "anthropic/acct-a"
start = "22:00"
end = "06:00"
delta = -1

[quota_router]
min_quota_pct = 15
unknown_policy = "FailCautious"
intra_kind_policy = "Sticky"
probe_max_retries = 1
"""


def test_the_documented_shape_parses() -> None:
    data = tomllib.loads(CONFIG)
    classes, warnings = parse_classes(data)
    assert list(classes) == ["sonnet", "haiku"]
    sonnet = classes["sonnet"]
    assert (sonnet.id, sonnet.display_name) == ("sonnet", "Sonnet members")
    first, second, third = sonnet.members
    assert first == Member(
        agent="anthropic",
        instance_id="acct-a",
        billing="Subscription",
        model="claude-sonnet-5-5",
        quality_score=100,
        capabilities=frozenset({"sensitive", "architectural"}),
        reasoning="high",
        max_concurrent=1,
        base_url="https://a.example",
        credential_file="/run/secrets/acct-a",
        probe_url="https://a.example/quota",
        order=0,
    )
    assert (second.route_key, second.billing, second.order) == ("anthropic/acct-b", "Subscription", 1)
    assert (third.route_key, third.billing, third.credential_env) == ("anthropic/payg", "PayPerApi", "ANTHROPIC_KEY_A")
    assert sonnet.describe() == (
        "AgentClass 'sonnet' resolved members: [anthropic/acct-a/claude-sonnet-5-5"
        "(Subscription), anthropic/acct-b/claude-sonnet-5-5(Subscription), "
        "anthropic/payg/claude-sonnet-5-5(PayPerApi)]"
    )
    assert warnings == ["AgentClass 'haiku' has no PayPerApi fallback — items may wait indefinitely"]
    assert parse_modifiers(data) == (TodModifier(route_key="anthropic/acct-a", start="22:00", end="06:00", delta=-1),)
    assert parse_quota_router(data) == QuotaPolicy(
        min_quota_pct=15, unknown_policy="FailCautious", intra_kind_policy="Sticky", probe_max_retries=1
    )
    assert parse_classes({}) == ({}, [])
    assert parse_quota_router({}) == QuotaPolicy()


def sub(**fields) -> dict:
    return {"agent": "anthropic", "billing": "Subscription", "quality_score": 100, **fields}


def one_class(*members: dict, class_id: str = "sonnet") -> dict:
    return {"classes": [{"id": class_id, "members": list(members)}]}


DUPLICATE = (
    "AgentClass 'codex-xhigh': duplicate member route 'codex' model 'gpt-5.5'. Give same-kind "
    "subscriptions distinct instance_id values (legacy shadowing duplicates are rejected since #226 "
    "multi-subscription pooling)."
)


@pytest.mark.parametrize(
    "data, message",
    [
        (
            {"classes": [{"id": "sonnet", "members": [sub()]}, {"id": "Sonnet", "members": [sub()]}]},
            "AgentClass 'Sonnet': duplicate class id (class ids are case-insensitive)",
        ),
        ({"classes": [{"id": "sonnet", "members": []}]}, "AgentClass 'sonnet' has no members"),
        ({"classes": [{"id": "sonnet"}]}, "AgentClass 'sonnet' has no members"),
        ({"classes": [{"members": [sub()]}]}, "classes[0]: id is required"),
        (one_class(sub(agent=" ")), "AgentClass 'sonnet': member 1: agent is empty"),
        (
            one_class(sub(billing="Monthly")),
            "AgentClass 'sonnet': member 'anthropic': billing 'Monthly' must be Subscription or PayPerApi",
        ),
        (
            one_class({"agent": "anthropic", "billing": "PayPerApi"}),
            "AgentClass 'sonnet': member 'anthropic' has no quality_score. Add quality_score=N (0-200) to it: "
            "there is no default score, members are ranked by it",
        ),
        (
            one_class(sub(quality_score=201)),
            "AgentClass 'sonnet': member 'anthropic': quality_score 201 is outside 0-200",
        ),
        (
            one_class(sub(quality_score=-1)),
            "AgentClass 'sonnet': member 'anthropic': quality_score -1 is outside 0-200",
        ),
        (
            one_class(sub(quality_score="high")),
            "AgentClass 'sonnet': member 'anthropic': quality_score must be an integer",
        ),
        (
            one_class(sub(agent="codex", model="gpt-5.5"), sub(agent="codex", model="gpt-5.5"), class_id="codex-xhigh"),
            DUPLICATE,
        ),
        (
            one_class(sub(instance_id="acct-a", model="m"), sub(instance_id="anthropic/acct-a", model="m")),
            "AgentClass 'sonnet': duplicate member route 'anthropic/acct-a' model 'm'. Give same-kind subscriptions "
            "distinct instance_id values (legacy shadowing duplicates are rejected since #226 "
            "multi-subscription pooling).",
        ),
        (
            one_class(sub(instance_id="openai/acct-a")),
            "AgentClass 'sonnet': member 1: instance_id 'openai/acct-a' has prefix 'openai', which does not match "
            "agent 'anthropic'",
        ),
        (
            one_class(sub(instance_id="anthropic/a/b")),
            "AgentClass 'sonnet': member 1: instance_id 'anthropic/a/b' is not a name or anthropic/name",
        ),
        (
            one_class(sub(instance_id="anthropic/")),
            "AgentClass 'sonnet': member 1: instance_id 'anthropic/' is not a name or anthropic/name",
        ),
        (
            one_class(sub(agent="gemini", quality_score=95)),
            "AgentClass 'sonnet': member 'gemini': gemini members with quality_score >= 90 must have "
            'reasoning = "high"',
        ),
        (
            one_class(sub(reasoning="hihg")),
            "AgentClass 'sonnet': member 'anthropic': reasoning 'hihg' must be one of low, medium, high, xhigh, max",
        ),
        (
            one_class(sub(credential_env="K", credential_file="/k")),
            "AgentClass 'sonnet': member 'anthropic': set credential_env or credential_file, not both",
        ),
        (one_class(sub(max_concurrent=-1)), "AgentClass 'sonnet': member 'anthropic': max_concurrent must be >= 0"),
        (one_class(sub(capabilites=["sensitive"])), "AgentClass 'sonnet': member 1: unknown keys ['capabilites']"),
        (
            one_class(sub(runtimes=["claude"])),
            "AgentClass 'sonnet': member 'anthropic': runtimes must be a non-empty list of harness, claude-code, "
            "opencode",
        ),
        (one_class(sub(runtimes=[])), "AgentClass 'sonnet': member 'anthropic': runtimes must be a non-empty list"),
        (
            {"modifiers": [{"route_key": "anthropic", "start": "22:00", "end": "06:00", "delta": 6}]},
            "modifier 'anthropic' 22:00-06:00: delta 6 is outside ±5; time-of-day modifiers only break ties",
        ),
        (
            {"modifiers": [{"model": "m", "start": "00:00", "end": "24:00", "delta": -6}]},
            "modifier 'm' 00:00-24:00: delta -6 is outside ±5",
        ),
        ({"modifiers": [{"start": "22:00", "end": "06:00", "delta": 1}]}, "modifier 1: set route_key or model"),
        (
            {"modifiers": [{"model": "m", "start": "25:00", "end": "06:00", "delta": 1}]},
            "modifier 1: start '25:00' is not UTC HH:MM",
        ),
        (
            {"modifiers": [{"model": "m", "start": "00:00", "end": "00:00", "delta": 1}]},
            "modifier 1: start and end are equal",
        ),
        ({"quota_router": {"unknown_policy": "Maybe"}}, "quota_router.unknown_policy: 'Maybe' is not one of"),
        ({"quota_router": {"intra_kind_policy": "Fastest"}}, "quota_router.intra_kind_policy: 'Fastest' is not"),
        ({"quota_router": {"drain_aggressiveness": 0}}, "quota_router.drain_aggressiveness: expected a number > 0"),
        ({"quota_router": {"start_floor_pct": 120}}, "quota_router.start_floor_pct: expected 0-100"),
        (
            {"quota_router": {"floor_by_agent": {"codex": {"start_floor": 1}}}},
            "quota_router.floor_by_agent.codex: unknown keys ['start_floor']",
        ),
        (
            {"quota_router": {"floor_by_agent": {"codex": {"end_floor_pct": 101}}}},
            "quota_router.floor_by_agent.codex.end_floor_pct: expected 0-100",
        ),
        (
            {"quota_router": {"expected_resets": {"codex": {"cadence_seconds": 604800}}}},
            "quota_router.expected_resets.codex.cadence_anchor: required with cadence_seconds",
        ),
        (
            {"quota_router": {"expected_resets": {"codex": {"timestamps": ["2030-01-01T00:20:00"]}}}},
            "quota_router.expected_resets.codex.timestamps[0]: expected an instant with a zone",
        ),
        (
            {"quota_router": {"expected_resets": {"codex": {"timestamps": ["soon"]}}}},
            "quota_router.expected_resets.codex.timestamps[0]: 'soon' is not an ISO 8601 instant",
        ),
        ({"quota_router": {"min_quota_pct": 120}}, "quota_router.min_quota_pct: expected 0-100"),
        ({"quota_router": {"probe_max_retries": 1.5}}, "quota_router.probe_max_retries: expected an integer"),
        ({"quota_router": {"cache_ttl": 60}}, "quota_router: unknown keys ['cache_ttl']"),
    ],
)
def test_startup_validation_rejects_with_the_seed_messages(data, message) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_classes(data)
    assert str(caught.value).startswith(message), str(caught.value)


@pytest.mark.parametrize(
    "members, warned",
    [
        ([sub()], True),
        ([sub(instance_id="acct-a"), sub(instance_id="acct-b")], True),
        ([sub(), sub(billing="PayPerApi", model="m")], False),
        ([sub(billing="PayPerApi")], False),
    ],
)
def test_classes_without_pay_per_api_fallback_warn(members, warned) -> None:
    classes, warnings = parse_classes(one_class(*members))
    expected = ["AgentClass 'sonnet' has no PayPerApi fallback — items may wait indefinitely"] if warned else []
    assert (list(classes), warnings) == (["sonnet"], expected)


def test_a_modifier_that_matches_no_member_warns() -> None:
    data = {
        **one_class(sub(billing="PayPerApi")),
        "modifiers": [{"route_key": "openai", "start": "22:00", "end": "06:00", "delta": -1}],
    }
    assert parse_classes(data)[1] == ["modifier 'openai' 22:00-06:00 matches no member"]


RUNTIME_MEMBERS = TierClass(
    "sonnet",
    (
        Member(agent="anthropic", billing=PAY_PER_API, quality_score=100, order=0),
        Member(agent="claude", billing=SUBSCRIPTION, quality_score=120, order=1, runtimes=frozenset({"claude-code"})),
    ),
)


@pytest.mark.parametrize(
    "runtime, eligible, rejected",
    [
        ("harness", ["anthropic"], {"claude": "does not serve runtime harness"}),
        ("claude-code", ["claude", "anthropic"], {}),
        ("opencode", ["anthropic"], {"claude": "does not serve runtime opencode"}),
    ],
)
def test_a_task_is_routed_only_to_members_serving_its_runtime(runtime, eligible, rejected) -> None:
    ranked, lost = rank(RUNTIME_MEMBERS.members, [], [], NOON, runtime)
    assert keys(ranked) == eligible
    assert {m.route_key: reason for m, reason in lost} == rejected


def test_no_member_serving_the_runtime_names_it() -> None:
    only_claude = TierClass("sonnet", RUNTIME_MEMBERS.members[1:])
    selection = select(only_claude, [], [], {}, {}, {}, QuotaPolicy(), NOON, runtime="opencode")
    assert selection.outcome == "no_eligible"
    assert selection.message.endswith("and serves runtime opencode")
