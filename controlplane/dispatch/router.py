"""Routes queued harness runs before dispatch: the tier (rules, then the classifier, floors, opus
gating), then the member (seed 004), and writes the Decision Receipt with a model.route.decided
event. Probes and the classifier's model call happen here, outside any transaction."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import pathlib
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from controlplane import metrics
from controlplane.config import HarnessConfig
from controlplane.context.recall import Recall
from controlplane.dispatch import classifier, packet_pipeline
from controlplane.dispatch.quota import ObservedFailures, QuotaProbe
from controlplane.domain import graph, members, pricing, run_states, tiers
from controlplane.domain.error_ids import error_id
from controlplane.services import run_lifecycle
from controlplane.services.credentials import CredentialLocked, Sealer
from controlplane.services.notify import Notifier
from controlplane.store import events, meters
from controlplane.store.engine import Store
from controlplane.store.models import Conflict, DecisionReceipt, Run, Task, utcnow
from controlplane.store.objects import ObjectStore
from drover.core.model import AnthropicModel, ModelError
from drover.core.retry import RetryPolicy
from drover.core.usage import Usage
from drover.errors import DroverError

log = logging.getLogger("drover.router")
QUOTA_ERRORS = frozenset({"rate_limit_error", "RateLimited", "billing_error", "SpendLimited", "429"})
ROUTING_TRIES = 3
"""Routing passes a run may fail before it is failed alone (routing_failed)."""


def _reason(run_id: str, err: Exception) -> str:
    if isinstance(err, DroverError):
        return f"routing_failed: {err}"
    eid = error_id()
    log.error("routing run %s failed for good (error id %s)", run_id, eid, exc_info=err)
    return f"routing_failed: {type(err).__name__} (error id {eid} in the control plane's log)"


@dataclasses.dataclass(frozen=True)
class Pending:
    run_id: str
    traits: tiers.TaskTraits
    objective: str
    preset_tier: str  # set by an escalation or a retry: no rules, no classifier
    runtime: str = "harness"


def traits_of(task: Task, attempt: int) -> tiers.TaskTraits:
    spec = task.spec or {}
    flags = spec.get("flags", {})
    return tiers.TaskTraits(
        kind=task.kind,
        size=spec.get("size", ""),
        complexity=spec.get("complexity", ""),
        risk=spec.get("risk", ""),
        resources=tuple(spec.get("resources", ())),
        required_capabilities=tuple(spec.get("required_capabilities", ())),
        destructive_migration=bool(flags.get("destructive_migration")),
        billing=bool(flags.get("billing")),
        authorization=bool(flags.get("authorization")),
        # seed 000: a small, low-risk Task is trivial
        authorization_trivial=bool(flags.get("authorization_trivial"))
        or (spec.get("size") == "small" and spec.get("risk") == "low"),
        design_conflict=bool(flags.get("design_conflict")),
        attempt=attempt,
    )


def unrouted(s: Session) -> list[Pending]:
    """Queued harness runs without a member, or routed but without their Context Packet yet."""
    rows = s.execute(
        select(Run, Task)
        .join(Task, Task.id == Run.task_id)
        .where(
            Run.state == "queued",
            Run.driver.in_(graph.RUNTIMES),
            or_(Run.member == "", Run.context_hash == ""),
            or_(Run.not_before.is_(None), Run.not_before <= utcnow()),
        )
        .order_by(Run.created_at, Run.id)
        .limit(100)
    ).all()
    return [Pending(run.id, traits_of(task, run.attempt), task.objective, run.tier, run.driver) for run, task in rows]


def active_by_member(s: Session) -> dict[str, int]:
    return dict(
        s.execute(
            select(Run.member, func.count())
            .where(Run.state.in_(run_states.ACTIVE), Run.member != "")
            .group_by(Run.member)
        ).all()
    )


def reserve_classifier_call(s: Session, cap: int) -> bool:
    """The shared classifier meter: at most `cap` calls per UTC day."""
    spec = meters.daily_calls_meter(meters.CLASSIFIER_CALLS_DAY, utcnow(), cap)
    return meters.take_call(s, spec, events.new_id("cls"))


def record(
    s: Session,
    run_id: str,
    decision: tiers.TierDecision,
    selection: members.Selection,
    harness: HarnessConfig,
    delay: float,
) -> None:
    """One transaction: the receipt and the route, or the deferral, or the Task's failure."""
    run = s.get(Run, run_id)
    if run is None or run.state != "queued" or run.member:
        return
    receipt = s.get(DecisionReceipt, run_id)
    if receipt is None:
        receipt = DecisionReceipt(
            run_id=run.id, change_id=run.change_id, task_id=run.task_id, tier="", data={}, created_at=utcnow()
        )
        s.add(receipt)
    data = {**(receipt.data or {}), **_receipt(decision, selection)}
    ids = dict(change_id=run.change_id, task_id=run.task_id, run_id=run.id)
    chosen = next((c for c in selection.candidates if c["verdict"] == "chosen"), None)
    events.add_event(
        s,
        "quota_router.scored",
        **ids,
        tier=decision.model_tier,
        modifiers=chosen["modifiers"] if chosen else [],
        candidates=selection.candidates,
    )
    if selection.outcome == "wait":
        run.not_before = utcnow() + dt.timedelta(seconds=delay)
        receipt.data = data
        events.add_event(s, "quota_router.waiting", **ids, message=selection.message)
        events.add_event(s, "quota_router.deferred", **ids, seconds=delay)
        return
    if selection.outcome == "no_eligible":
        receipt.tier, receipt.data = decision.tier, data
        run_lifecycle.fail_unroutable(s, run, selection.message)
        return
    member = selection.chosen
    assert member is not None
    conflicts = _conflicts(s, run)
    if conflicts:
        data["conflicts"] = conflicts
    run.tier = decision.tier
    run.model = member.model or harness.tiers[decision.model_tier].model
    run.member = data["member"] = member.route_key
    receipt.tier, receipt.data = decision.tier, data
    events.add_event(
        s,
        "model.route.decided",
        **ids,
        tier=decision.tier,
        model=run.model,
        member=run.member,
        rule=decision.rule,
        floor=decision.floor or "",
        opus_disabled=decision.opus_disabled,
        escalation=data.get("escalation", ""),
    )


