"""Webhook deliveries out, as GitHub makes them: a JSON POST with X-GitHub-Event, a fresh X-GitHub-Delivery
UUID and X-Hub-Signature-256 (the HMAC-SHA256 of the body with the webhook's secret); each recorded with the
receiver's status code, and redeliverable with the same id and body."""

from __future__ import annotations

import hashlib
import hmac
import json
import urllib.error
import urllib.request
import uuid
from typing import Any

from drover.testing.fake_github.records import Delivery


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class Hooks:
    """The one webhook of the fake (GitHub App style: every event of every repository goes to `url`)."""

    def __init__(self) -> None:
        self.url: str | None = None
        self.secret = ""
        self.hook_id = 1
        self.deliveries: list[Delivery] = []

    def make(self, event: str, payload: dict[str, Any], *, sign: bool = True, secret: str | None = None) -> Delivery:
        body, delivery_id = json.dumps(payload).encode(), str(uuid.uuid4())
        headers = {"X-GitHub-Event": event, "X-GitHub-Delivery": delivery_id, "Content-Type": "application/json"}
        headers |= {"User-Agent": "GitHub-Hookshot/fake", "X-GitHub-Hook-ID": str(self.hook_id)}
        if sign:
            headers["X-Hub-Signature-256"] = signature(self.secret if secret is None else secret, body)
        return Delivery(delivery_id, event, body, headers)

    def send(self, delivery: Delivery) -> Delivery:
        """POST it to the webhook's URL (nothing when none is set) and record the answer."""
        if delivery not in self.deliveries:
            self.deliveries.append(delivery)
        if self.url is None:
            return delivery
        request = urllib.request.Request(self.url, data=delivery.body, headers=delivery.headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                delivery.status = answer.status
        except urllib.error.HTTPError as err:
            delivery.status = err.code
        except OSError:
            delivery.status = None
        delivery.attempts.append(delivery.status)
        return delivery

    def find(self, delivery_id: str) -> Delivery:
        for delivery in self.deliveries:
            if delivery.id == delivery_id:
                return delivery
        raise KeyError(delivery_id)
