"""A git smart-HTTP server for tests and benchmarks: `git http-backend` (CGI) behind a small HTTP server
that requires a token, as a forge does. Clone, fetch and push work for a request whose Basic password (any user) or
Bearer token is one of `tokens`; anything else gets 401. The tokens can be changed while it runs."""

from __future__ import annotations

import base64
import http.server
import os
import pathlib
import subprocess
import threading


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.0"  # one request per connection: the body's end is the connection's

    def do_GET(self) -> None:
        if not self._authorized():
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self._backend(self._body())

    do_POST = do_GET

    def _authorized(self) -> bool:
        scheme, _, value = self.headers.get("Authorization", "").partition(" ")
        if scheme == "Bearer":
            token = value.strip()
        elif scheme == "Basic":
            token = base64.b64decode(value).decode(errors="replace").partition(":")[2]
        else:
            token = ""
        self.server.attempts.append(token)
        return token in self.server.tokens

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":  # libgit2 pushes chunked
            chunks = []
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            self.rfile.readline()
            return b"".join(chunks)
        return self.rfile.read(int(self.headers.get("Content-Length", "0") or 0))

    def _backend(self, body: bytes) -> None:
        path, _, query = self.path.partition("?")
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": str(self.server.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REMOTE_USER": "drover",  # http-backend allows pushes only from an authenticated user
            "REMOTE_ADDR": "127.0.0.1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
        }
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        if self.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        out = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True, check=False).stdout
        head, _, payload = out.partition(b"\r\n\r\n")
        headers = [line.split(b":", 1) for line in head.split(b"\r\n") if b":" in line]
        status = next((v.strip().decode() for k, v in headers if k.lower() == b"status"), "200 OK")
        code, _, reason = status.partition(" ")
        self.send_response(int(code), reason)
        for key, value in headers:
            if key.lower() != b"status":
                self.send_header(key.decode(), value.strip().decode())
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
        self.server.sent += len(payload)

    def log_message(self, *args: object) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    root: pathlib.Path
    tokens: set[str]
    attempts: list[str]
    sent: int


class GitHttpServer:
    """Serves the bare repositories under `root` at http://127.0.0.1:PORT/NAME.git to holders of `tokens`."""

    def __init__(self, root: pathlib.Path, tokens: set[str]) -> None:
        self.server = _Server(("127.0.0.1", 0), _Handler)
        self.server.root, self.server.tokens, self.server.attempts = root, set(tokens), []
        self.server.sent = 0
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> GitHttpServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/{name}.git"

    @property
    def tokens(self) -> set[str]:
        """The tokens accepted now (replace the set's contents to rotate)."""
        return self.server.tokens

    @property
    def attempts(self) -> list[str]:
        """The token of every request, "" for none."""
        return self.server.attempts

    @property
    def sent(self) -> int:
        """Bytes of response bodies served so far (the packs and the refs' advertisements)."""
        return self.server.sent
