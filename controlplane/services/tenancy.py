"""Who sees what. A user token carries the projects it may use (none: all); what lies outside them does
not exist for its holder: NOT_FOUND with the very message of something that was never there, so a
caller learns nothing of other projects. An agent belongs to the projects its pool serves: a caller sees
the agents of the pools of its projects, whatever it does to them (list, drain, undrain), its admin role
included. Cancelling or re-budgeting another user's Change needs the role run.manage."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, literal, or_, select
from sqlalchemy.orm import Session

from controlplane.store.models import Agent, Change, ChangeSet, Meter, Project, Run
from drover.errors import NotFound, PermissionDenied

Scope = frozenset[str] | None
"""The projects a caller may see; None: every project."""


def visible_change(s: Session, change_id: str, scope: Scope, *, lock: bool = False) -> Change:
    row = s.get(Change, change_id, with_for_update=lock) if change_id else None
    if row is None or (scope is not None and row.project not in scope):
        raise NotFound(f"no change {change_id!r}", field="change_id")
    return row


def _in_scope(s: Session, change_id: str, scope: Scope) -> bool:
    if scope is None:
        return True
    change = s.get(Change, change_id)
    return change is not None and change.project in scope


def visible_run(s: Session, run_id: str, scope: Scope) -> Run:
    run = s.get(Run, run_id) if run_id else None
    if run is None or not _in_scope(s, run.change_id, scope):
        raise NotFound(f"no run {run_id!r}", field="run_id")
    return run


def visible_changeset(s: Session, changeset_id: str, scope: Scope) -> ChangeSet:
    row = s.get(ChangeSet, changeset_id) if changeset_id else None
    if row is None or not _in_scope(s, row.change_id, scope):
        raise NotFound(f"no changeset {changeset_id!r}", field="changeset_id")
    return row


def visible_pools(s: Session, scope: Scope) -> frozenset[str] | None:
    """The pools whose agents a caller sees: those serving a project in its scope (None: every pool).
    The one rule for agents: ListAgents filters by it, and every call naming an agent checks it."""
    if scope is None:
        return None
    return frozenset(s.scalars(select(Project.pool).where(Project.name.in_(sorted(scope)))))


def visible_agent(s: Session, name: str, scope: Scope, *, lock: bool = False) -> Agent:
    """The agent `name`, if the caller sees it; else NOT_FOUND as for an agent that was never there."""
    row = s.get(Agent, name, with_for_update=lock) if name else None
    pools = visible_pools(s, scope) if row is not None else None
    if row is None or (pools is not None and row.pool not in pools):
        raise NotFound(f"no agent {name!r}", field="name")
    return row


FLEET_METERS = ("provider-usd:", "agent-calls:", "classifier-calls:")
"""Meters every caller may read: they say why a call of theirs was refused, and name no project."""


def visible_meters(user: str, scope: Scope) -> Any:
    """A condition on meters: those a caller scoped to `scope` reads (the fleet's, its projects', its
    Changes', its own user meter). Keys are matched whole (`project-usd:<name>:<period>`), never by
    prefix alone, since a user named `ann:web` has the meter `user-usd:ann:web:<month>`, not ann."""
    fleet = [func.substr(Meter.key, 1, len(p)) == p for p in FLEET_METERS]
    owners = [f"project-usd:{name}:" for name in sorted(scope or ())] + [f"user-usd:{user}:"]
    owned = [Meter.key == literal(prefix).concat(Meter.period) for prefix in owners]
    changes = select(literal("change-usd:").concat(Change.id)).where(Change.project.in_(sorted(scope or ())))
    return or_(*fleet, *owned, Meter.key.in_(changes))


def may_act_on(submitted_by: str, who: str, may_manage: bool) -> bool:
    """The ownership rule: only the submitter, or someone with run.manage, acts on a Change (cancel it,
    raise its budget, answer its questions). The API enforces it; the console offers only what it allows."""
    return may_manage or submitted_by == who


def check_owner(change: Change, who: str, may_manage: bool, action: str) -> None:
    """Only the submitter, or someone with run.manage, may `action` a Change."""
    if not may_act_on(change.submitted_by, who, may_manage):
        raise PermissionDenied(
            f"{action} a Change another user submitted needs role run.manage; "
            f"{change.id} was submitted by {change.submitted_by!r}",
            field="change_id",
        )


def agent_holds(run_agent: str | None, agent_token_id: int | None, token_id: int) -> bool:
    """The rule of `agent_run`, over what a query read: the run's agent exists (`agent_token_id` is its
    bound token, None when it has none or there is no such agent) and is bound to this agent token."""
    return bool(run_agent) and agent_token_id is not None and agent_token_id == token_id


def agent_run(s: Session, run_id: str, token_id: int) -> Run:
    """A run of an agent bound to this agent token; anyone else's run is NOT_FOUND, so a stolen token
    of one pool can neither spend on nor publish for the runs of another."""
    run = s.get(Run, run_id) if run_id else None
    agent = s.get(Agent, run.agent) if run is not None and run.agent else None
    if run is None or agent is None or not agent_holds(run.agent, agent.token_id, token_id):
        raise NotFound(f"no run {run_id!r}", field="run_id")
    return run


def visible_project(s: Session, name: str, scope: Scope, *, field: str = "name") -> Project:
    """The project `name`, if the caller sees it; else NOT_FOUND as for a project that was never there."""
    row = s.get(Project, name) if name else None
    if row is None or (scope is not None and row.name not in scope):
        raise NotFound(f"no project {name!r}", field=field)
    return row


def unscoped(scope: Scope, action: str, field: str | None = None) -> None:
    """Creating or deleting a project, or minting an agent or admin token, needs a token of every project."""
    if scope is not None:
        raise PermissionDenied(f"{action} needs an admin token not scoped to projects", field=field)
