"""The fleet's state as Prometheus gauges, read from the database at each scrape (read-only, never
waiting for a writer), and the HTTP endpoint that serves them with the counters of
`controlplane.metrics`."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterator

from prometheus_client import start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from controlplane import metrics
from controlplane.store import escrow
from controlplane.store.engine import Store
from controlplane.store.models import Agent, Change, Claim, Meter, Project, Run

FLEET_METERS = ("provider_month", "agent_calls_day", "classifier_calls_day", "memory_queries_day")
"""Meters shared by the fleet (one per period); Change, project and user meters would be unbounded labels."""


@dataclasses.dataclass(frozen=True)
class FleetState:
    runs: dict[str, int]
    queued_by_pool: dict[str, int]
    agents: list[tuple[bool, bool, int]]  # connected, draining, capacity
    busy: int
    claims_held: int
    meters: dict[tuple[str, str], tuple[int, int, int]]  # (kind, unit) -> used, reserved, limit


def read_state(s: Session, now: dt.datetime) -> FleetState:
    runs = dict(
        s.execute(
            select(Run.state, func.count()).where(Run.state.in_(("queued", "starting", "running"))).group_by(Run.state)
        )
        .tuples()
        .all()
    )
    queued = dict(
        s.execute(
            select(Project.pool, func.count())
            .select_from(Run)
            .join(Change, Change.id == Run.change_id)
            .join(Project, Project.name == Change.project)
            .where(Run.state == "queued")
            .group_by(Project.pool)
        )
        .tuples()
        .all()
    )
    agents = [(a.connected, a.draining, a.capacity) for a in s.scalars(select(Agent))]
    held = s.scalar(select(func.count()).select_from(Claim).where(Claim.released_at.is_(None))) or 0
    periods = (now.strftime("%Y-%m"), now.strftime("%Y-%m-%d"))
    meters: dict[tuple[str, str], tuple[int, int, int]] = {}
    rows = list(s.scalars(select(Meter).where(Meter.kind.in_(FLEET_METERS), Meter.period.in_(periods))))
    slices = escrow.adjustments(s, [m.key for m in rows])
    for m in rows:
        used, reserved, limit = meters.get((m.kind, m.unit), (0, 0, 0))
        extra_used, extra_reserved = slices.get(m.key, (0, 0))
        meters[(m.kind, m.unit)] = (
            used + m.used + extra_used,
            reserved + m.reserved + extra_reserved,
            limit + m.limit_amount,
        )
    return FleetState(runs, queued, agents, runs.get("starting", 0) + runs.get("running", 0), held, meters)


class FleetCollector(Collector):
    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterator[GaugeMetricFamily]:
        state = self.store.read_now(read_state, dt.datetime.now(dt.UTC))
        runs = GaugeMetricFamily("drover_runs", "Runs not yet ended, by state.", labels=["state"])
        for name in ("queued", "starting", "running"):
            runs.add_metric([name], state.runs.get(name, 0))
        yield runs
        queue = GaugeMetricFamily("drover_queue_depth", 'Queued runs by pool ("": the default pool).', labels=["pool"])
        for pool, n in sorted(state.queued_by_pool.items()):
            queue.add_metric([pool or ""], n)
        yield queue
        connected = [a for a in state.agents if a[0]]
        yield GaugeMetricFamily("drover_agents_connected", "Agents connected now.", value=len(connected))
        yield GaugeMetricFamily(
            "drover_agents_draining", "Connected agents told to take no new runs.", value=sum(a[1] for a in connected)
        )
        # drover_fleet_*, not drover_agent_*: agentd exports drover_agent_capacity_slots for itself, and a
        # sum() over both would count every slot twice.
        capacity = sum(a[2] for a in connected)
        yield GaugeMetricFamily("drover_fleet_capacity_slots", "Run slots of connected agents.", value=capacity)
        free = sum(a[2] for a in connected if not a[1]) - state.busy
        yield GaugeMetricFamily(
            "drover_fleet_free_slots", "Run slots of connected, undrained agents not running a run.", value=max(0, free)
        )
        yield GaugeMetricFamily("drover_claims_held", "Advisory claims held now.", value=state.claims_held)
        yield from meter_families(state.meters)


METER_UNITS = {"usd": 1e6, "calls": 1}
"""A meter's unit (the metric name's suffix) and what its stored integers are divided by: usd meters
count micro-dollars and are exported in dollars (Prometheus base units), calls meters count calls."""


def meter_families(meters: dict[tuple[str, str], tuple[int, int, int]]) -> Iterator[GaugeMetricFamily]:
    """drover_meter_{used,reserved,limit}_{usd,calls}, labelled by meter kind: the unit is in the name, so
    no query adds dollars to calls."""
    for name, index, text in (
        ("used", 0, "settled"),
        ("reserved", 1, "admitted, not yet settled"),
        ("limit", 2, "0: none"),
    ):
        for unit, scale in METER_UNITS.items():
            family = GaugeMetricFamily(
                f"drover_meter_{name}_{unit}",
                f"Fleet meters of the current period counted in {unit}, {text}.",
                labels=["kind"],
            )
            for (kind, meter_unit), values in sorted(meters.items()):
                if meter_unit == unit:
                    family.add_metric([kind], values[index] / scale)
            yield family


def serve_metrics(listen: str, store: Store) -> int:
    """Serve /metrics on `listen` (host:port; port 0 picks one); the port it got."""
    host, _, port = listen.rpartition(":")
    metrics.REGISTRY.register(FleetCollector(store))
    server, _ = start_http_server(int(port), addr=host.strip("[]") or "127.0.0.1", registry=metrics.REGISTRY)
    return int(server.server_port)
