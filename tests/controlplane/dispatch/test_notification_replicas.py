"""Two control-plane replicas on one PostgreSQL database deliver each notification from one outbox: only
the leader sends, and when it is killed (SIGKILL) with deliveries in flight the other takes over. The
guarantee is at least once: a delivery whose answer the dead leader never recorded is sent again, with the
same X-Drover-Delivery id and body, so the receiver dedupes on the id; the outbox holds one row per
(target, event) whatever happens."""

from __future__ import annotations

import pathlib
from collections import Counter

import pytest

from tests.conftest import ControlPlane, make_repo, task, wait_for
from tests.controlplane.dispatch.test_notification_delivery import SECRET, Receiver, deliveries, notify_toml, start
from tests.fleet.test_replicas import leader

CHANGES = 24  # more than the leader sends at once (BATCH 16): some are not sent yet when it dies


@pytest.mark.timeout(300)
def test_killing_the_leader_mid_delivery_loses_and_doubles_no_notification(tmp_path: pathlib.Path, pg_url: str) -> None:
    with Receiver(delay=1.0) as receiver:  # each answer takes a second: the kill lands mid-way
        config = notify_toml(tmp_path / "cp.toml", receiver.url, ["change.finished"])
        replicas = [ControlPlane(tmp_path / f"cp{i}", pg_url) for i in range(2)]
        try:
            for plane in replicas:
                start(plane, config)
            first = replicas[0]
            first.add_project("web", str(make_repo(tmp_path / "web", {"app.py": "print(1)\n"})))
            with replicas[1].client(first.admin_token) as client:
                changes = [client.submit_change("web", f"c{i}", [task("t", ["true"])]).id for i in range(CHANGES)]
                for change_id in changes:
                    client.cancel_change(change_id)  # no agent: each Change finishes (cancelled) at once
            doomed = leader(replicas)
            wait_for(lambda: len(receiver.received) >= 4, 60, what="the leader to start delivering")
            doomed.kill9()
            before = {r.delivery for r in list(receiver.received)}
            survivor = next(p for p in replicas if p is not doomed)
            rows = wait_for(
                lambda: (found := deliveries(pg_url)) and all(r["state"] == "delivered" for r in found) and found,
                120,
                what="every delivery delivered by the surviving replica",
            )
            assert "now leads" in "".join(p.read_text() for p in survivor.data_dir.glob("controlplane-*.log"))
        finally:
            for plane in replicas:
                plane.stop()
    sent = Counter(r.delivery for r in receiver.received)
    assert len(rows) == CHANGES and sorted(r["change_id"] for r in rows) == sorted(changes)  # one row per event
    assert set(sent) == {r["id"] for r in rows}  # every notification arrived
    assert {r.payload["change"] for r in receiver.received} == set(changes)
    resent = {delivery for delivery, times in sent.items() if times > 1}
    assert resent <= before, "only a delivery in flight when the leader died is sent again"
    assert all(times <= 2 for times in sent.values()), sent
    assert len(before) < CHANGES, "the leader died before it had sent everything"
    assert all(r.signed_with(SECRET) for r in receiver.received)
    by_id = {}
    for r in receiver.received:  # a resent delivery is the same bytes: the receiver may dedupe on its id
        assert by_id.setdefault(r.delivery, r.body) == r.body
    print(f"{len(before)} sent before the kill, {len(resent)} sent again after it, {CHANGES} rows delivered")
