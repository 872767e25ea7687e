"""A kept webhook delivery on SQLite and PostgreSQL: recorded once per X-GitHub-Delivery with its event in
the same transaction, a second receipt (a redelivery, another replica, at the same time) writing nothing;
and a project whose webhook secret does not open with the key offering no secret to verify with."""

from __future__ import annotations

import concurrent.futures
import pathlib
from collections.abc import Iterator

import pytest
from cryptography.fernet import Fernet
from sqlalchemy import func, select

from controlplane.domain.webhooks import DeliveryFields
from controlplane.services import projects
from controlplane.services.credentials import Sealer
from controlplane.services.forge_deliveries import linked_secrets, record_delivery
from controlplane.store.engine import Store
from controlplane.store.models import Event, ForgeDelivery, Project


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Store]:
    url = f"sqlite:///{tmp_path / 'drover.db'}" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    made = Store(url)
    made.migrate()
    made.transaction(projects.add_project, "web", "https://example.invalid/web.git")
    yield made
    made.close()


def counts(store: Store) -> tuple[int, int]:
    def count(s):  # type: ignore[no-untyped-def]
        kept = s.scalar(select(func.count()).select_from(ForgeDelivery))
        return kept, s.scalar(select(func.count()).select_from(Event).where(Event.kind == "forge.delivery_received"))

    return store.transaction(count)


FIELDS = DeliveryFields("labeled", 7, "drover", "alice")


def test_a_delivery_is_kept_once_with_its_event(store: Store) -> None:
    assert store.transaction(record_delivery, "web", "d-1", "issues", FIELDS) is True
    assert store.transaction(record_delivery, "web", "d-1", "issues", DeliveryFields("closed")) is False
    assert counts(store) == (1, 1)
    row = store.transaction(lambda s: s.get(ForgeDelivery, "d-1"))
    assert (row.project, row.event, row.action, row.number, row.label, row.sender, row.state) == (
        "web", "issues", "labeled", 7, "drover", "alice", "received"
    )  # fmt: skip
    event = store.transaction(lambda s: s.scalars(select(Event).where(Event.kind == "forge.delivery_received")).one())
    assert event.data == {"project": "web", "event": "issues", "action": "labeled", "number": 7, "delivery_id": "d-1"}


def test_receipts_at_the_same_time_keep_one(store: Store) -> None:
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        done = list(pool.map(lambda _: store.transaction(record_delivery, "web", "d-2", "issues", FIELDS), range(8)))
    assert done.count(True) == 1 and counts(store) == (1, 1)


def test_a_secret_that_does_not_open_is_skipped(store: Store) -> None:
    old, new = Sealer([Fernet.generate_key()]), Sealer([Fernet.generate_key()])

    def link(s, name: str, sealer: Sealer) -> None:  # type: ignore[no-untyped-def]
        if s.get(Project, name) is None:
            projects.add_project(s, name, "https://example.invalid/x.git")
        row = s.get(Project, name)
        row.forge, row.forge_repo, row.webhook_secret_sealed = "github", f"octo/{name}", sealer.seal(f"{name}-secret")

    store.transaction(link, "web", new)
    store.transaction(link, "lost", old)
    store.transaction(projects.add_project, "plain", "https://example.invalid/p.git")
    assert store.transaction(linked_secrets, new) == [("web", "octo/web", b"web-secret")]
