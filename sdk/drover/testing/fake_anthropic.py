"""A scripted fake of the Anthropic Messages API, served over real HTTP.

Each POST /v1/messages consumes the next step of the script, in order; a
request after the script runs out answers 500 api_error "script exhausted".
Replies are sent as JSON, or as server-sent events when the request says
`"stream": true` (message_start, ping, content_block_start/delta/stop,
message_delta, message_stop), so the real `anthropic` client and its stream
helpers can talk to it through `base_url`.

In a test::

    with FakeAnthropic([error(429, "rate_limit_error", "slow down", retry_after=2),
                        tool_use("read_file", {"path": "a.py"}), text("done")]) as fake:
        client = anthropic.AsyncAnthropic(base_url=fake.base_url, api_key="k")
        ...
        assert len(fake.requests) == 3

As a process (serves until SIGTERM)::

    python -m drover.testing.fake_anthropic --port 0 --script script.json [--api-key K]
    # prints: fake anthropic listening on http://127.0.0.1:PORT

The script file is a JSON list; each item names a step constructor of this
module in "step" and passes its keyword arguments::

    [
      {"step": "text", "text": "hello", "usage": {"input_tokens": 50}},
      {"step": "tool_use", "name": "read_file", "input": {"path": "a.py"}, "text": "Reading."},
      {"step": "tool_uses", "uses": [["list_files", {}], ["read_file", {"path": "b"}]]},
      {"step": "error", "status": 429, "type": "rate_limit_error", "message": "slow", "retry_after": 1},
      {"step": "error", "status": 529, "type": "overloaded_error", "message": "busy", "in_stream": true},
      {"step": "context_limit", "tokens": 208310, "maximum": 200000},
      {"step": "stall", "seconds": 5},
      {"step": "stall", "seconds": 5, "partial": "I will first"},
      {"step": "trickle", "text": "a slow answer", "every": 0.5, "pieces": 20}
    ]

A stall with `partial` streams that text as the start of an answer before it falls silent and drops
the connection (a broken stream); a trickle streams a text reply one piece every `every` seconds, never
silent for long, so only a per-attempt ceiling ends it early.

Usage dicts may name any of input_tokens, output_tokens,
cache_creation_input_tokens and cache_read_input_tokens; the rest default to
100, 20, 0 and 0.

The control plane's routing classifier (one haiku call for a Task the routing
rules leave open: no `complexity: medium`, no `size: small` with `risk: low`,
...) is answered by the fake itself, {"tier": "sonnet", "confidence": 0.9},
without taking a step of the script, so every scripted step reaches the
harness. A script that wants another answer puts a classifier reply next:
{"step": "classification", "tier": "haiku", "confidence": 0.8} (or any text
reply holding a JSON "tier"); a classifier request takes it. `--classifier
TIER` changes the default answer; `--classifier script` (in Python
`FakeAnthropic(classifier=None)`) makes classifier requests take the next step
like any other request, to script a failing classifier.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
import threading
import uuid
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from drover.testing import message_shapes as shapes
from drover.testing.script import (
    DEFAULT_CLASSIFICATION,
    DEFAULT_USAGE,
    Error,
    Reply,
    Stall,
    Step,
    Trickle,
    is_classification,
    is_classifier_request,
    step_from_json,
)

# Tests write fake_anthropic.text(...), fake_anthropic.error(...): the step
# constructors are part of this module's interface.
from drover.testing.script import classification as classification
from drover.testing.script import context_limit as context_limit
from drover.testing.script import error as error
from drover.testing.script import stall as stall
from drover.testing.script import text as text
from drover.testing.script import tool_use as tool_use
from drover.testing.script import tool_uses as tool_uses
from drover.testing.script import trickle as trickle


@dataclasses.dataclass(frozen=True)
class Request:
    """One request as the fake received it. Header names are lower case."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


