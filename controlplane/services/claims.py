"""Advisory Claims (DESIGN.md "Claims (seed 000)"): leases of runs on the resources their Tasks touch,
and the conflicts between Tasks of one Change.

A claim never blocks: when another run holds a live claim on an overlapping resource, the newcomer
still gets its claim and the control plane records `claim.contended`, which conflict detection reads.
A lease lasts 120 s and is renewed at half-life; an expired lease is free. Each resource has a
generation that grows with every acquisition after expiry or release, so a holder that lost its
lease is refused when it tries to renew (fencing). Every run end releases the run's claims.

`lease_expired`, `needs_renewal`, `normalise`, `overlaps` and `find_conflicts` are pure. The rest
take a Session and work inside the caller's one transaction (`Store.transaction`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from controlplane.domain import run_states
from controlplane.domain.claims import (
    LEASE,
    ClaimState,
    Contention,
    find_conflicts,
    lease_expired,
    needs_renewal,
    normalise_all,
    overlaps,
)
from controlplane.domain.resources import normalise
from controlplane.store.changes import latest_changesets, tasks_of
from controlplane.store.engine import aware
from controlplane.store.events import add_event, new_id, run_event
from controlplane.store.models import Change, Claim, Conflict, Event, Run, utcnow
from drover.errors import FailedPrecondition, NotFound

LOCK_KEY = 0x44524F5645520001
"""PostgreSQL advisory lock that serialises acquisitions and renewals (SQLite's BEGIN IMMEDIATE does)."""


# --- store -----------------------------------------------------------------------------------------


def _state(c: Claim, contended_with: tuple[str, ...] = ()) -> ClaimState:
    acquired, expires = aware(c.acquired_at), aware(c.expires_at)
    assert acquired is not None and expires is not None
    return ClaimState(
        c.resource, c.run_id, c.holder, c.generation, acquired, expires, aware(c.released_at), contended_with
    )


def _lock(s: Session) -> None:
    if s.get_bind().dialect.name == "postgresql":
        s.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": LOCK_KEY})


def _generation(s: Session, resource: str) -> int:
    return s.scalar(select(func.max(Claim.generation)).where(Claim.resource == resource)) or 0


def acquire(
    s: Session, run_id: str, resources: Iterable[str], now: dt.datetime, lease: dt.timedelta = LEASE
) -> list[ClaimState]:
    """Claim each resource for the run. Never blocks: an overlapping live claim of another run is
    recorded as `claim.contended` and both hold. An expired claim is freed and the resource's
    generation grows. A resource the run already holds has its lease renewed."""
    run = s.get(Run, run_id)
    if run is None:
        raise NotFound(f"no run {run_id!r}", field="run_id")
    if run.state in run_states.TERMINAL:
        raise FailedPrecondition(f"run {run_id} is {run.state}", field="run_id")
    wanted = normalise_all(resources)
    _lock(s)
    held = list(s.scalars(select(Claim).where(Claim.released_at.is_(None)).order_by(Claim.acquired_at, Claim.id)))
    states: list[ClaimState] = []
    for resource in wanted:
        mine = next((c for c in held if c.run_id == run.id and c.resource == resource and c.released_at is None), None)
        if mine is not None:  # not taken over since (a takeover frees it), so still the run's
            mine.renewed_at, mine.expires_at = now, now + lease
            states.append(_state(mine))
            continue
        states.append(_take(s, run, resource, held, now, lease))
    if wanted:
        claimed = [{"resource": c.resource, "generation": c.generation} for c in states]
        run_event(s, "claim.acquired", run, claims=claimed)
    return states


def _take(s: Session, run: Run, resource: str, held: list[Claim], now: dt.datetime, lease: dt.timedelta) -> ClaimState:
    """A new claim of the run on `resource`: expired overlapping claims are freed, live ones contended."""
    live = []
    for c in held:
        if c.run_id == run.id or c.released_at is not None or not overlaps(c.resource, resource):
            continue
        expires = aware(c.expires_at)
        assert expires is not None
        if not lease_expired(expires, now):
            live.append(c)
            continue
        c.released_at = now
        add_event(
            s,
            "claim.expired",
            change_id=c.change_id,
            task_id=c.task_id,
            run_id=c.run_id,
            agent=c.holder,
            resource=c.resource,
            generation=c.generation,
            taken_by=run.id,
        )
    current = _generation(s, resource)
    shared = any(c.resource == resource for c in live)  # co-holders of one lease share its generation
    claim = Claim(
        id=new_id("clm"),
        resource=resource,
        run_id=run.id,
        change_id=run.change_id,
        task_id=run.task_id,
        holder=run.agent,
        generation=current if shared else current + 1,
        acquired_at=now,
        renewed_at=now,
        expires_at=now + lease,
    )
    s.add(claim)
    s.flush()
    for c in live:
        run_event(
            s,
            "claim.contended",
            run,
            resource=resource,
            held_resource=c.resource,
            holder_run=c.run_id,
            holder_agent=c.holder,
            holder_task=c.task_id,
            holder_change=c.change_id,
            contender_run=run.id,
            contender_agent=run.agent,
        )
    return _state(claim, tuple(dict.fromkeys(c.run_id for c in live)))


def renew(s: Session, run_id: str, generations: Mapping[str, int], now: dt.datetime) -> dict[str, bool]:
    """Extend the run's claims, each by its own lease length. A claim released, or taken over after it
    expired (the resource's generation is past the one the holder carries), is refused: False, and
    `claim.fenced`. Answers by the resource names as given."""
    run = s.get(Run, run_id)
    if run is None:
        raise NotFound(f"no run {run_id!r}", field="run_id")
    _lock(s)
    answers: dict[str, bool] = {}
    for given, generation in generations.items():
        resource = normalise(given)
        claim = s.scalar(
            select(Claim)
            .where(Claim.run_id == run_id, Claim.resource == resource, Claim.generation == generation)
            .order_by(Claim.acquired_at.desc(), Claim.id.desc())
            .limit(1)
        )
        current = _generation(s, resource)
        if claim is None or claim.released_at is not None or current > generation:
            if claim is not None and claim.released_at is None:
                claim.released_at = now
            add_event(
                s,
                "claim.fenced",
                change_id=run.change_id,
                task_id=run.task_id,
                run_id=run.id,
                agent=run.agent,
                resource=resource,
                generation=generation,
                current_generation=current,
            )
            answers[given] = False
            continue
        renewed, expires = aware(claim.renewed_at), aware(claim.expires_at)
        assert renewed is not None and expires is not None
        claim.renewed_at, claim.expires_at = now, now + (expires - renewed)
        answers[given] = True
    return answers


def _live(s: Session, run_id: str, now: dt.datetime) -> tuple[list[Claim], dict[str, int]]:
    """The run's live claims, and the generations of those that reached half-life, by resource."""
    live = list(s.scalars(select(Claim).where(Claim.run_id == run_id, Claim.released_at.is_(None))))
    due = {}
    for c in live:
        renewed, expires = aware(c.renewed_at), aware(c.expires_at)
        assert renewed is not None and expires is not None
        if needs_renewal(renewed, expires, now):
            due[c.resource] = c.generation
    return live, due


def renew_due(s: Session, run_id: str, now: dt.datetime) -> dict[str, bool]:
    """Renew the run's claims that reached half-life (the liveness check)."""
    _, due = _live(s, run_id, now)
    return renew(s, run_id, due, now) if due else {}


def renew_due_until(s: Session, run_id: str, now: dt.datetime) -> dt.datetime:
    """Renew the run's claims that reached half-life (each model call, see `Renewals`); answers when
    one is next due: the earliest half-life of its live claims, at most half a lease from now (a
    claim taken after now is due no sooner than that)."""
    live, due = _live(s, run_id, now)
    if due:
        renew(s, run_id, due, now)  # the claims in `live` are these rows: renewed or released in place
    at = now + LEASE / 2
    for c in live:
        renewed, expires = aware(c.renewed_at), aware(c.expires_at)
        if c.released_at is None and renewed is not None and expires is not None:
            at = min(at, renewed + (expires - renewed) / 2)
    return at


class Renewals:
    """When each run's claims are next due, as this process last renewed them: a model call renews
    its run's claims (a query) only from then on, not on every call. A renewal elsewhere (the liveness
    check, another replica) only makes them due later, and a claim taken later is due at least half a
    lease after, so none is missed. Entries past due are dropped every half lease (ended runs)."""

    def __init__(self) -> None:
        self._next: dict[str, dt.datetime] = {}
        self._pruned: dt.datetime | None = None

    def due(self, run_id: str, now: dt.datetime) -> bool:
        at = self._next.get(run_id)
        return at is None or now >= at

    def renewed(self, run_id: str, next_due: dt.datetime, now: dt.datetime) -> None:
        """Record, once the renewal's transaction committed, when the run's claims are next due."""
        if self._pruned is None or now >= self._pruned + LEASE / 2:
            self._next = {r: at for r, at in self._next.items() if at > now}
            self._pruned = now
        self._next[run_id] = next_due


def release(s: Session, run_id: str, now: dt.datetime) -> list[str]:
    """Release every claim of the run (every run end does); answers the resources released."""
    claims = list(
        s.scalars(select(Claim).where(Claim.run_id == run_id, Claim.released_at.is_(None)).order_by(Claim.resource))
    )
    for c in claims:
        c.released_at = now
    if claims:
        first = claims[0]
        add_event(
            s,
            "claim.released",
            change_id=first.change_id,
            task_id=first.task_id,
            run_id=run_id,
            agent=first.holder,
            resources=[c.resource for c in claims],
        )
    return [c.resource for c in claims]


def list_claims(
    s: Session, include_released: bool = False, *, run_id: str = "", change_id: str = ""
) -> list[ClaimState]:
    """Claims by resource, then age: the live ones, or every one ever taken."""
    query = select(Claim).order_by(Claim.resource, Claim.acquired_at, Claim.id)
    if not include_released:
        query = query.where(Claim.released_at.is_(None))
    if run_id:
        query = query.where(Claim.run_id == run_id)
    if change_id:
        query = query.where(Claim.change_id == change_id)
    return [_state(c) for c in s.scalars(query)]


def contended_runs(s: Session, change_id: str) -> list[Contention]:
    """The contentions recorded on the Change's runs, oldest first."""
    out = []
    for e in s.scalars(
        select(Event).where(Event.kind == "claim.contended", Event.change_id == change_id).order_by(Event.id)
    ):
        d = e.data
        out.append(
            Contention(
                d["resource"],
                d["held_resource"],
                d["holder_run"],
                d["holder_task"],
                d["holder_change"],
                d["contender_run"],
                e.task_id,
            )
        )
    return out


def detect_conflicts(s: Session, change_id: str) -> list[Conflict]:
    """Record a Conflict for each pair of the Change's Tasks whose newest ChangeSets touch the same
    files or whose runs contended for a resource (`change.conflict`). Idempotent: a pair is recorded
    once, and grows (with a new event) only when it gains files or resources. Answers all of them."""
    change = s.get(Change, change_id, with_for_update=True)  # one detector at a time per Change
    if change is None:
        raise NotFound(f"no change {change_id!r}", field="change_id")
    tasks = tasks_of(s, change_id)
    by_key = {t.key: t.id for t in tasks}
    deps = {t.id: [by_key[k] for k in t.depends_on if k in by_key] for t in tasks}
    keys = {t.id: t.key for t in tasks}
    latest = latest_changesets(s, [t.id for t in tasks])
    contended = [
        (c.holder_task, c.contender_task, resource)
        for c in contended_runs(s, change_id)
        if c.holder_change == change_id
        for resource in (c.resource, c.held_resource)
    ]
    found = find_conflicts([t.id for t in tasks], deps, {task: cs.own_files for task, cs in latest.items()}, contended)
    existing = {(c.task_a, c.task_b): c for c in s.scalars(select(Conflict).where(Conflict.change_id == change_id))}
    for (a, b), (files, resources) in found.items():
        row = existing.get((a, b))
        if row is None:
            row = existing[(a, b)] = Conflict(
                id=new_id("cfl"),
                change_id=change_id,
                task_a=a,
                task_b=b,
                files=files,
                resources=resources,
                created_at=utcnow(),
            )
            s.add(row)
        elif set(files) <= set(row.files) and set(resources) <= set(row.resources):
            continue
        else:
            row.files, row.resources = sorted({*row.files, *files}), sorted({*row.resources, *resources})
        add_event(
            s,
            "change.conflict",
            change_id=change_id,
            conflict_id=row.id,
            task_a=a,
            task_b=b,
            key_a=keys[a],
            key_b=keys[b],
            files=list(row.files),
            resources=list(row.resources),
        )
    s.flush()
    rank = {t.id: n for n, t in enumerate(tasks)}
    return sorted(existing.values(), key=lambda c: (rank.get(c.task_a, -1), rank.get(c.task_b, -1)))
