"""Issue 24, finding 6: the console slowed the API. With 300 server-sent event streams and 200 slow uploads
open against the console, gRPC GetChange went from 12-15 ms to 2.3 s: the console and gRPC shared one
event loop. Now the console is a process of its own with its own limits: a flood of it leaves GetChange
fast (the strict 50 ms p99 is the benchmark's, benchmarks/console_flood.py; here a bound no shared loop
met), its limits answer 503 and 429 (and 408 to a form too slow), and it lives and dies with the
control plane."""

from __future__ import annotations

import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tests.conftest import ROOT, ControlPlane, Fleet, wait_for

pytestmark = pytest.mark.timeout(300)


def console_url(plane: ControlPlane) -> str:
    def found() -> str:
        text = "\n".join(p.read_text() for p in plane.data_dir.glob("controlplane-*.log"))
        hit = re.findall(r"drover console on (http://127\.0\.0\.1:\d+)/", text)
        return hit[-1] if hit else ""

    return wait_for(found, 30, what="the console to listen")


def console_pids(plane: ControlPlane) -> list[int]:
    text = "\n".join(p.read_text() for p in sorted(plane.data_dir.glob("controlplane-*.log")))
    return [int(pid) for pid in re.findall(r"console process (\d+) serving", text)]


def open_change(plane: ControlPlane) -> str:
    """A Change that stays open (no agent runs its Task), so its event stream stays open."""
    plane.add_project("web")
    with plane.client() as client:
        task = {"key": "a", "kind": "test", "objective": "a", "command": ["true"]}
        return client.submit_change("web", "stay open", [task]).id


def user_token(plane: ControlPlane, name: str) -> str:
    args = ("token", "create", "--kind", "user", "--name", name, "--role", "submit")
    return plane.cli(*args).stdout.strip().splitlines()[-1]


def getchange_ms(plane: ControlPlane, change_id: str, calls: int) -> list[float]:
    took = []
    with plane.client() as client:
        for _ in range(calls):
            start = time.perf_counter()
            client.get_change(change_id)
            took.append((time.perf_counter() - start) * 1000)
    return sorted(took)


