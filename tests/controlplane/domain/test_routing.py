"""Tier routing (seed 000, "Model routing"): the rules, the floor, the classifier path and opus gating, as tables."""

from __future__ import annotations

import dataclasses
import json

import pytest

from controlplane.domain.tiers import (
    CLASSIFIER_SYSTEM,
    ClassifierAnswer,
    RuleDecision,
    TaskTraits,
    TierDecision,
    apply_floor,
    classifier_messages,
    decide_tier,
    floor,
    needs_classifier,
    parse_classifier,
    route_by_rules,
)

T = TaskTraits
ANSWER = {tier: ClassifierAnswer(tier, 0.9, False, "answered") for tier in ("haiku", "sonnet", "opus")}
LOW = ClassifierAnswer.abstain("low_confidence", 0.3)
CAPPED = ClassifierAnswer.abstain("capped")


# --- the rules, in the seed's order ------------------------------------------------------------


@pytest.mark.parametrize(
    "traits, tier, rule",
    [
        # each rule on its own
        (T(kind="migrate", destructive_migration=True), "opus", "destructive_migration"),
        (T(kind="implement", design_conflict=True, resources=("api", "db")), "opus", "design_conflict"),
        (T(kind="summarize"), "haiku", "mechanical_kind"),
        (T(kind="classify"), "haiku", "mechanical_kind"),
        (T(kind="compact"), "haiku", "mechanical_kind"),
        (T(kind="transform"), "haiku", "mechanical_kind"),
        (T(kind="implement", size="small", risk="low"), "haiku", "small_low_risk_first_attempt"),
        (T(kind="implement", complexity="medium", risk="low"), "sonnet", "medium_complexity"),
        (T(kind="implement", complexity="medium", risk="medium"), "sonnet", "medium_complexity"),
        (T(kind="implement", complexity="medium"), "sonnet", "medium_complexity"),  # unknown risk
        (T(kind="plan", size="large"), "opus", "large_planning"),
        (T(kind="architecture", size="large"), "opus", "large_planning"),
        (T(kind="arbitration", size="large"), "opus", "large_planning"),
        (T(kind="implement", size="large"), "sonnet", "large_other"),
        (T(kind="implement"), "default", "default"),
        (T(), "default", "default"),
        # precedence: an earlier rule wins
        (T(kind="summarize", destructive_migration=True), "opus", "destructive_migration"),
        (T(kind="transform", design_conflict=True, resources=("a", "b")), "opus", "design_conflict"),
        (T(kind="compact", size="large", complexity="high", risk="high"), "haiku", "mechanical_kind"),
        (T(kind="implement", size="small", risk="low", complexity="medium"), "haiku", "small_low_risk_first_attempt"),
        (T(kind="plan", size="large", complexity="medium", risk="low"), "sonnet", "medium_complexity"),
        (T(kind="implement", size="large", destructive_migration=True), "opus", "destructive_migration"),
        # near misses fall through to the next rule
        (T(kind="implement", design_conflict=True, resources=("api",)), "default", "default"),
        (T(kind="implement", design_conflict=True, resources=("api", "api")), "default", "default"),
        (T(kind="summarize", design_conflict=True, resources=("api",)), "haiku", "mechanical_kind"),
        (T(kind="implement", design_conflict=False, resources=("api", "db")), "default", "default"),
        (T(kind="implement", size="small", risk="low", attempt=2), "default", "default"),
        (T(kind="implement", size="small", risk="medium"), "default", "default"),
        (T(kind="implement", size="small"), "default", "default"),  # unknown risk is not low
        (T(kind="implement", size="small", risk="low", attempt=2, complexity="medium"), "sonnet", "medium_complexity"),
        (T(kind="implement", complexity="medium", risk="high"), "default", "default"),
        (T(kind="plan", size="large", complexity="medium", risk="high"), "opus", "large_planning"),
        (T(kind="implement", size="large", complexity="medium", risk="high"), "sonnet", "large_other"),
        (T(kind="plan", size="medium"), "default", "default"),
        (T(kind="implement", complexity="high", risk="high"), "default", "default"),
    ],
)
def test_route_by_rules(traits: TaskTraits, tier: str, rule: str) -> None:
    assert route_by_rules(traits) == RuleDecision(tier, rule)


