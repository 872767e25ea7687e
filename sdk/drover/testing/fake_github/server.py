"""The HTTP side: one server on 127.0.0.1 for the REST API (under /api/v3, as GitHub Enterprise serves it) and
the repositories' git smart HTTP (/OWNER/NAME.git, `git http-backend` as in drover.testing.git_http), each
request checked for a token the forge knows."""

from __future__ import annotations

import base64
import json
import re
import threading
from typing import Any

from drover.testing import git_http
from drover.testing.fake_github import api, pulls
from drover.testing.fake_github.auth import looks_like_jwt, verify_jwt
from drover.testing.fake_github.forge import Forge
from drover.testing.fake_github.records import Request

PREFIX = "/api/v3"
R = r"/repos/([^/]+)/([^/]+)"
ROUTES: list[tuple[str, re.Pattern[str], api.Route]] = [
    (method, re.compile(pattern + "$"), handler)
    for method, pattern, handler in [
        ("GET", R + "/collaborators/([^/]+)/permission", api.permission),
        ("POST", R + "/issues", api.create_issue),
        ("GET", R + "/issues", api.list_issues),
        ("GET", R + r"/issues/comments/(\d+)", api.get_comment),
        ("PATCH", R + r"/issues/comments/(\d+)", api.edit_comment),
        ("GET", R + r"/issues/(\d+)", api.get_issue),
        ("PATCH", R + r"/issues/(\d+)", api.update_issue),
        ("POST", R + r"/issues/(\d+)/labels", api.add_labels),
        ("DELETE", R + r"/issues/(\d+)/labels/([^/]+)", api.remove_label),
        ("GET", R + r"/issues/(\d+)/comments", api.list_comments),
        ("POST", R + r"/issues/(\d+)/comments", api.create_comment),
        ("GET", R + "/labels", api.list_labels),
        ("POST", R + "/labels", api.create_label),
        ("POST", R + "/statuses/([^/]+)", api.create_status),
        ("GET", R + "/statuses/([^/]+)", api.list_statuses),
        ("GET", R + "/commits/([^/]+)/statuses", api.list_statuses),
        ("GET", R + "/commits/([^/]+)/status", api.combined_status),
        ("GET", R + "/commits/([^/]+)/check-runs", pulls.runs_for_ref),
        ("GET", R + "/commits/([^/]+)/check-suites", pulls.suites_for_ref),
        ("GET", R + r"/check-runs/(\d+)", pulls.get_run),
        ("GET", R + r"/check-suites/(\d+)", pulls.get_suite),
        ("POST", R + "/pulls", pulls.create_pull),
        ("GET", R + "/pulls", pulls.list_pulls),
        ("GET", R + r"/pulls/(\d+)", pulls.get_pull),
        ("PATCH", R + r"/pulls/(\d+)", pulls.update_pull),
        ("PUT", R + r"/pulls/(\d+)/merge", pulls.merge_pull),
        ("GET", R + r"/pulls/(\d+)/reviews", pulls.list_reviews),
        ("GET", R + r"/pulls/(\d+)/comments", pulls.list_review_comments),
    ]
]
APP_ROUTES: list[tuple[str, re.Pattern[str], api.Route]] = [
    ("POST", re.compile(r"/app/installations/(\d+)/access_tokens$"), pulls.access_token),
    ("GET", re.compile(R + "/installation$"), pulls.repo_installation),
]
GIT = re.compile(r"^/[^/]+/[^/]+\.git/")


class _Handler(git_http._Handler):
    server: _Server
    protocol_version = "HTTP/1.0"  # one request per connection, as git_http's

    def do_GET(self) -> None:
        if GIT.match(self.path):
            if self.server.forge.login_of(self._git_token()) is None:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="GitHub"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self._backend(self._body())
            return
        self._rest()

    do_POST = do_PATCH = do_PUT = do_DELETE = do_GET

    def _git_token(self) -> str:
        scheme, _, value = self.headers.get("Authorization", "").partition(" ")
        if scheme == "Basic":
            return base64.b64decode(value).decode(errors="replace").partition(":")[2]
        return value.strip() if scheme.lower() in ("bearer", "token") else ""

    def _rest(self) -> None:
        raw = self._body()
        path = self.path.partition("?")[0]
        path = path[len(PREFIX) :] if path.startswith(PREFIX + "/") else path
        try:
            body: Any = json.loads(raw) if raw.strip() else {}
        except ValueError:
            body = None
        token = self._git_token()
        who, status, answer = self._answer(path, token, body)
        self.server.forge.requests.append(Request(self.command, path, who, status, body))
        data = b"" if answer is None else json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("X-GitHub-Media-Type", "github.v3; format=json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _answer(self, path: str, token: str, body: Any) -> tuple[str, int, Any]:
        forge = self.server.forge
        if body is None:
            return token, 400, {"message": "Problems parsing JSON", "documentation_url": api.DOCS}
        for method, pattern, handler in APP_ROUTES:
            if method == self.command and (match := pattern.match(path)):
                if not looks_like_jwt(token):
                    return token, 401, api.ApiError(401, "A JSON web token could not be decoded").body
                app_id, why = verify_jwt(token, {a.id: a.public_key for a in forge.apps.values()})
                if app_id is None:
                    return "jwt:?", 401, api.ApiError(401, why).body
                return f"jwt:{app_id}", *self._call(handler, str(app_id), list(match.groups()), body)
        login = forge.login_of(token)
        if login is None:
            return token, 401, api.ApiError(401, "Bad credentials").body
        if (status := forge.failure_for(login, path)) is not None:
            return token, status, {"message": "Server Error"}
        for method, pattern, handler in ROUTES:
            if method == self.command and (match := pattern.match(path)):
                return token, *self._call(handler, login, list(match.groups()), body)
        return token, 404, api.not_found().body

    def _call(self, handler: api.Route, login: str, groups: list[str], body: Any) -> tuple[int, Any]:
        try:
            with self.server.forge.lock:
                return handler(self.server.forge, login, groups, body)
        except api.ApiError as err:
            return err.status, err.body
        finally:
            self.server.forge.flush()


class _Server(git_http._Server):
    forge: Forge


def serve(forge: Forge, host: str, port: int) -> tuple[_Server, threading.Thread]:
    server = _Server((host, port), _Handler)
    server.daemon_threads = True
    server.forge, server.root, server.tokens, server.attempts, server.sent = forge, forge.root, set(), [], 0
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="fake-github", daemon=True)
    thread.start()
    return server, thread
