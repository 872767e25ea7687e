"""Inside a sandbox with no network: a TCP port on the sandbox's own loopback that leads to the run's
model gateway, a Unix socket bound into the sandbox. It holds no secret (the runtime sends the run
token, the gateway outside checks it) and reaches nothing but that socket.

    python -I -S agentd/run/forwarder.py --port PORT --socket PATH -- COMMAND [ARG...]

It forks: the child forwards connections, the parent execs COMMAND, so the runtime stays the process
the sandbox waits for; the forwarder dies with the sandbox's PID namespace. Standard library only,
like the no-sandbox launcher (agentd/run/rlimits.py)."""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import sys
import threading


def pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for s in (sink, source):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


def serve(listener: socket.socket, path: str) -> None:
    while True:
        client, _ = listener.accept()
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(path)
        except OSError:
            client.close()
            upstream.close()
            continue
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=pipe, args=(a, b), daemon=True).start()


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="forwarder")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--socket", required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command to run")
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", args.port))  # before the fork: the runtime's first call finds it listening
    listener.listen(64)
    if os.fork() == 0:
        os.setsid()  # not in the runtime's process group: a signal to the runtime's group spares it
        serve(listener, args.socket)
        os._exit(0)
    listener.close()
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