def _receipt(decision: tiers.TierDecision, selection: members.Selection) -> dict[str, Any]:
    """What a Decision Receipt says of the tier and the member (never any model reasoning)."""
    answer = decision.classifier
    return dict(
        tier=decision.tier,
        base_tier=decision.base_tier,
        rule=decision.rule,
        floor=decision.floor or "",
        opus_disabled=decision.opus_disabled,
        model_tier=decision.model_tier,
        classifier={"tier": answer.tier, "confidence": answer.confidence, "reason": answer.reason} if answer else None,
        members=selection.candidates,
        outcome=selection.outcome,
    )


def _conflicts(s: Session, run: Run) -> list[dict[str, Any]]:
    """The conflicts recorded for the run's Task: the next receipt of either Task shows them."""
    return [
        {"tasks": [c.task_a, c.task_b], "files": c.files, "resources": c.resources}
        for c in s.scalars(
            select(Conflict).where(
                Conflict.change_id == run.change_id, or_(Conflict.task_a == run.task_id, Conflict.task_b == run.task_id)
            )
        )
    ]


def _record_probes(s: Session, run_id: str, cls: members.TierClass, snapshots: dict[str, Any]) -> None:
    for m in cls.members:
        if m.billing == members.SUBSCRIPTION:
            events.add_event(
                s,
                "quota_router.probed",
                run_id=run_id,
                tier_class=cls.id,
                member=m.route_key,
                available_pct=snapshots[m.route_key].available_pct,
            )


def previous_member(s: Session, run_id: str) -> str:
    """The route key the Task's latest earlier run went to ("" on a first run): Sticky keeps a work item there."""
    run = s.get(Run, run_id)
    if run is None:
        return ""
    earlier = select(Run.member).where(Run.task_id == run.task_id, Run.id != run.id, Run.member != "")
    return s.scalars(earlier.order_by(Run.attempt.desc(), Run.created_at.desc()).limit(1)).first() or ""


def _routed(s: Session, run_id: str) -> bool:
    run = s.get(Run, run_id)
    return run is not None and bool(run.member)


