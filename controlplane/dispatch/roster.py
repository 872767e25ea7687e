"""The roster: this replica's connected agents as their hellos were recorded, kept in memory so a
dispatch pass reads only what changes between passes (the runs each agent holds), not every agent's
hello row again. The database stays the truth: the roster is rebuilt from it at start, and each
correction comes from a committed row (an agent's hello recorded, its drain) or its stream's end."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.domain.scheduling import AgentHello
from controlplane.store.models import Agent


class Roster:
    """The recorded hellos of the agents whose streams this replica holds, by name."""

    def __init__(self) -> None:
        self._hellos: dict[str, AgentHello] = {}

    def rebuild(self, hellos: Iterable[AgentHello]) -> None:
        """Start over from the database's rows (`read_hellos`)."""
        self._hellos = {hello.name: hello for hello in hellos}

    def connected(self, hello: AgentHello) -> None:
        """The agent's hello, once recorded: it replaces what an earlier connection said."""
        self._hellos[hello.name] = hello

    def disconnected(self, name: str) -> None:
        self._hellos.pop(name, None)

    def draining(self, name: str, draining: bool) -> None:
        """A drain (or undrain) recorded while the agent is connected here."""
        hello = self._hellos.get(name)
        if hello is not None:
            self._hellos[name] = dataclasses.replace(hello, draining=draining)

    def of(self, names: Iterable[str]) -> list[AgentHello]:
        """The recorded hellos of these agents, by name; one whose hello is not recorded yet is left out."""
        return sorted((h for name in set(names) if (h := self._hellos.get(name)) is not None), key=lambda h: h.name)


def read_hellos(s: Session, names: Iterable[str]) -> list[AgentHello]:
    """The agents among `names` as the database records their hellos, by name (one query)."""
    rows = s.execute(
        select(Agent.name, Agent.labels, Agent.capacity, Agent.drivers, Agent.draining, Agent.pool)
        .where(Agent.name.in_(sorted(set(names))))
        .order_by(Agent.name)
    ).all()
    return [
        AgentHello(name, labels or {}, capacity, frozenset(drivers or ()), draining, pool or "")
        for name, labels, capacity, drivers, draining, pool in rows
    ]