@pytest.mark.parametrize("bad", [dict(size="Small"), dict(risk="critical"), dict(complexity="x"), dict(attempt=0)])
def test_traits_refuse_unknown_values(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        TaskTraits(**bad)  # type: ignore[arg-type]


def test_traits_are_frozen_and_keep_tuples() -> None:
    t = TaskTraits(resources=["a", "b"], required_capabilities=["python"])  # type: ignore[arg-type]
    assert t.resources == ("a", "b") and t.required_capabilities == ("python",)
    hash(t)
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.kind = "plan"  # type: ignore[misc]


# --- the floor -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "traits, expected",
    [
        (T(), None),
        (T(billing=True), "sonnet"),
        (T(authorization=True), "sonnet"),
        (T(authorization=True, authorization_trivial=True), None),
        (T(authorization=True, authorization_trivial=True, billing=True), "sonnet"),
        (T(authorization_trivial=True), None),
    ],
)
def test_floor(traits: TaskTraits, expected: str | None) -> None:
    assert floor(traits) == expected


@pytest.mark.parametrize(
    "tier, lowest, expected",
    [
        ("haiku", None, "haiku"),
        ("sonnet", None, "sonnet"),
        ("opus", None, "opus"),
        ("haiku", "sonnet", "sonnet"),
        ("sonnet", "sonnet", "sonnet"),
        ("opus", "sonnet", "opus"),
        ("haiku", "opus", "opus"),
        ("sonnet", "haiku", "sonnet"),
    ],
)
def test_apply_floor_raises_and_never_lowers(tier: str, lowest: str | None, expected: str) -> None:
    assert apply_floor(tier, lowest) == expected


@pytest.mark.parametrize("tier, lowest", [("default", "sonnet"), ("default", None), ("haiku", "gpt")])
def test_apply_floor_needs_real_tiers(tier: str, lowest: str | None) -> None:
    with pytest.raises(ValueError):
        apply_floor(tier, lowest)


# --- decide_tier: rules, classifier, floor, opus gating ----------------------------------------


def decision(
    tier: str,
    base: str,
    rule: str,
    classifier: ClassifierAnswer | None = None,
    lowest: str | None = None,
    model_tier: str | None = None,
) -> TierDecision:
    return TierDecision(
        tier=tier,
        base_tier=base,
        rule=rule,
        classifier=classifier,
        floor=lowest,
        opus_disabled=model_tier is not None and model_tier != tier,
        model_tier=model_tier or tier,
    )


DEFAULT_TASK = T(kind="implement")


