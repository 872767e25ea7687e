"""Two control-plane replicas on one PostgreSQL database, both receiving the forge's webhook deliveries (as
behind a load balancer, and GitHub redelivering to the other one); the leader, which processes them, is
killed with kill -9 half-way. Every labelled issue ends with exactly one Change, and every delivery is
kept once and ended by whichever replica leads."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import sqlalchemy
from cryptography.fernet import Fernet
from githubkit import GitHub, TokenAuthStrategy

from drover.testing.fake_github import FakeGitHub
from tests.conftest import ControlPlane, wait_for
from tests.controlplane.web.test_console_projects_and_tokens import console
from tests.fleet.test_replicas import leader

ALICE = "ghp_alice"
BOT = "github_pat_drover_bot"
ISSUES = 8


def kept(pg_url: str) -> list[dict[str, Any]]:
    engine = sqlalchemy.create_engine(pg_url)
    try:
        with engine.connect() as conn:
            found = conn.execute(sqlalchemy.text("SELECT * FROM forge_deliveries ORDER BY received_at"))
            return [dict(row._mapping) for row in found]
    finally:
        engine.dispose()


def issue_changes(pg_url: str) -> list[tuple[int, str]]:
    engine = sqlalchemy.create_engine(pg_url)
    try:
        with engine.connect() as conn:
            query = "SELECT issue_number, change_id FROM forge_issue_changes ORDER BY issue_number"
            return [(row[0], row[1]) for row in conn.execute(sqlalchemy.text(query))]
    finally:
        engine.dispose()


@pytest.mark.timeout(600)
def test_two_replicas_receive_deliveries_and_a_killed_leader_loses_or_doubles_no_change(
    tmp_path: pathlib.Path, pg_url: str
) -> None:
    env = {"DROVER_CREDENTIAL_KEY": Fernet.generate_key().decode(), "ANTHROPIC_API_KEY": "sk-ant-test-not-called"}
    replicas = [
        ControlPlane(tmp_path / f"cp{i}", pg_url, args=("--http-listen", "127.0.0.1:0"), extra_env=env)
        for i in range(2)
    ]
    with FakeGitHub(tmp_path / "forge") as gh:
        gh.create_repo("octo/app")
        gh.add_token(ALICE, "alice")
        gh.add_token(BOT, "drover-bot")
        try:
            for plane in replicas:
                plane.start()
            first = replicas[0]
            with first.client() as admin:
                admin.projects.create("web", forge="github", forge_repo="octo/app", forge_api_url=gh.base_url)
                admin.projects.set_forge_credential("web", "token", BOT)
                secret = admin.projects.rotate_webhook_secret("web").secret
            urls = [console(p) + "/hooks/github" for p in replicas]
            lead = leader(replicas)
            other = replicas[1 - replicas.index(lead)]
            api = GitHub(TokenAuthStrategy(ALICE), base_url=gh.base_url)
            labelled = []
            for i in range(ISSUES):
                if i == ISSUES // 2:
                    lead.proc.kill()  # type: ignore[union-attr]  # kill -9, deliveries possibly half processed
                    lead.proc.wait()  # type: ignore[union-attr]
                receiver = urls[i % 2] if i < ISSUES // 2 else urls[replicas.index(other)]
                gh.set_webhook(receiver, secret)
                issue = api.rest.issues.create("octo", "app", title=f"Bug {i}").parsed_data
                api.rest.issues.add_labels("octo", "app", issue.number, data={"labels": ["drover"]})
                labelled.append((issue.number, gh.deliveries[-1].id))
                gh.set_webhook(urls[replicas.index(other)], secret)  # GitHub retries; it lands on the survivor
                assert gh.redeliver(labelled[-1][1]).status == 200

            def settled() -> list[dict[str, Any]] | None:
                rows = kept(pg_url)
                return rows if rows and all(r["state"] != "received" for r in rows) else None

            rows = wait_for(settled, 120, what="the surviving replica to process every delivery") or []
            ids = [r["delivery_id"] for r in rows]
            assert len(ids) == len(set(ids))  # each delivery kept once, whoever received it and how often
            assert {d for _, d in labelled} <= set(ids)
            assert [r["state"] for r in rows if r["delivery_id"] in {d for _, d in labelled}] == ["done"] * ISSUES
            changes = issue_changes(pg_url)
            assert [n for n, _ in changes] == [n for n, _ in labelled]  # one Change per issue: none lost, none doubled
            with other.client(first.admin_token) as admin:
                listed = {c.id for c in admin.list_changes("web")}
            assert listed == {c for _, c in changes}
        finally:
            for plane in replicas:
                if plane.proc is not None and plane.proc.poll() is None:
                    plane.proc.terminate()
                    plane.proc.wait(timeout=30)
