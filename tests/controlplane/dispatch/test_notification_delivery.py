"""Notifications out (issue 28), whole-system: a real control plane with `[[notify]]` targets pointed at a
real HTTP receiver in the test (a thread `http.server`). A finished Change reaches it once, signed with
the target's secret; a receiver answering 500 twice gets the same delivery three times, backing off,
and one delivered row; a bad `[[notify]]` entry stops the control plane from starting, naming the key."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import http.server
import itertools
import json
import pathlib
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy

from controlplane.dispatch.notification_loop import http_post
from drover.errors import InvalidArgument, PermissionDenied
from tests.conftest import ROOT, ControlPlane, Fleet, holds, make_repo, task, wait_for
from tests.controlplane.web.test_console_projects_and_tokens import console, signed_in

SECRET = "whsec-test-0123456789"


@dataclasses.dataclass(frozen=True)
class Received:
    headers: dict[str, str]
    body: bytes
    at: float

    @property
    def payload(self) -> dict[str, Any]:
        return dict(json.loads(self.body))

    @property
    def delivery(self) -> str:
        return self.headers["X-Drover-Delivery"]

    def signed_with(self, secret: str) -> bool:
        expected = "sha256=" + hmac.new(secret.encode(), self.body, hashlib.sha256).hexdigest()
        return hmac.compare_digest(expected, self.headers.get("X-Drover-Signature-256", ""))


class Receiver:
    """An HTTP endpoint on loopback that keeps every POST and answers `statuses` in order (then 200),
    each after `delay` seconds."""

    def __init__(self, statuses: tuple[int, ...] = (), delay: float = 0.0) -> None:
        self.received: list[Received] = []
        self.statuses, self.delay = list(statuses), delay
        self._lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver._lock:
                    receiver.received.append(Received(dict(self.headers.items()), body, time.monotonic()))
                    status = receiver.statuses.pop(0) if receiver.statuses else 200
                time.sleep(receiver.delay)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/drover"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def of(self, event: str) -> list[Received]:
        with self._lock:
            return [r for r in self.received if r.headers.get("X-Drover-Event") == event]


def notify_toml(path: pathlib.Path, url: str, events: list[str], name: str = "ops") -> pathlib.Path:
    path.write_text(
        f'[[notify]]\nname = "{name}"\nurl = "{url}"\nevents = {json.dumps(events)}\n'
        'secret_env = "DROVER_TEST_HOOK_SECRET"\nconsole_url = "https://drover.example"\n'
    )
    return path


def start(plane: ControlPlane, config: pathlib.Path, *args: str) -> ControlPlane:
    plane.extra_env["DROVER_TEST_HOOK_SECRET"] = SECRET
    plane.args = ("--config", str(config), *args)
    return plane.start()


def deliveries(url: str) -> list[dict[str, Any]]:
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as conn:
            found = conn.execute(sqlalchemy.text("SELECT * FROM notification_deliveries ORDER BY event_id"))
            return [dict(row._mapping) for row in found]
    finally:
        engine.dispose()


def sqlite_url(plane: ControlPlane) -> str:
    return f"sqlite:///{plane.data_dir / 'drover.db'}"


def documented_checks() -> tuple[str, str]:
    """The Python function and the shell command docs/operations.md gives to check a signature."""
    section = (ROOT / "docs" / "operations.md").read_text().split("\n## Notifications\n", 1)[1].split("\n## ", 1)[0]
    python = re.search(r"```python\n(.*?)```", section, re.S)
    shell = re.search(r"```sh\n(.*?)\n```", section, re.S)
    assert python and shell, "docs/operations.md's signature checks"
    return python.group(1), shell.group(1)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as r:
        yield r


def test_a_finished_change_and_a_failed_run_are_delivered_once_signed(
    fleet: Fleet, tmp_path: pathlib.Path, receiver: Receiver
) -> None:
    config = notify_toml(tmp_path / "cp.toml", receiver.url, ["change.finished", "run.failed"])
    plane = start(fleet.plane, config, "--http-listen", "127.0.0.1:0")
    plane.add_project("web", str(make_repo(tmp_path / "web", {"app.py": "print(1)\n"})))
    fleet.agent("a1")
    with plane.client() as client:
        good = client.submit_change("web", "pass", [task("ok", ["true"])])
        bad = client.submit_change("web", "fail", [task("no", ["false"])])
        for change in (good, bad):
            wait_for(lambda c=change: client.get_change(c.id).status in ("succeeded", "failed"), 60, what="Changes")
    finished = wait_for(lambda: len(receiver.of("change.finished")) == 2 and receiver.of("change.finished"), 30)
    (failed_run,) = wait_for(lambda: receiver.of("run.failed"), 30, what="the failed run's notification")
    holds(lambda: len(receiver.received) == 3, 3, what="nothing is delivered twice")
    assert all(r.signed_with(SECRET) and not r.signed_with(SECRET + "x") for r in receiver.received)
    by_change = {r.payload["change"]: r.payload for r in finished}
    assert {k: by_change[good.id][k] for k in ("event", "project", "status", "console")} == {
        "event": "change.finished",
        "project": "web",
        "status": "succeeded",
        "console": f"https://drover.example/changes/{good.id}",
    }
    assert by_change[bad.id]["status"] == "failed"
    assert failed_run.payload["change"] == bad.id and failed_run.payload["run"].startswith("run_")
    rows = deliveries(sqlite_url(plane))
    assert sorted(r["id"] for r in rows) == sorted(r.delivery for r in receiver.received)
    assert all((r["state"], r["attempts"], r["last_status"]) == ("delivered", 1, 200) for r in rows)
    assert SECRET not in json.dumps([{k: str(v) for k, v in r.items()} for r in rows])
    logs = "".join(p.read_text(errors="replace") for p in plane.data_dir.glob("controlplane-*.log"))
    assert SECRET not in logs
    with plane.client() as admin:
        submitter = admin.tokens.create("dev", role="submit").secret
    with signed_in(console(plane), plane.admin_token) as http:
        page = http.get("/notifications")
        assert page.status_code == 200 and 'href="/notifications" aria-current="page"' in page.text
        shown = re.findall(r'data-delivery="(ntf_\w+)" data-state="(\w+)"', page.text)
        assert sorted(shown) == sorted((r["id"], "delivered") for r in rows)
        assert f'<a href="/changes/{good.id}">' in page.text and SECRET not in page.text
        failed = http.get("/notifications", params={"state": "failed"})
        assert "data-delivery=" not in failed.text and "No notification in this state." in failed.text
    with signed_in(console(plane), submitter) as http:
        assert 'href="/notifications"' not in http.get("/changes").text  # not offered to a submit token
        assert http.get("/notifications").status_code == 403


def test_a_receiver_failing_twice_gets_three_attempts_and_one_delivered_row(
    fleet: Fleet, tmp_path: pathlib.Path
) -> None:
    with Receiver(statuses=(500, 500)) as receiver:
        plane = start(fleet.plane, notify_toml(tmp_path / "cp.toml", receiver.url, ["change.finished"]))
        plane.add_project("web", str(make_repo(tmp_path / "web", {"app.py": "print(1)\n"})))
        plane.add_project("api", str(make_repo(tmp_path / "api", {"app.py": "print(2)\n"})))
        with plane.client() as client:
            change = client.submit_change("web", "stopped early", [task("t", ["true"])])
            client.cancel_change(change.id)  # no agent: its queued run ends at once, and the Change with it
        got = wait_for(lambda: len(receiver.received) >= 3 and receiver.received, 30, what="three attempts")
        holds(lambda: len(receiver.received) == 3, 2, what="no fourth attempt after the 200")
    assert len({r.delivery for r in got}) == 1 and len({r.body for r in got}) == 1  # the same delivery each time
    assert got[0].payload["status"] == "cancelled" and all(r.signed_with(SECRET) for r in got)
    waits = [later.at - earlier.at for earlier, later in itertools.pairwise(got)]
    assert waits[0] >= 0.9 and waits[1] >= 1.9, waits  # backing off: 1 s, then 2 s
    (row,) = deliveries(sqlite_url(plane))
    assert (row["id"], row["state"], row["attempts"], row["last_status"]) == (got[0].delivery, "delivered", 3, 200)
    with plane.client() as admin:
        (listed,) = admin.notifications.list()
        assert (listed.id, listed.target, listed.event, listed.change_id, listed.project) == (
            got[0].delivery, "ops", "change.finished", change.id, "web"
        )  # fmt: skip
        assert (listed.state, listed.attempts, listed.last_status, listed.next_attempt_at) == (
            "delivered",
            3,
            200,
            None,
        )
        assert listed.delivered_at is not None and listed.last_error == ""
        assert admin.notifications.list(state="failed") == [] and admin.notifications.list(target="other") == []
        with pytest.raises(InvalidArgument) as bad:
            admin.notifications.list(state="lost")
        assert bad.value.field == "state"
        operator = admin.tokens.create("op", role="run.manage").secret
        submitter = admin.tokens.create("dev", role="submit").secret
        elsewhere = admin.tokens.create("api-op", role="run.manage", projects=["api"]).secret
    with plane.client(operator) as client:
        assert [d.id for d in client.notifications.list()] == [listed.id]
    with plane.client(elsewhere) as client:  # another project's notification does not exist for it
        assert client.notifications.list() == []
    with plane.client(submitter) as client, pytest.raises(PermissionDenied):
        client.notifications.list()
    cli = [sys.executable, "-m", "drover.cli", "notifications", "--target", plane.target, "--state", "delivered"]
    shown = subprocess.run(
        [*cli, "--json"], capture_output=True, text=True, env={**plane.env(), "DROVER_TOKEN": operator}
    )
    (item,) = json.loads(shown.stdout)
    assert (item["id"], item["state"], item["attempts"], item["last_status"]) == (listed.id, "delivered", 3, 200)
    refused = subprocess.run(cli, capture_output=True, text=True, env={**plane.env(), "DROVER_TOKEN": submitter})
    assert refused.returncode != 0 and "run.manage" in refused.stderr, refused.stderr


def test_a_bad_notify_entry_stops_the_start_naming_the_key(tmp_path: pathlib.Path) -> None:
    config = notify_toml(tmp_path / "cp.toml", "https://hooks.example/x", ["change.finished", "change.done"])
    plane = ControlPlane(tmp_path / "cp")
    done = subprocess.run(
        [sys.executable, "-m", "controlplane.cli", "serve", "--data-dir", str(plane.data_dir), "--config", str(config)],
        capture_output=True,
        text=True,
        env={**plane.env(), "DROVER_TEST_HOOK_SECRET": SECRET},
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "controlplane: notify[0].events: unknown ['change.done'] (known: change.finished, question.asked, "
        "budget.stopped, run.failed, round.started)"
    )
    assert "listening" not in done.stdout


def test_the_documented_signature_checks_hold(fleet: Fleet, tmp_path: pathlib.Path, receiver: Receiver) -> None:
    """docs/operations.md's `verified` and its openssl command, run as written on a real delivery."""
    plane = start(fleet.plane, notify_toml(tmp_path / "cp.toml", receiver.url, ["change.finished"]))
    plane.add_project("web", str(make_repo(tmp_path / "web", {"app.py": "print(1)\n"})))
    with plane.client() as client:
        client.cancel_change(client.submit_change("web", "g", [task("t", ["true"])]).id)
    (got,) = wait_for(lambda: receiver.received, 30, what="a delivery")
    python, shell = documented_checks()
    scope: dict[str, Any] = {}
    exec(python, scope)  # the page's function, as written
    header = got.headers["X-Drover-Signature-256"]
    assert scope["verified"](SECRET.encode(), got.body, header)
    assert not scope["verified"](b"another secret", got.body, header)
    assert not scope["verified"](SECRET.encode(), got.body + b" ", header)
    (tmp_path / "body.json").write_bytes(got.body)
    printed = subprocess.run(
        ["bash", "-c", shell], cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "SECRET": SECRET}, capture_output=True
    )
    assert printed.stdout.decode().strip() == header, printed.stderr


