"""`POST /hooks/github`, the control plane's side (issue 28): the console process forwards the raw body
and three headers over its private socket (`ForgeDelivery` in console_link), and this decides.

The signature first, before anything is parsed: the delivery belongs to the GitHub-linked project whose
webhook secret verifies `X-Hub-Signature-256` (none: 401, nothing stored). Then X-GitHub-Delivery
(missing: 400), the JSON (invalid: 400) and the event: `ping` 200, an event the forge loop does not use
204; one it uses must name the project's forge_repo as its repository (else 400) and is kept once per
X-GitHub-Delivery with its `forge.delivery_received` event (again: 200, nothing changes), and the forge
loop (controlplane.dispatch.forge_loop) woken to process it."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable

from controlplane.domain.webhooks import (
    KEPT_EVENTS,
    MAX_DELIVERY_ID,
    MAX_WEBHOOK_BYTES,
    choose_project,
    delivery_fields,
)
from controlplane.services.credentials import Sealer
from controlplane.services.forge_deliveries import linked_secrets, record_delivery
from controlplane.store.engine import Store

log = logging.getLogger("drover.forge")


@dataclasses.dataclass(frozen=True)
class Answer:
    status: int
    message: str

    def json(self) -> bytes:
        return json.dumps({"status": self.status, "message": self.message}).encode()


@dataclasses.dataclass(frozen=True)
class Delivery:
    """What the console forwards: the raw body and the three headers, as sent."""

    event: str
    delivery_id: str
    signature: str
    body: bytes


class ForgeHooks:
    def __init__(self, store: Store, sealer: Sealer, on_kept: Callable[[], None] = lambda: None) -> None:
        self.store, self.sealer, self.on_kept = store, sealer, on_kept

    async def receive(self, d: Delivery) -> Answer:
        if len(d.body) > MAX_WEBHOOK_BYTES:
            return Answer(413, f"a delivery is at most {MAX_WEBHOOK_BYTES} bytes")
        if not d.signature:
            return Answer(401, "unsigned: X-Hub-Signature-256 is missing")
        linked = await self.store.read(linked_secrets, self.sealer)
        project = choose_project([(name, secret) for name, _, secret in linked], d.body, d.signature)
        if project is None:
            log.info("webhook delivery %.100s refused: no linked project's secret verifies it", d.delivery_id)
            return Answer(401, "the signature verifies with no linked project's webhook secret")
        if not d.delivery_id or len(d.delivery_id) > MAX_DELIVERY_ID:
            return Answer(400, "X-GitHub-Delivery is missing or too long")
        try:
            payload = json.loads(d.body)
        except ValueError:
            return Answer(400, "the body is not JSON")
        if not isinstance(payload, dict):
            return Answer(400, "the body is not a JSON object")
        if d.event == "ping":  # GitHub's ping on a webhook's creation (an App's carries no repository)
            return Answer(200, f"pong: project {project}")
        if d.event not in KEPT_EVENTS:
            return Answer(204, "")
        repo = next(repo for name, repo, _ in linked if name == project)
        given = payload.get("repository")
        full_name = given.get("full_name") if isinstance(given, dict) else None
        if full_name != repo:
            return Answer(400, f"the delivery is for repository {str(full_name)[:200]!r}, not {repo!r}")
        fields = delivery_fields(d.event, payload)
        kept = await self.store.run(record_delivery, project, d.delivery_id, d.event, fields)
        if kept:
            self.on_kept()
        return Answer(200, "received" if kept else "already received")