@pytest.mark.parametrize(
    "traits, classifier, allow_opus, expected",
    [
        # the rule path: the classifier is never consulted, even when offered
        (T(kind="summarize"), None, False, decision("haiku", "haiku", "mechanical_kind")),
        (T(kind="summarize"), ANSWER["opus"], True, decision("haiku", "haiku", "mechanical_kind")),
        (T(kind="implement", size="large"), ANSWER["haiku"], False, decision("sonnet", "sonnet", "large_other")),
        # floors on the rule path
        (
            T(kind="summarize", billing=True),
            None,
            False,
            decision("sonnet", "haiku", "mechanical_kind", lowest="sonnet"),
        ),
        (
            T(kind="implement", size="small", risk="low", authorization=True),
            None,
            False,
            decision("sonnet", "haiku", "small_low_risk_first_attempt", lowest="sonnet"),
        ),
        (
            T(kind="implement", size="small", risk="low", authorization=True, authorization_trivial=True),
            None,
            False,
            decision("haiku", "haiku", "small_low_risk_first_attempt"),
        ),
        (
            T(kind="plan", size="large", billing=True),
            None,
            True,
            decision("opus", "opus", "large_planning", lowest="sonnet"),
        ),
        # the classifier path: default on attempt 1
        (DEFAULT_TASK, ANSWER["haiku"], False, decision("haiku", "haiku", "default", ANSWER["haiku"])),
        (DEFAULT_TASK, ANSWER["sonnet"], False, decision("sonnet", "sonnet", "default", ANSWER["sonnet"])),
        (DEFAULT_TASK, ANSWER["opus"], True, decision("opus", "opus", "default", ANSWER["opus"])),
        (DEFAULT_TASK, LOW, False, decision("sonnet", "sonnet", "default", LOW)),
        (DEFAULT_TASK, CAPPED, False, decision("sonnet", "sonnet", "default", CAPPED)),
        (DEFAULT_TASK, None, False, decision("sonnet", "sonnet", "default")),
        # floors on the classifier path: its answer never goes below them
        (
            T(kind="implement", billing=True),
            ANSWER["haiku"],
            False,
            decision("sonnet", "haiku", "default", ANSWER["haiku"], lowest="sonnet"),
        ),
        (
            T(kind="implement", authorization=True),
            ANSWER["haiku"],
            False,
            decision("sonnet", "haiku", "default", ANSWER["haiku"], lowest="sonnet"),
        ),
        (
            T(kind="implement", authorization=True, authorization_trivial=True),
            ANSWER["haiku"],
            False,
            decision("haiku", "haiku", "default", ANSWER["haiku"]),
        ),
        (
            T(kind="implement", billing=True),
            ANSWER["opus"],
            True,
            decision("opus", "opus", "default", ANSWER["opus"], lowest="sonnet"),
        ),
        (T(kind="implement", billing=True), LOW, False, decision("sonnet", "sonnet", "default", LOW, lowest="sonnet")),
        # a retry that the rules leave at default runs on sonnet, and the classifier is not consulted
        (T(kind="implement", attempt=2), None, False, decision("sonnet", "sonnet", "default")),
        (T(kind="implement", attempt=2), ANSWER["haiku"], False, decision("sonnet", "sonnet", "default")),
        (
            T(kind="implement", size="small", risk="low", attempt=2),
            ANSWER["haiku"],
            False,
            decision("sonnet", "sonnet", "default"),
        ),
        (
            T(kind="implement", attempt=3, billing=True),
            None,
            False,
            decision("sonnet", "sonnet", "default", lowest="sonnet"),
        ),
        # opus gating, both ways, on both paths
        (T(destructive_migration=True), None, True, decision("opus", "opus", "destructive_migration")),
        (
            T(destructive_migration=True),
            None,
            False,
            decision("opus", "opus", "destructive_migration", model_tier="sonnet"),
        ),
        (
            T(kind="arbitration", size="large"),
            None,
            False,
            decision("opus", "opus", "large_planning", model_tier="sonnet"),
        ),
        (DEFAULT_TASK, ANSWER["opus"], False, decision("opus", "opus", "default", ANSWER["opus"], model_tier="sonnet")),
        (T(kind="implement", size="large"), None, False, decision("sonnet", "sonnet", "large_other")),
    ],
)
def test_decide_tier(
    traits: TaskTraits, classifier: ClassifierAnswer | None, allow_opus: bool, expected: TierDecision
) -> None:
    assert decide_tier(traits, classifier, allow_opus) == expected


def test_opus_disabled_is_recorded() -> None:
    off = decide_tier(T(destructive_migration=True), None, allow_opus=False)
    on = decide_tier(T(destructive_migration=True), None, allow_opus=True)
    assert (off.tier, off.model_tier, off.opus_disabled) == ("opus", "sonnet", True)
    assert (on.tier, on.model_tier, on.opus_disabled) == ("opus", "opus", False)


@pytest.mark.parametrize(
    "traits, expected",
    [
        (T(kind="implement"), True),
        (T(), True),
        (T(kind="implement", billing=True), True),  # the floor applies after the classifier
        (T(kind="implement", attempt=2), False),
        (T(kind="summarize"), False),
        (T(kind="implement", size="small", risk="low"), False),
        (T(kind="implement", size="small", risk="low", attempt=2), False),  # default, but a retry
        (T(kind="implement", size="large"), False),
        (T(destructive_migration=True), False),
    ],
)
def test_needs_classifier(traits: TaskTraits, expected: bool) -> None:
    assert needs_classifier(traits) is expected