class Router:
    def __init__(
        self,
        store: Store,
        harness: HarnessConfig,
        notifier: Notifier,
        objects: ObjectStore,
        mirrors: pathlib.Path,
        recall: Recall | None = None,
        sealer: Sealer | None = None,
    ) -> None:
        self.store, self.harness, self.notifier = store, harness, notifier
        self.sealer = sealer
        """Opens the projects' git credentials to fetch their canonical trees."""
        self.objects, self.mirrors = objects, mirrors
        self.recall = recall
        self.probe = QuotaProbe(policy=harness.quota)
        self.observed = ObservedFailures(dt.timedelta(minutes=harness.quota.observed_failure_retention_minutes))
        self.rr: dict[str, int] = {}
        self.failures: dict[str, int] = {}  # run id -> routing passes that failed in a row
        self.classifier = self._haiku(harness)

    async def compact(self, text: str) -> str:
        """A metered haiku call that compacts a failure log; "" when a meter refuses or the call fails."""
        h = self.harness
        model = self.classifier.model
        price = pricing.price_for(model, h.prices)
        estimate = pricing.worst_case_micros(packet_pipeline.packet.estimate_tokens(text), 1000, price)
        reservation = events.new_id("cmp")
        budgets = h.budgets

        def reserve(s: Session) -> bool:
            specs = meters.fleet_meters(
                utcnow(), meters.usd_micros(budgets.provider_month_usd), budgets.agent_calls_per_day
            )
            return meters.reserve_on_meters(s, reservation, specs, meters.amounts_for(specs, estimate)) is None

        if not await self.store.run(reserve):
            return ""
        cost = 0
        try:
            reply = await self.classifier.complete(
                system=[{"type": "text", "text": packet_pipeline.COMPACT_SYSTEM}],
                tools=[],
                max_tokens=1000,
                messages=[{"role": "user", "content": [{"type": "text", "text": text}]}],
            )
            u = reply.usage
            cost = pricing.cost_micros(
                Usage(u.input_tokens, u.output_tokens, u.cache_creation_input_tokens, u.cache_read_input_tokens),
                price,
            )
            return "".join(b.get("text", "") for b in reply.content if b.get("type") == "text")
        except ModelError as err:
            log.warning("compacting a failure log failed: %s", err)
            return ""
        finally:
            settled = pricing.settled_micros(cost, estimate)
            if settled.excess:
                log.warning("a compaction call reported %d micro-dollars above its reservation", settled.excess)

            def settle(s: Session) -> None:
                meters.settle_on_meters(s, reservation, meters.exact_for(settled.applied))
                if settled.excess:
                    metrics.on_over_reservation(s, "compact", settled.excess)

            await self.store.run(settle)

    def reconfigure(self, harness: HarnessConfig) -> None:
        self.harness = harness
        self.probe.policy = harness.quota
        self.observed.retention = dt.timedelta(minutes=harness.quota.observed_failure_retention_minutes)
        self.rr.clear()
        self.classifier = self._haiku(harness)

    @staticmethod
    def _haiku(harness: HarnessConfig) -> AnthropicModel:
        """The haiku model the control plane calls itself: the routing classifier and log compaction."""
        haiku = harness.tiers.get("haiku")
        return AnthropicModel(
            harness.base_url,
            harness.api_key,
            haiku.model if haiku else "",
            RetryPolicy(max_attempts=2, stall_timeout=30, attempt_ceiling=harness.attempt_ceiling_seconds),
            workspace_id=harness.workspace_id,
        )

    def observe(self, member: str, error: str) -> None:
        """agentd reported an attempt's error for a member: a 429 or quota error blocks an unknown probe."""
        if member and error in QUOTA_ERRORS:
            self.observed.record(member, utcnow())

    async def route_pending(self) -> int:
        pending = await self.store.read(unrouted)  # a read: never waits behind the writer
        for item in pending:
            try:
                await self.route(item)
                self.failures.pop(item.run_id, None)
            except Exception as err:
                # A passing fault (a probe, the object store) is tried again; a run that keeps failing is
                # failed alone, so it cannot hold a place among the runs routed first for ever.
                self.failures[item.run_id] = tries = self.failures.get(item.run_id, 0) + 1
                if tries < ROUTING_TRIES and not isinstance(err, CredentialLocked):  # a locked one stays locked
                    log.exception("routing run %s failed; retrying later", item.run_id)
                    continue
                self.failures.pop(item.run_id, None)
                reason = _reason(item.run_id, err)
                await self.store.run(
                    lambda s, run_id=item.run_id, reason=reason: run_lifecycle.fail_unrouted(s, run_id, reason)
                )
        if pending:
            self.notifier.notify()
        return len(pending)

    async def route(self, item: Pending) -> None:
        if not await self.store.run(_routed, item.run_id):  # else routed before its packet was compiled
            decision = await self._decide(item)
            cls, snapshots, selection = await self._select(item, decision)
            h = self.harness
            await self.store.run(record, item.run_id, decision, selection, h, h.quota.recheck_interval_seconds)
            await self.store.run(_record_probes, item.run_id, cls, snapshots)
            if selection.outcome != "chosen":
                return
        await packet_pipeline.prepare(
            self.store, self.objects, self.mirrors, item.run_id, self.recall, self.compact, self.sealer
        )

    async def _decide(self, item: Pending) -> tiers.TierDecision:
        """The tier: the escalation's, or the rules' (the classifier's when the rules leave it open)."""
        h = self.harness
        if item.preset_tier:
            return tiers.escalated(item.traits, item.preset_tier, h.allow_opus)
        answer = None
        if tiers.needs_classifier(item.traits):
            answer = await classifier.classify(
                self.classifier,
                item.traits,
                item.objective,
                lambda: self.store.run(reserve_classifier_call, h.budgets.classifier_calls_per_day),
            )
        return tiers.decide_tier(item.traits, answer, h.allow_opus)

    async def _select(
        self, item: Pending, decision: tiers.TierDecision
    ) -> tuple[members.TierClass, dict[str, members.QuotaSnapshot], members.Selection]:
        """The member of the tier's class (seed 004): capabilities, scores, quota."""
        h = self.harness
        cls = h.tier_class(decision.model_tier)
        snapshots = await self.probe.snapshots(cls.members)
        now = utcnow()
        window = dt.timedelta(minutes=h.quota.observed_failure_window_minutes)
        observed = {m.route_key: self.observed.recent(m.route_key, window, now) for m in cls.members}
        active = await self.store.run(active_by_member)
        sticky = await self.store.run(previous_member, item.run_id) if h.quota.intra_kind_policy == "Sticky" else ""
        selection = members.select(
            cls,
            item.traits.required_capabilities,
            h.modifiers,
            snapshots,
            observed,
            active,
            h.quota,
            now,
            sticky=sticky,
            rr_counters=self.rr,
            runtime=item.runtime,
        )
        return cls, snapshots, selection
