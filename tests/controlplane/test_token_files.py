"""Token files are never overwritten: a data directory switched to another database keeps its files and
gets the new database's tokens beside them; `token create --out` refuses a file that exists, storing
nothing, unless --force. Real control planes on SQLite and PostgreSQL, the real CLI."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest

from controlplane.services.token_files import candidates, database_label
from drover import Client
from drover.errors import Unauthenticated
from tests.conftest import AgentD, ControlPlane, wait_for


@pytest.fixture
def planes() -> Iterator[list[ControlPlane]]:
    started: list[ControlPlane] = []
    yield started
    for plane in started:
        plane.stop()


def serve(planes: list[ControlPlane], data_dir: pathlib.Path, database_url: str = "") -> ControlPlane:
    for plane in planes:  # one control plane per data directory
        plane.stop()
    plane = ControlPlane(data_dir, database_url, args=("--database-url", database_url) if database_url else ())
    planes.append(plane)
    return plane.start()


def written(plane: ControlPlane) -> dict[str, pathlib.Path]:
    log = (plane.data_dir / f"controlplane-{plane.starts}.log").read_text()
    return {name: pathlib.Path(path) for name, path in re.findall(r"^wrote (\w+) token to (\S+)", log, re.M)}


def works(target: str, token: str) -> bool:
    with Client(target, token=token) as client:
        try:
            client.list_agents()
        except Unauthenticated:
            return False
    return True


def test_switching_a_data_dir_to_postgresql_keeps_the_sqlite_token_files(
    tmp_path: pathlib.Path, pg_url: str, planes: list[ControlPlane]
) -> None:
    data = tmp_path / "cp"
    tokens = data / "tokens"
    sqlite = serve(planes, data)
    assert written(sqlite) == {"admin": tokens / "admin.token", "agent": tokens / "agent.token"}
    before = {p.name: p.read_bytes() for p in tokens.iterdir()}

    pg = serve(planes, data, pg_url)
    new = written(pg)
    label = database_label(pg_url)
    assert new == {"admin": tokens / f"admin.{label}.token", "agent": tokens / f"agent.{label}.token"}
    log = (data / "controlplane-1.log").read_text()
    assert f"wrote admin token to {new['admin']} ({tokens / 'admin.token'} exists and is kept" in log
    assert {p.name: p.read_bytes() for p in tokens.iterdir() if p.name in before} == before  # byte-identical
    assert all(oct(p.stat().st_mode & 0o777) == "0o600" for p in new.values())
    old_admin = before["admin.token"].decode().strip()
    assert works(pg.target, new["admin"].read_text().strip()) and not works(pg.target, old_admin)
    agent = AgentD("on-pg", pg, tmp_path / "agent", token_file=new["agent"]).start()
    try:
        with pg.client(new["admin"].read_text().strip()) as client:
            wait_for(lambda: any(a.name == "on-pg" and a.connected for a in client.list_agents()), 30)
    finally:
        agent.stop()

    again = serve(planes, data, pg_url)  # the database has its tokens now: nothing is written
    assert written(again) == {} and len(list(tokens.iterdir())) == 4
    back = serve(planes, data)  # and the SQLite files still open the SQLite database
    assert written(back) == {} and works(back.target, old_admin)


def controlplane(data: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controlplane.cli", *args, "--data-dir", str(data)], capture_output=True, text=True
    )


def test_token_create_refuses_an_existing_out_file_and_stores_nothing(tmp_path: pathlib.Path) -> None:
    data, out = tmp_path / "cp", tmp_path / "bob.token"
    out.write_text("an older token\n")
    refused = controlplane(data, "token", "create", "--kind", "user", "--name", "bob", "--out", str(out))
    assert refused.returncode == 2 and str(out) in refused.stderr and "--force" in refused.stderr, refused.stderr
    assert out.read_text() == "an older token\n"
    assert "bob" not in controlplane(data, "token", "list").stdout

    forced = controlplane(data, "token", "create", "--kind", "user", "--name", "bob", "--out", str(out), "--force")
    assert forced.returncode == 0, forced.stderr
    assert out.read_text() != "an older token\n" and oct(out.stat().st_mode & 0o777) == "0o600"
    assert [line.split()[0] for line in controlplane(data, "token", "list").stdout.splitlines()[1:]] == ["bob"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary file left

    fresh = tmp_path / "new" / "carol.token"
    made = controlplane(data, "token", "create", "--kind", "user", "--name", "carol", "--out", str(fresh))
    assert made.returncode == 0 and fresh.read_text().strip() and oct(fresh.stat().st_mode & 0o777) == "0o600"
    lonely = controlplane(data, "token", "create", "--kind", "user", "--name", "dave", "--force")
    assert lonely.returncode == 2 and "--out" in lonely.stderr


@pytest.mark.parametrize(
    ("url", "label"),
    [
        ("sqlite:////srv/drover/.drover/drover.db", "sqlite-drover"),
        ("postgresql+psycopg://postgres@127.0.0.1:5432/test", "postgresql-127.0.0.1-5432-test"),
        ("postgresql+psycopg://drover:s3cret@db.internal/drover", "postgresql-db.internal-drover"),  # no password
    ],
)
def test_a_database_label_names_the_database_and_never_its_credentials(url: str, label: str) -> None:
    assert database_label(url) == label


def test_new_token_files_go_to_the_first_free_name() -> None:
    found = candidates(pathlib.Path("t"), "admin", "pg")
    assert [str(next(found)) for _ in range(4)] == [
        "t/admin.token",
        "t/admin.pg.token",
        "t/admin.pg.2.token",
        "t/admin.pg.3.token",
    ]