# --- parsing the classifier's reply ----------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"tier": "haiku", "confidence": 0.9}', ANSWER["haiku"]),
        ('{"tier":"opus","confidence":1}', ClassifierAnswer("opus", 1.0, False, "answered")),
        ('{"tier": "sonnet", "confidence": 0.6}', ClassifierAnswer("sonnet", 0.6, False, "answered")),
        ('```json\n{"tier": "sonnet", "confidence": 0.9}\n```', ANSWER["sonnet"]),
        ('```\n{"tier": "opus", "confidence": 0.9}\n```', ANSWER["opus"]),
        ('Here is my answer:\n```json\n{"tier": "haiku", "confidence": 0.9}\n```\nThanks.', ANSWER["haiku"]),
        ('I would say {"tier": "opus", "confidence": 0.9} given the risk.', ANSWER["opus"]),
        ('Traits {not json}. Answer: {"tier": "haiku", "confidence": 0.9}', ANSWER["haiku"]),
        ('{"confidence": 0.9, "tier": "sonnet", "why": {"a": 1}}', ANSWER["sonnet"]),
        ('  {"tier": "haiku", "confidence": 0.9}\n', ANSWER["haiku"]),
        # abstentions
        ('{"tier": "opus", "confidence": 0.3}', ClassifierAnswer(None, 0.3, True, "low_confidence")),
        ('{"tier": "haiku", "confidence": 0.59}', ClassifierAnswer(None, 0.59, True, "low_confidence")),
        ('{"tier": "haiku", "confidence": 0}', ClassifierAnswer(None, 0.0, True, "low_confidence")),
        ('{"tier": "gpt-4", "confidence": 0.9}', ClassifierAnswer.abstain("unparseable")),
        ('{"tier": "default", "confidence": 0.9}', ClassifierAnswer.abstain("unparseable")),
        ('{"tier": "Haiku", "confidence": 0.9}', ClassifierAnswer.abstain("unparseable")),
        ('{"tier": "haiku"}', ClassifierAnswer.abstain("unparseable")),
        ('{"tier": "haiku", "confidence": "high"}', ClassifierAnswer.abstain("unparseable")),
        ('{"tier": "haiku", "confidence": true}', ClassifierAnswer.abstain("unparseable")),
        ('{"tier": "haiku", "confidence": 1.5}', ClassifierAnswer.abstain("unparseable")),
        ('{"tier": "haiku", "confidence": NaN}', ClassifierAnswer.abstain("unparseable")),
        ('["haiku", 0.9]', ClassifierAnswer.abstain("unparseable")),
        ("sonnet, I think", ClassifierAnswer.abstain("unparseable")),
        ('{"tier": "haiku", "confidence": 0.9', ClassifierAnswer.abstain("unparseable")),
        ("", ClassifierAnswer.abstain("unparseable")),
        ("\x00\xff garbage }{", ClassifierAnswer.abstain("unparseable")),
    ],
)
def test_parse_classifier(text: str, expected: ClassifierAnswer) -> None:
    assert parse_classifier(text) == expected


# --- the classifier prompt -------------------------------------------------------------------


def test_classifier_messages_carry_traits_and_objective() -> None:
    t = T(kind="implement", size="medium", resources=("api",), billing=True)
    [message] = classifier_messages(t, "Add a refund endpoint.")
    assert message["role"] == "user"
    traits = json.loads(message["content"].split("\n", 1)[1].split("\n\n", 1)[0])
    assert traits == dataclasses.asdict(t) | {"resources": ["api"], "required_capabilities": []}
    assert "<objective>\nAdd a refund endpoint.\n</objective>" in message["content"]
    assert classifier_messages(t, "Add a refund endpoint.") == [message]  # fixed: same input, same prompt
    assert '{"tier": "haiku|sonnet|opus", "confidence":' in CLASSIFIER_SYSTEM


def test_a_long_objective_is_cut() -> None:
    [message] = classifier_messages(T(), "x" * 10_000)
    assert "<objective>\n" + "x" * 4000 + "\n[objective cut]\n</objective>" in message["content"]
