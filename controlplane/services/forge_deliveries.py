"""Webhook deliveries from a forge (issue 28), the store's part: the linked projects' webhook secrets
opened to check a signature with, and a kept delivery recorded once per X-GitHub-Delivery together with
its `forge.delivery_received` event; the forge loop (controlplane.dispatch.forge_loop) processes it."""

from __future__ import annotations

import logging

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from controlplane.domain.webhooks import DeliveryFields
from controlplane.services.credentials import Sealer
from controlplane.store.events import add_event
from controlplane.store.models import ForgeDelivery, Project, utcnow

log = logging.getLogger("drover.forge")


def linked_secrets(s: Session, sealer: Sealer) -> list[tuple[str, str, bytes]]:
    """(project, forge_repo, webhook secret) of every project linked to GitHub with a webhook secret; a
    secret that does not open with the configured key is skipped (and said in the log), so it verifies
    nothing."""
    rows = s.execute(
        select(Project.name, Project.forge_repo, Project.webhook_secret_sealed)
        .where(Project.forge == "github", Project.webhook_secret_sealed != "")
        .order_by(Project.name)
    ).all()
    found = []
    for name, repo, sealed in rows:
        try:
            secret = sealer.open(sealed)
        except ValueError:
            log.warning("project %s: its webhook secret does not open with the credential key; skipped", name)
            continue
        found.append((name, repo, secret.encode()))
    return found


def record_delivery(s: Session, project: str, delivery_id: str, event: str, fields: DeliveryFields) -> bool:
    """Keep the delivery and its event in this transaction; False (nothing written) when a delivery with
    this id is already kept: a redelivery, or another replica that received it first. Insert-or-ignore
    on the primary key, so two replicas receiving it at once also keep one row and one event."""
    upsert = postgresql.insert if s.get_bind().dialect.name == "postgresql" else sqlite.insert
    row = {
        "delivery_id": delivery_id,
        "project": project,
        "event": event,
        "action": fields.action,
        "number": fields.number,
        "label": fields.label,
        "sender": fields.sender,
        "head_sha": fields.head_sha,
        "conclusion": fields.conclusion,
        "comment_id": fields.comment_id,
        "state": "received",
        "received_at": utcnow(),
    }
    insert = upsert(ForgeDelivery).values(row).on_conflict_do_nothing(index_elements=["delivery_id"])
    inserted = s.execute(insert.returning(ForgeDelivery.delivery_id)).first()
    if inserted is None:
        return False
    add_event(
        s,
        "forge.delivery_received",
        project=project,
        event=event,
        action=fields.action,
        number=fields.number,
        delivery_id=delivery_id,
    )
    return True
