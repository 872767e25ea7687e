"""A flood of the web console, as a crowd of browsers and one slow attacker would make it: N server-sent
event streams held open, and M form uploads that send one byte every `every` seconds and never finish.

As a process (the console-flood benchmark and its security test run it beside the control plane, so its
own CPU is not the measuring process's)::

    python -m drover.testing.console_flood --url http://127.0.0.1:8080 --token-file admin.token \\
        --stream-path '/changes/chg_1/stream?after=0' --upload-path /changes/chg_1/budget \\
        --streams 300 --uploads 200 [--every 0.01]

It prints one line once every connection has its answer or is left waiting for it,
`flood streams_open=S uploads_open=U refused=<status:count,...>`, keeps everything open and sending
until its stdin closes, then prints `flood done bytes_sent=B ...` and exits."""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import pathlib
import sys
import urllib.parse

COOKIE = "drover_session"
BODY_BYTES = 60_000


class Flood:
    def __init__(self, args: argparse.Namespace) -> None:
        url = urllib.parse.urlsplit(args.url)
        self.host, self.port = url.hostname or "127.0.0.1", url.port or 80
        self.args = args
        token = pathlib.Path(args.token_file).read_text().strip()
        self.cookie = f"{COOKIE}={urllib.parse.quote(token)}"
        self.statuses: collections.Counter[int] = collections.Counter()
        self.streams_open = 0
        self.uploads: list[tuple[asyncio.StreamWriter, asyncio.Task[int]]] = []
        self.writers: list[asyncio.StreamWriter] = []
        self.bytes_sent = 0

    def _head(self, method: str, path: str, extra: str = "") -> bytes:
        return (
            f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nCookie: {self.cookie}\r\n{extra}\r\n"
        ).encode()

    async def stream(self) -> None:
        reader, writer = await asyncio.open_connection(self.host, self.port)
        self.writers.append(writer)
        writer.write(self._head("GET", self.args.stream_path, "Accept: text/event-stream\r\n"))
        status = await _status(reader)
        if status == 200:
            self.streams_open += 1
            asyncio.get_running_loop().create_task(_drain(reader))
        else:
            self.statuses[status] += 1
            writer.close()

    async def upload(self) -> None:
        reader, writer = await asyncio.open_connection(self.host, self.port)
        self.writers.append(writer)
        extra = f"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {BODY_BYTES}\r\n"
        writer.write(self._head("POST", self.args.upload_path, extra) + b"a=")
        self.uploads.append((writer, asyncio.get_running_loop().create_task(_status(reader))))

    async def trickle(self, stop: asyncio.Event) -> None:
        """One byte on every upload still waiting for its answer, every `every` seconds."""
        while not stop.is_set():
            for writer, answered in self.uploads:
                if not answered.done() and not writer.is_closing():
                    writer.write(b"x")
                    self.bytes_sent += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.args.every)

    def uploads_open(self) -> int:
        return sum(1 for _, answered in self.uploads if not answered.done())

    def refused(self) -> str:
        counts = self.statuses + collections.Counter(a.result() for _, a in self.uploads if a.done())
        return ",".join(f"{status}:{n}" for status, n in sorted(counts.items())) or "none"


async def _status(reader: asyncio.StreamReader) -> int:
    """The answer's status code (0: the connection closed without one)."""
    try:
        line = await reader.readline()
        await reader.readuntil(b"\r\n\r\n")
    except (ConnectionError, asyncio.IncompleteReadError):
        return 0
    parts = line.split()
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


async def _drain(reader: asyncio.StreamReader) -> None:
    with contextlib.suppress(ConnectionError):
        while await reader.read(65536):
            pass


async def run(args: argparse.Namespace) -> None:
    flood = Flood(args)
    stop = asyncio.Event()
    await asyncio.gather(*(flood.stream() for _ in range(args.streams)))
    await asyncio.gather(*(flood.upload() for _ in range(args.uploads)))
    trickling = asyncio.create_task(flood.trickle(stop))
    await asyncio.sleep(args.settle)  # refusals of uploads come at once or on their first bytes
    print(
        f"flood streams_open={flood.streams_open} uploads_open={flood.uploads_open()} refused={flood.refused()}",
        flush=True,
    )
    loop = asyncio.get_running_loop()
    loop.add_reader(sys.stdin.fileno(), stop.set)
    await stop.wait()
    await trickling
    print(
        f"flood done bytes_sent={flood.bytes_sent} streams_open={flood.streams_open} "
        f"uploads_open={flood.uploads_open()} refused={flood.refused()}",
        flush=True,
    )
    for writer in flood.writers:
        writer.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", required=True)
    p.add_argument("--token-file", required=True)
    p.add_argument("--stream-path", required=True)
    p.add_argument("--upload-path", required=True)
    p.add_argument("--streams", type=int, default=300)
    p.add_argument("--uploads", type=int, default=200)
    p.add_argument("--every", type=float, default=0.01, help="seconds between the bytes of an upload")
    p.add_argument("--settle", type=float, default=1.0, help="seconds before reporting what is open")
    asyncio.run(run(p.parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
