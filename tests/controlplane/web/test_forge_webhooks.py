"""`POST /hooks/github` on a real control plane's HTTP listener, sent real signed deliveries by
drover.testing.fake_github (issue 28): a labelled issue kept once with its event, a redelivery changing
nothing, ping answered, other events 204; forged, unsigned, oversized, other-repository and
id-less deliveries refused with nothing stored."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
import sqlalchemy
from cryptography.fernet import Fernet
from githubkit import GitHub, TokenAuthStrategy

from controlplane.api.console_link import FORGE_DELIVERY_METHOD, SECRET_METADATA
from controlplane.domain.webhooks import MAX_WEBHOOK_BYTES
from drover.testing.fake_github import FakeGitHub
from drover.testing.fake_github.webhooks import signature
from tests.conftest import ControlPlane, Fleet
from tests.controlplane.api.test_projects_and_tokens import events
from tests.controlplane.web.test_console_projects_and_tokens import console

TOKEN = "ghp_alice"


def rows(plane: ControlPlane) -> list[dict[str, Any]]:
    engine = sqlalchemy.create_engine(f"sqlite:///{plane.data_dir / 'drover.db'}")
    try:
        with engine.connect() as conn:
            found = conn.execute(sqlalchemy.text("SELECT * FROM forge_deliveries ORDER BY received_at"))
            return [dict(row._mapping) for row in found]
    finally:
        engine.dispose()


def as_received(plane: ControlPlane) -> list[dict[str, Any]]:
    """The kept deliveries as they were received: without what the forge loop sets when it ends each (its
    state and reason; here web has no forge credential, so a labelled issue's delivery fails)."""
    return [{k: v for k, v in r.items() if k not in ("state", "reason")} for r in rows(plane)]


@contextlib.contextmanager
def linked(fleet: Fleet, tmp_path: pathlib.Path) -> Iterator[tuple[ControlPlane, FakeGitHub, str]]:
    """A control plane with its console, project web linked to octo/app on the fake forge whose webhook
    points at /hooks/github with web's secret (the ping of its creation sent); and project other linked
    to octo/other with a secret of its own."""
    fleet.plane.extra_env["DROVER_CREDENTIAL_KEY"] = Fernet.generate_key().decode()
    plane = fleet.start_plane("--http-listen", "127.0.0.1:0")
    with plane.client() as admin:
        admin.projects.create("web", forge="github", forge_repo="octo/app")
        admin.projects.create("other", forge="github", forge_repo="octo/other")
        admin.projects.create("plain")
        secret = admin.projects.rotate_webhook_secret("web").secret
        other = admin.projects.rotate_webhook_secret("other").secret
    with FakeGitHub(tmp_path / "forge") as gh:
        gh.create_repo("octo/app")
        gh.create_repo("octo/other")
        gh.add_token(TOKEN, "alice")
        gh.set_webhook(console(plane) + "/hooks/github", secret)
        yield plane, gh, other


def client(gh: FakeGitHub) -> GitHub[Any]:
    return GitHub(TokenAuthStrategy(TOKEN), base_url=gh.base_url)


def test_a_labelled_issue_is_kept_once_and_a_redelivery_changes_nothing(fleet: Fleet, tmp_path: pathlib.Path) -> None:
    with linked(fleet, tmp_path) as (plane, gh, _):
        assert [(d.event, d.status) for d in gh.deliveries] == [("ping", 200)]
        assert rows(plane) == [] and events(plane, "forge.delivery_received") == []  # ping stores nothing
        api = client(gh)
        issue = api.rest.issues.create("octo", "app", title="Crash", body="it crashes").parsed_data
        api.rest.issues.add_labels("octo", "app", issue.number, data={"labels": ["drover"]})
        opened, labeled = gh.deliveries[1:]
        assert (opened.event, opened.status, labeled.status) == ("issues", 200, 200)
        kept = as_received(plane)
        assert [(r["delivery_id"], r["action"]) for r in kept] == [(opened.id, "opened"), (labeled.id, "labeled")]
        row = kept[1]
        assert (row["project"], row["event"], row["number"], row["label"], row["sender"]) == (
            "web", "issues", issue.number, "drover", "alice"
        )  # fmt: skip
        said = events(plane, "forge.delivery_received")
        assert [(e["project"], e["event"], e["action"], e["number"]) for e in said] == [
            ("web", "issues", "opened", issue.number), ("web", "issues", "labeled", issue.number)
        ]  # fmt: skip
        assert all("body" not in e and "crashes" not in json.dumps(e) for e in said)  # no body in the event

        assert gh.redeliver(labeled.id).status == 200  # the same X-GitHub-Delivery again
        assert as_received(plane) == kept and len(events(plane, "forge.delivery_received")) == 2

        starred = gh.deliver("star", {"action": "created", "repository": {"full_name": "octo/app"}})
        assert starred.status == 204
        assert gh.set_webhook(gh.hooks.url or "", gh.hooks.secret).status == 200  # ping again
        assert len(rows(plane)) == 2 and len(events(plane, "forge.delivery_received")) == 2


def test_forged_unsigned_oversized_and_misdirected_deliveries_store_nothing(
    fleet: Fleet, tmp_path: pathlib.Path
) -> None:
    with linked(fleet, tmp_path) as (plane, gh, other_secret):
        payload = {"action": "labeled", "issue": {"number": 1}, "label": {"name": "drover"},
                   "repository": {"full_name": "octo/app"}, "sender": {"login": "mallory"}}  # fmt: skip
        assert gh.deliver("issues", payload, secret="wrong").status == 401
        assert gh.deliver("issues", payload, sign=False).status == 401
        # Signed with the right secret, but for another repository than web's: refused.
        assert gh.deliver("issues", {**payload, "repository": {"full_name": "octo/other"}}).status == 400
        # Signed with other's secret but naming web's repository: other's project is chosen, and refuses it.
        assert gh.deliver("issues", payload, secret=other_secret).status == 400
        url, secret = gh.hooks.url or "", gh.hooks.secret
        body = json.dumps({**payload, "pad": "x" * MAX_WEBHOOK_BYTES}).encode()
        headers = {"X-GitHub-Event": "issues", "X-GitHub-Delivery": "big", "Content-Type": "application/json"}
        with httpx.Client(timeout=60) as http:
            big = http.post(url, content=body, headers={**headers, "X-Hub-Signature-256": signature(secret, body)})
            assert big.status_code == 413

            def chunks() -> Iterator[bytes]:  # no Content-Length: the route stops reading past the limit
                for _ in range(MAX_WEBHOOK_BYTES // 65536 + 2):
                    yield b" " * 65536

            streamed = http.post(url, content=chunks(), headers={**headers, "X-Hub-Signature-256": "sha256=00"})
            assert streamed.status_code == 413
            small = json.dumps(payload).encode()
            signed = {"X-GitHub-Event": "issues", "X-Hub-Signature-256": signature(secret, small)}
            assert http.post(url, content=small, headers=signed).status_code == 400  # no X-GitHub-Delivery
            junk = b"{not json"
            bad = {**headers, "X-Hub-Signature-256": signature(secret, junk)}
            assert http.post(url, content=junk, headers=bad).status_code == 400
            assert http.get(url).status_code == 405
        assert rows(plane) == [] and events(plane, "forge.delivery_received") == []
        assert gh.deliver("issues", payload).status == 200 and len(rows(plane)) == 1  # the same, signed right


def private_socket(plane: ControlPlane) -> str:
    """The path of the control plane's private socket for its console: the unix socket it listens on
    under a drover-console-* directory (found by the inodes of the process's open sockets)."""
    assert plane.proc is not None
    fds = pathlib.Path(f"/proc/{plane.proc.pid}/fd")
    inodes = {os.readlink(fd)[len("socket:[") : -1] for fd in fds.iterdir() if os.readlink(fd).startswith("socket:")}
    for line in pathlib.Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) == 8 and fields[6] in inodes and "/drover-console-" in fields[7]:
            return fields[7]
    raise AssertionError("no private console socket found")


def test_only_the_console_process_may_hand_in_a_delivery(fleet: Fleet, tmp_path: pathlib.Path) -> None:
    with linked(fleet, tmp_path) as (plane, gh, _):
        body = json.dumps({"action": "opened", "issue": {"number": 1}, "repository": {"full_name": "octo/app"}})
        metadata = [
            ("x-github-event", "issues"),
            ("x-github-delivery", "from-outside"),
            ("x-hub-signature-256", signature(gh.hooks.secret, body.encode())),
        ]
        with grpc.insecure_channel(f"unix:{private_socket(plane)}") as channel:
            call = channel.unary_unary(FORGE_DELIVERY_METHOD)
            for extra in ([], [(SECRET_METADATA, "guess")], [("authorization", f"Bearer {plane.admin_token}")]):
                with pytest.raises(grpc.RpcError) as err:
                    call(body.encode(), metadata=metadata + extra, timeout=30)
                assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        with grpc.insecure_channel(plane.target) as public:  # and the public port has no such method
            with pytest.raises(grpc.RpcError) as err:
                public.unary_unary(FORGE_DELIVERY_METHOD)(body.encode(), metadata=metadata, timeout=30)
            assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert rows(plane) == [] and events(plane, "forge.delivery_received") == []