class FakeAnthropic:
    """The fake server. Use as a context manager, or call start() and stop()."""

    def __init__(
        self,
        script: Iterable[Step] | None = None,
        *,
        api_key: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        responder: Callable[[Any], Step] | None = None,
        classifier: Step | None = DEFAULT_CLASSIFICATION,
    ) -> None:
        self.api_key = api_key
        self.responder = responder
        """Answers a request (its JSON body) once the script is used up: for many concurrent
        conversations, each answered from its own messages."""
        self.classifier = classifier
        """Answers a routing classifier request when the script's next step is not a classifier reply,
        taking no step; None: classifier requests take the next step like any other."""
        self._steps: list[Step] = list(script or [])
        self._requests: list[Request] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._address = (host, port)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> FakeAnthropic:
        fake = self

        class Handler(_Handler):
            owner = fake

        self._server = ThreadingHTTPServer(self._address, Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            args=(0.05,),  # quick stop()
            name="fake-anthropic",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes stalled handlers
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeAnthropic:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        assert self._server is not None, "start() the fake first"
        host, port = self._server.server_address[:2]
        return f"http://{host.decode() if isinstance(host, bytes) else host}:{port}"

    @property
    def requests(self) -> list[Request]:
        """Every request received so far, in order."""
        with self._lock:
            return list(self._requests)

    @property
    def pending(self) -> int:
        """How many script steps are not consumed yet."""
        with self._lock:
            return len(self._steps)

    def add(self, step: Step) -> None:
        with self._lock:
            self._steps.append(step)

    def extend(self, steps: Iterable[Step]) -> None:
        with self._lock:
            self._steps.extend(steps)

    def _record(self, request: Request) -> None:
        with self._lock:
            self._requests.append(request)

    def _next_step(self, body: Any = None) -> Step:
        with self._lock:
            if self.classifier is not None and is_classifier_request(body):
                if self._steps and is_classification(self._steps[0]):
                    return self._steps.pop(0)
                return self.classifier
            if self._steps:
                return self._steps.pop(0)
        if self.responder is not None:
            return self.responder(body)
        return Error(500, "api_error", "script exhausted")


class _Handler(BaseHTTPRequestHandler):
    owner: FakeAnthropic
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # small SSE writes otherwise wait ~40 ms for the client's delayed ACK

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean

    def do_GET(self) -> None:
        self._record(None)
        self._send_error(Error(404, "not_found_error", f"no route {self.path}"))

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        self._record(body)
        if self.path.split("?")[0] != "/v1/messages":
            return self._send_error(Error(404, "not_found_error", f"no route {self.path}"))
        if not isinstance(body, dict):
            return self._send_error(Error(400, "invalid_request_error", "body must be a JSON object"))
        if not self._authorized():
            return self._send_error(Error(401, "authentication_error", "invalid x-api-key"))
        step = self.owner._next_step(body)
        stream = bool(body.get("stream"))
        model = str(body.get("model", "claude-fake"))
        if isinstance(step, Stall):
            return self._stall(step, stream, model)
        if isinstance(step, Trickle):
            return self._trickle(step, model)
        if isinstance(step, Error) and not (step.in_stream and stream):
            return self._send_error(step)
        if stream:
            return self._stream(step, model)
        assert isinstance(step, Reply)  # an in-stream Error was sent as an error above: no stream to put it in
        self._send_json(200, shapes.message(step, model))

    def _record(self, body: Any) -> None:
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.owner._record(Request(self.command, self.path, headers, body))

    def _authorized(self) -> bool:
        key = self.headers.get("x-api-key") or ""
        bearer = self.headers.get("authorization") or ""
        if not key and bearer.lower().startswith("bearer "):
            key = bearer[7:].strip()
        return bool(key) and (self.owner.api_key is None or key == self.owner.api_key)

    def _send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", f"req_fake_{uuid.uuid4().hex[:12]}")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_error(self, err: Error) -> None:
        headers = {"retry-after": shapes.seconds(err.retry_after)} if err.retry_after is not None else {}
        self._send_json(err.status, shapes.error_body(err), headers)

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("request-id", f"req_fake_{uuid.uuid4().hex[:12]}")
        self.end_headers()

    def _event(self, name: str, data: dict[str, Any]) -> None:
        chunk = f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
        self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
        self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _stream(self, step: Reply | Error, model: str) -> None:
        usage = step.usage if isinstance(step, Reply) else DEFAULT_USAGE
        self._start_stream()
        start = shapes.message(Reply((), usage), model)
        start.update(stop_reason=None, usage={**usage, "output_tokens": 1})
        self._event("message_start", {"type": "message_start", "message": start})
        self._event("ping", {"type": "ping"})
        if isinstance(step, Error):
            self._event("error", shapes.error_body(step))
            return self._end_stream()
        for index, block in enumerate(step.content):
            for name, data in shapes.block_events(index, block):
                self._event(name, data)
        self._event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": step.stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": usage["output_tokens"]},
            },
        )
        self._event("message_stop", {"type": "message_stop"})
        self._end_stream()

    def _stall(self, step: Stall, stream: bool, model: str) -> None:
        try:
            if stream:
                self._start_stream()
                start = shapes.message(Reply((), DEFAULT_USAGE), model)
                start.update(stop_reason=None, usage={**DEFAULT_USAGE, "output_tokens": 1})
                self._event("message_start", {"type": "message_start", "message": start})
                if step.partial:
                    for name, data in shapes.block_events(0, {"type": "text", "text": step.partial})[:-1]:
                        self._event(name, data)  # the block is never stopped: the answer broke off
            self.owner._stopping.wait(step.seconds)
        except OSError:
            pass  # the client gave up first
        self.close_connection = True  # drop it without finishing the response

    def _trickle(self, step: Trickle, model: str) -> None:
        try:
            self._start_stream()
            start = shapes.message(Reply((), DEFAULT_USAGE), model)
            start.update(stop_reason=None, usage={**DEFAULT_USAGE, "output_tokens": 1})
            self._event("message_start", {"type": "message_start", "message": start})
            self._event(
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            )
            for piece in shapes.pieces(step.text, step.pieces):
                if self.owner._stopping.wait(step.every):
                    break
                delta = {"type": "text_delta", "text": piece}
                self._event("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
            self._event("content_block_stop", {"type": "content_block_stop", "index": 0})
            end = {"stop_reason": "end_turn", "stop_sequence": None}
            self._event("message_delta", {"type": "message_delta", "delta": end, "usage": {"output_tokens": 20}})
            self._event("message_stop", {"type": "message_stop"})
            self._end_stream()
        except OSError:
            self.close_connection = True  # the client gave up first


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m drover.testing.fake_anthropic",
        description=__doc__.split("\n")[0],
        epilog="The routing classifier's requests are answered by the fake itself and take no step of the "
        'script, unless the script\'s next step is a classifier reply ({"step": "classification", '
        '"tier": "haiku"}).',
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--script", help="JSON list of steps (see the module docstring)")
    parser.add_argument("--api-key", default=None, help="accept only this key (default: any non-empty key)")
    parser.add_argument(
        "--classifier",
        choices=("haiku", "sonnet", "opus", "script"),
        default="sonnet",
        help="the tier the fake answers the routing classifier with, taking no step of the script "
        "(default: sonnet); 'script': classifier requests take the next step like any other",
    )
    args = parser.parse_args(argv)
    steps: list[Step] = []
    if args.script:
        with open(args.script, encoding="utf-8") as f:
            steps = [step_from_json(item) for item in json.load(f)]
    answer = None if args.classifier == "script" else classification(args.classifier, 0.9)
    fake = FakeAnthropic(steps, api_key=args.api_key, host=args.host, port=args.port, classifier=answer).start()
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    print(f"fake anthropic listening on {fake.base_url}", flush=True)
    while not done.wait(0.5):
        pass
    fake.stop()
    sys.exit(0)


if __name__ == "__main__":
    main()
