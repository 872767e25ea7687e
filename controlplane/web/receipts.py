"""A Decision Receipt as the console shows it: the routing decision's steps in the order the router takes
them (escalation, rules, classifier, floor, opus gate, tier, member, agent), then the member candidates.
The receipt's data is what `controlplane.dispatch.router` wrote; a key it lacks shows as not recorded."""

from __future__ import annotations

import dataclasses
from typing import Any

CANDIDATE_COLUMNS = ("route_key", "model", "billing", "base", "effective", "verdict")


@dataclasses.dataclass(frozen=True)
class Step:
    """One row: the step of the decision, what it decided, and why."""

    name: str
    result: str
    detail: str = ""


def steps(data: dict[str, Any]) -> list[Step]:
    """The decision's steps, from a receipt's data."""
    rule = str(data.get("rule", ""))
    out = []
    if data.get("escalation"):
        out.append(Step("Escalation", str(data["escalation"]), "a retry or an escalation sets the tier"))
    rule_detail = (
        "no rule applied: the classifier decides" if rule == "default" else f"tier {data.get('base_tier', '')}"
    )
    out.append(Step("Rules", rule or "not recorded", "set by the escalation" if rule == "escalation" else rule_detail))
    out.append(_classifier(data.get("classifier"), rule))
    floor = str(data.get("floor") or "")
    why_floor = "billing or non-trivial authorization runs at sonnet or above" if floor else ""
    out.append(Step("Floor", floor or "none", why_floor))
    if data.get("opus_disabled"):
        out.append(Step("Opus gate", f"runs on {data.get('model_tier', '')}", "allow_opus is off"))
    out.append(Step("Tier", str(data.get("tier", "")), f"from {data.get('base_tier', '')}"))
    outcome = str(data.get("outcome", ""))
    out.append(Step("Member", str(data.get("member", "")) or "none", outcome))
    out.append(Step("Agent", str(data.get("agent", "")) or "not assigned yet"))
    for conflict in data.get("conflicts") or []:
        shared = ", ".join([*conflict.get("files", []), *conflict.get("resources", [])])
        out.append(Step("Conflict", " and ".join(conflict.get("tasks", [])), f"both touch {shared}"))
    return out


def _classifier(answer: Any, rule: str) -> Step:
    if not isinstance(answer, dict):
        why = "a retry: the classifier answers first attempts only" if rule == "default" else "a rule decided"
        return Step("Classifier", "not asked", why)
    tier = answer.get("tier") or "abstained"
    confidence = answer.get("confidence")
    shown = f"confidence {confidence:.2f}" if isinstance(confidence, (int, float)) else ""
    return Step("Classifier", str(tier), ", ".join(x for x in (shown, str(answer.get("reason", ""))) if x))


def candidates(data: dict[str, Any]) -> list[list[str]]:
    """The member candidates, one row each in CANDIDATE_COLUMNS order, the chosen one and why each lost."""
    rows = data.get("members") or []
    return [[str(row.get(c, "")) for c in CANDIDATE_COLUMNS] for row in rows if isinstance(row, dict)]
