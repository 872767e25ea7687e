"""agentd's Prometheus metrics (`metrics_listen = "HOST:PORT"`, `--metrics-listen`; path /metrics), read
from the daemon's state at each scrape. Labels are bounded: no run ids."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.registry import Collector

from agentd.daemon.outbox import Outbox


@dataclasses.dataclass
class SetupTally:
    """Runs with setup commands since agentd started, from their exit records: how many started from a
    prepared workspace (hits), how many ran setup (misses), and the seconds spent either way."""

    hits: int = 0
    misses: int = 0
    seconds: float = 0.0

    def count(self, result: Mapping[str, Any]) -> None:
        if result.get("setup_cached"):
            self.hits += 1
        elif float(result.get("setup_seconds") or 0) > 0:
            self.misses += 1
        else:
            return  # no setup: neither
        self.seconds += float(result.get("setup_seconds") or 0)


class Daemon(Protocol):
    """What the collector reads of agentd."""

    draining: bool

    def setups(self) -> SetupTally: ...

    def busy_runs(self) -> int: ...

    def capacity(self) -> int: ...

    def is_connected(self) -> bool: ...


def outbox_figures(outbox: Outbox) -> tuple[int, int, int]:
    """Runs with undelivered messages, messages not yet acknowledged, and the outbox files' bytes."""
    unacked = [box.last_seq - box.acked for box in outbox.runs.values()]
    return sum(1 for n in unacked if n > 0), sum(max(0, n) for n in unacked), sum(b.size for b in outbox.runs.values())


class AgentCollector(Collector):
    def __init__(self, daemon: Daemon, outbox: Outbox) -> None:
        self.daemon, self.outbox = daemon, outbox

    def collect(self) -> Iterator[Metric]:
        def gauge(name: str, text: str, value: float) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, text, value=value)

        up = self.daemon.is_connected()
        yield gauge("drover_agent_connected", "1 while the stream to the control plane is up.", up)
        yield gauge("drover_agent_draining", "1 when told to take no new runs.", self.daemon.draining)
        yield gauge("drover_agent_capacity_slots", "Concurrent runs this agent takes.", self.daemon.capacity())
        yield gauge("drover_agent_busy_slots", "Runs live on this agent.", self.daemon.busy_runs())
        runs, messages, size = outbox_figures(self.outbox)
        yield gauge("drover_agent_outbox_runs", "Runs with messages the control plane has not acknowledged.", runs)
        yield gauge("drover_agent_outbox_unacked_messages", "Messages sent or queued, not yet acknowledged.", messages)
        yield gauge("drover_agent_outbox_bytes", "Bytes of the runs' outbox files in the spool.", size)
        setups = self.daemon.setups()
        for outcome, runs in (("hits", setups.hits), ("misses", setups.misses)):
            text = f"Runs with setup whose workspace {'came prepared' if outcome == 'hits' else 'ran setup'}."
            yield CounterMetricFamily(f"drover_agent_prepared_workspace_{outcome}", text, value=runs)
        yield SummaryMetricFamily(
            "drover_agent_setup_seconds",
            "Time runs spent on setup, or on starting from a prepared workspace.",
            count_value=setups.hits + setups.misses,
            sum_value=setups.seconds,
        )


def serve_metrics(listen: str, daemon: Daemon, outbox: Outbox) -> int:
    """Serve /metrics on `listen` (host:port; port 0 picks one); the port it got."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(AgentCollector(daemon, outbox))
    host, _, port = listen.rpartition(":")
    server, _ = start_http_server(int(port), addr=host.strip("[]") or "127.0.0.1", registry=registry)
    return int(server.server_port)