def test_sighup_moves_the_targets_and_a_bad_entry_keeps_the_running_ones(fleet: Fleet, tmp_path: pathlib.Path) -> None:
    config = tmp_path / "cp.toml"
    with Receiver() as old, Receiver() as new:
        plane = start(fleet.plane, notify_toml(config, old.url, ["change.finished"]))
        plane.add_project("web", str(make_repo(tmp_path / "web", {"app.py": "print(1)\n"})))
        log = plane.data_dir / "controlplane-1.log"

        def finish_one() -> str:
            with plane.client() as client:
                change_id = client.submit_change("web", "g", [task("t", ["true"])]).id
                client.cancel_change(change_id)
            return change_id

        first = finish_one()
        wait_for(lambda: old.received, 30, what="the first target's delivery")
        notify_toml(config, new.url, ["change.finished"], name="moved")
        assert plane.proc is not None
        plane.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "config reloaded" in log.read_text(), 10, what="the reload")
        second = finish_one()
        (got,) = wait_for(lambda: new.received, 30, what="the new target's delivery")
        assert got.payload["change"] == second and [r.payload["change"] for r in old.received] == [first]

        config.write_text(config.read_text().replace('"change.finished"', '"change.done"'))
        plane.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "config reload refused" in log.read_text(), 10, what="the refused reload")
        assert "notify[0].events: unknown ['change.done']" in log.read_text()
        third = finish_one()
        wait_for(lambda: len(new.received) == 2, 30, what="the running target to keep receiving")
        assert new.received[1].payload["change"] == third


async def test_an_attempt_says_what_answered_and_never_the_url() -> None:
    """The loop's POST against real sockets: a status is passed on, and a failure to send is an error
    without the URL (a Slack webhook's path is its secret)."""
    with Receiver(statuses=(500,)) as r:
        assert await http_post(r.url, b"{}", {"Content-Type": "application/json"}) == (500, "HTTP 500")
        assert await http_post(r.url, b"{}", {}) == (200, "")
        assert [x.body for x in r.received] == [b"{}", b"{}"]
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    secret_path = f"http://127.0.0.1:{port}/services/T000/B000/secret-part"
    status, error = await http_post(secret_path, b"{}", {})
    assert status == 0 and error.startswith("ConnectError") and "secret-part" not in error
    status, error = await http_post("http://[::1/secret-part", b"{}", {})
    assert status == 0 and error.startswith("InvalidURL") and "secret-part" not in error