def request(url: str, head: str, token: str = "") -> socket.socket:
    """A connection to the console that has sent `head` (a request line and headers) and nothing more."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    cookie = f"Cookie: drover_session={token}\r\n" if token else ""
    sock.sendall(f"{head}\r\nHost: {host}\r\n{cookie}".encode())
    return sock


def status(sock: socket.socket) -> int:
    answer = b""
    while b"\r\n" not in answer:
        chunk = sock.recv(4096)
        if not chunk:
            return 0
        answer += chunk
    return int(answer.split()[1])


def get(url: str, path: str) -> int:
    sock = request(url, f"GET {path} HTTP/1.1")
    sock.sendall(b"\r\n")
    with sock:
        return status(sock)


def stream(url: str, change_id: str, token: str) -> tuple[socket.socket, int]:
    sock = request(url, f"GET /changes/{change_id}/stream?after=0 HTTP/1.1", token)
    sock.sendall(b"\r\n")
    return sock, status(sock)


def upload(url: str, change_id: str, token: str) -> socket.socket:
    """A form upload that says it brings 60,000 bytes and sends two."""
    head = f"POST /changes/{change_id}/budget HTTP/1.1"
    sock = request(url, head, token)
    sock.sendall(b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 60000\r\n\r\na=")
    return sock


@pytest.fixture
def flooded(fleet: Fleet) -> Iterator[tuple[ControlPlane, str, subprocess.Popen[str], str]]:
    limits = ("--console-max-streams-per-session", "310", "--console-max-uploads", "210")
    plane = fleet.start_plane("--http-listen", "127.0.0.1:0", *limits)
    change_id = open_change(plane)
    flood = subprocess.Popen(
        [
            *(sys.executable, "-m", "drover.testing.console_flood", "--url", console_url(plane)),
            *("--token-file", str(plane.data_dir / "tokens" / "admin.token")),
            *("--stream-path", f"/changes/{change_id}/stream?after=0", "--upload-path", f"/changes/{change_id}/budget"),
            *("--streams", "300", "--uploads", "200"),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        preexec_fn=lambda: os.nice(10),  # the crowd is other machines: here it should not take the API's CPU
    )
    assert flood.stdout is not None
    opened = flood.stdout.readline()
    try:
        yield plane, change_id, flood, opened
    finally:
        flood.kill()
        flood.wait(10)


def test_a_flooded_console_leaves_getchange_fast(
    flooded: tuple[ControlPlane, str, subprocess.Popen[str], str],
) -> None:
    plane, change_id, flood, opened = flooded
    assert "streams_open=300 uploads_open=200 refused=none" in opened, opened
    took = getchange_ms(plane, change_id, 500)
    p99 = took[int(len(took) * 0.99) - 1]
    assert p99 < 250, f"GetChange p99 {p99:.0f} ms with the console flooded (p50 {took[len(took) // 2]:.0f} ms)"
    assert flood.poll() is None  # the flood was open all along


def test_the_console_answers_503_and_429_beyond_its_limits_and_408_to_a_slow_form(fleet: Fleet) -> None:
    limits = {"max-connections": 12, "max-streams": 3, "max-streams-per-session": 2, "max-uploads": 2}
    flags = [item for name, value in limits.items() for item in (f"--console-{name}", str(value))]
    plane = fleet.start_plane("--http-listen", "127.0.0.1:0", *flags, "--console-body-timeout-seconds", "2")
    url, change_id = console_url(plane), open_change(plane)
    admin, other = plane.admin_token, user_token(plane, "other")
    held = [stream(url, change_id, admin), stream(url, change_id, admin)]
    assert [code for _, code in held] == [200, 200]
    assert stream(url, change_id, admin)[1] == 429  # this session has its two
    held.append(stream(url, change_id, other))
    assert held[-1][1] == 200
    assert stream(url, change_id, other)[1] == 503  # the console has its three
    for sock, _ in held:
        sock.close()
    wait_for(lambda: stream(url, change_id, other)[1] == 200, 10, what="closed streams to be counted out")

    slow = [upload(url, change_id, admin), upload(url, change_id, admin)]
    time.sleep(0.5)
    third = upload(url, change_id, admin)
    assert status(third) == 503  # two forms are being received already
    started = time.monotonic()
    assert [status(sock) for sock in slow] == [408, 408]  # neither arrived whole within 2 s
    assert time.monotonic() - started < 10

    kept, answers = [], []
    for _ in range(limits["max-connections"] + 2):
        sock = request(url, "GET /login HTTP/1.1")
        sock.sendall(b"\r\n")
        answers.append(status(sock))
        kept.append(sock)  # kept alive: each stays a connection of the console
    assert answers[0] == 200 and answers[-1] == 503, answers


def test_the_console_process_restarts_and_dies_with_the_control_plane(fleet: Fleet) -> None:
    plane = fleet.start_plane("--http-listen", "127.0.0.1:0")
    url = console_url(plane)
    first = wait_for(lambda: console_pids(plane), 30, what="the console process")[-1]
    assert plane.proc is not None and os.getpgid(first) != os.getpgid(plane.proc.pid)
    assert int(_stat(first)[16]) == 10  # nice +10
    os.kill(first, signal.SIGKILL)
    second = wait_for(lambda: [p for p in console_pids(plane) if p != first], 30, what="a new console process")[-1]
    wait_for(lambda: get(url, "/login") == 200, 30, what="the console to answer")
    plane.kill9()
    wait_for(lambda: not os.path.exists(f"/proc/{second}") or _zombie(second), 10, what="the console to die")


def _stat(pid: int) -> list[str]:
    """/proc/PID/stat from its third field (the state) on."""
    return pathlib.Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()


def _zombie(pid: int) -> bool:
    try:
        return _stat(pid)[0] == "Z"
    except OSError:
        return True
