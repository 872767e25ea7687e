"""The web console over HTTP against a real control plane and agentd: sign-in, every page, the live
transcript stream, actions with their CSRF field, roles and project scopes, and malformed input."""

from __future__ import annotations

import pathlib
import re
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from controlplane.web.session import csrf_token
from drover.testing import fake_anthropic as fake
from tests.conftest import API_KEY, Fleet, make_repo, wait_for

PRINTER = "import time\nfor i in range(N):\n    print(f'line {i}', flush=True)\n    time.sleep(0.2)\n"


def printing(n: int) -> list[str]:
    return ["python", "-c", PRINTER.replace("N", str(n))]  # agentd's PATH starts with this interpreter's dir


def console_url(fleet: Fleet) -> str:
    def found() -> str:
        text = "\n".join(p.read_text() for p in fleet.plane.data_dir.glob("controlplane-*.log"))
        hit = re.search(r"drover console on (https?://127\.0\.0\.1:\d+)/", text)
        return hit.group(1) if hit else ""

    return wait_for(found, 30, what="the console to listen")


def printing_run(fleet: Fleet, goal: str, lines: int, running: bool = False) -> tuple[Any, str]:
    """A Change of one Task (its key `goal`) printing `lines` lines in project web, and its run (started,
    if `running`)."""
    with fleet.plane.client() as client:
        task = {"key": goal, "kind": "test", "objective": goal, "command": printing(lines)}
        change = client.submit_change("web", goal, [task])
        run_id = wait_for(lambda: client.get_change(change.id).tasks[0].latest_run_id, 30, what="a run")
        if running:
            wait_for(lambda: client.get_run(run_id).state == "running", 30, what="the run to start")
    return change, run_id


def user_token(fleet: Fleet, name: str, role: str, project: str = "") -> str:
    args = ["token", "create", "--kind", "user", "--name", name, "--role", role]
    return fleet.plane.cli(*args, *(["--project", project] if project else [])).stdout.strip().splitlines()[-1]


class Console:
    """A browser-less visitor: httpx with the session cookie once signed in."""

    def __init__(self, url: str) -> None:
        self.http = httpx.Client(base_url=url, follow_redirects=False, timeout=30)
        self.token = ""

    def sign_in(self, token: str) -> httpx.Response:
        answer = self.http.post("/login", data={"token": token, "next": "/fleet"})
        if answer.status_code == 303:
            self.token = token
        return answer

    def get(self, path: str) -> httpx.Response:
        return self.http.get(path)

    def act(self, path: str, **form: str) -> httpx.Response:
        return self.http.post(path, data={"csrf": csrf_token(self.token), **form})


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("console")
    fleet = Fleet(tmp)
    try:
        fleet.start_plane("--http-listen", "127.0.0.1:0")
        repo = make_repo(tmp / "repo", {"README.md": "# web\n", "app.py": "print('hi')\n"})
        fleet.plane.add_project("web", str(repo))
        fleet.plane.add_project("other", str(repo))
        fleet.agent("console-agent", capacity=4)
        tokens = {
            "admin": fleet.plane.admin_token,
            "submitter": user_token(fleet, "sam", "submit", "web"),
            "outsider": user_token(fleet, "olga", "submit", "other"),
            "operator": user_token(fleet, "rita", "run.manage"),
        }
        with fleet.plane.client() as client:
            tasks = [
                {"key": "build", "kind": "test", "objective": "build", "command": printing(3)},
                {"key": "lint", "kind": "test", "objective": "lint", "command": printing(2), "depends_on": ["build"]},
                {"key": "unit", "kind": "test", "objective": "unit", "command": printing(2), "depends_on": ["build"]},
            ]
            submitted = client.submit_change("web", "three tasks", tasks)
            list(client.watch(submitted.id))
            graph = client.get_change(submitted.id)
            both = [
                {"key": k, "kind": "test", "objective": k, "command": printing(6), "resources": ["module:shared"]}
                for k in ("left", "right")
            ]
            overlapping = client.submit_change("web", "two Tasks on one resource", both)
            list(client.watch(overlapping.id))
        yield {
            "fleet": fleet,
            "url": console_url(fleet),
            "tokens": tokens,
            "graph": graph,
            "overlapping": overlapping,
        }
    finally:
        fleet.stop()


def signed_in(setup: dict[str, Any], who: str = "admin") -> Console:
    console = Console(setup["url"])
    assert console.sign_in(setup["tokens"][who]).status_code == 303
    return console


def test_every_page_sends_visitors_without_a_session_to_sign_in(setup: dict[str, Any]) -> None:
    visitor = Console(setup["url"])
    change_id = setup["graph"].id
    for path in ("/fleet", "/changes", f"/changes/{change_id}", "/spend", "/runs/run_x", "/runs/run_x/stream"):
        answer = visitor.get(path)
        assert answer.status_code == 303 and answer.headers["location"].startswith("/login?next=")
    assert visitor.http.post(f"/changes/{change_id}/cancel", data={"csrf": "x"}).status_code == 401
    page = visitor.get("/login")
    assert page.status_code == 200 and 'name="token"' in page.text


def test_sign_in_takes_user_tokens_only_and_sets_a_strict_http_only_cookie(setup: dict[str, Any]) -> None:
    visitor = Console(setup["url"])
    assert visitor.sign_in("drv_u_not_a_token").status_code == 401
    agent_token = (setup["fleet"].plane.agent_token_file).read_text().strip()
    assert visitor.sign_in(agent_token).status_code == 401  # an agent's token is not a person's
    answer = visitor.sign_in(setup["tokens"]["submitter"])
    cookie = answer.headers["set-cookie"]
    assert answer.status_code == 303 and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert visitor.get("/fleet").status_code == 200
    # An open redirect is refused: only paths of the console.
    other = Console(setup["url"])
    moved = other.http.post("/login", data={"token": setup["tokens"]["admin"], "next": "//evil.example/x"})
    assert moved.headers["location"] == "/"


def test_the_fleet_page_lists_the_agent_with_its_slots_and_runtimes(setup: dict[str, Any]) -> None:
    page = signed_in(setup).get("/fleet")
    assert page.status_code == 200
    row = re.search(r'<tr data-agent="console-agent">(.*?)</tr>', page.text, re.S)
    assert row is not None
    assert "connected" in row.group(1) and "4/4" in row.group(1) and "command" in row.group(1)
    assert "Drain</button>" in row.group(1)  # admin may drain
    assert "Drain</button>" not in signed_in(setup, "submitter").get("/fleet").text  # submit may not


def test_changes_are_listed_and_filtered(setup: dict[str, Any]) -> None:
    console = signed_in(setup)
    change_id = setup["graph"].id
    assert change_id in console.get("/changes").text
    assert change_id in console.get("/changes?status=succeeded&project=web&submitter=admin").text
    assert change_id not in console.get("/changes?status=failed").text
    assert change_id not in console.get("/changes?submitter=sam").text
    bad = console.get("/changes?status=exploded")
    assert bad.status_code == 400 and "status" in bad.text  # the API's own validation, naming the field


def test_the_change_page_draws_the_task_graph_and_lists_runs(setup: dict[str, Any]) -> None:
    change = setup["graph"]
    page = signed_in(setup).get(f"/changes/{change.id}")
    assert page.status_code == 200
    nodes = re.findall(r'<g class="node" data-key="(\w+)" data-status="(\w+)"', page.text)
    assert sorted(nodes) == [("build", "succeeded"), ("lint", "succeeded"), ("unit", "succeeded")]
    edges = sorted(re.findall(r'class="edge" data-from="(\w+)" data-to="(\w+)"', page.text))
    assert edges == [("build", "lint"), ("build", "unit")]
    for task in change.tasks:
        assert f'href="/runs/{task.latest_run_id}"' in page.text


def test_the_run_page_shows_the_transcript_events_and_packet_link(setup: dict[str, Any]) -> None:
    build = next(t for t in setup["graph"].tasks if t.key == "build")
    page = signed_in(setup).get(f"/runs/{build.latest_run_id}")
    assert page.status_code == 200
    transcript = re.search(r'<ol class="transcript".*?</ol>', page.text, re.S)
    assert transcript is not None and re.findall(r"line \d", transcript.group(0)) == [f"line {i}" for i in range(3)]
    assert "run.finished" in page.text and 'data-live="no"' in page.text


def test_a_project_scope_holds_on_every_page(setup: dict[str, Any]) -> None:
    outsider = signed_in(setup, "outsider")
    change = setup["graph"]
    assert change.id not in outsider.get("/changes").text
    assert outsider.get(f"/changes/{change.id}").status_code == 404
    assert outsider.get(f"/runs/{change.tasks[0].latest_run_id}").status_code == 404
    assert outsider.get(f"/runs/{change.tasks[0].latest_run_id}/stream").status_code == 404
    assert outsider.act(f"/changes/{change.id}/cancel").status_code == 404


def test_the_stream_sends_lines_as_the_run_prints_them_then_ends(setup: dict[str, Any]) -> None:
    change, run_id = printing_run(setup["fleet"], "live", 8)
    console = signed_in(setup)
    seen: list[tuple[float, str]] = []
    with console.http.stream("GET", f"/runs/{run_id}/stream?after=0", timeout=60) as answer:
        assert answer.headers["content-type"].startswith("text/event-stream")
        for line in answer.iter_lines():
            if line.startswith("data: ") and "line " in line:
                seen.extend((time.monotonic(), text) for text in re.findall(r"line \d", line))
            if line == "event: end":
                break
    assert [text for _, text in seen] == [f"line {i}" for i in range(8)]
    assert seen[-1][0] - seen[0][0] > 0.5  # they came as printed, not all at the end
    # The Change's page follows the Change's events the same way, until it is finished.
    kinds: list[str] = []
    with console.http.stream("GET", f"/changes/{change.id}/stream?after=0", timeout=60) as answer:
        for line in answer.iter_lines():
            kinds += re.findall(r'"kind": "([\w.]+)"', line)
            if line == "event: end":
                break
    assert kinds[0] == "change.submitted" and kinds[-1] == "change.finished" and "run.started" in kinds
    assert 'data-watch=""' in console.get(f"/changes/{change.id}").text  # a finished Change is not watched


def test_actions_need_the_csrf_field_and_the_role_and_record_their_event(setup: dict[str, Any]) -> None:
    fleet: Fleet = setup["fleet"]
    _, run_id = printing_run(fleet, "long", 300, running=True)
    submitter, operator = signed_in(setup, "submitter"), signed_in(setup, "operator")
    forged = operator.http.post(f"/runs/{run_id}/cancel", data={"csrf": "0" * 64})
    assert forged.status_code == 403
    assert submitter.act(f"/runs/{run_id}/cancel").status_code == 403  # cancelling a run needs run.manage
    assert submitter.act("/agents/console-agent/drain").status_code == 403
    with fleet.plane.client() as client:
        assert client.get_run(run_id).state == "running" and not client.get_run(run_id).cancel_requested
    done = operator.act(f"/runs/{run_id}/cancel", reason="from the console test")
    assert done.status_code == 303 and done.headers["location"] == f"/runs/{run_id}"
    with fleet.plane.client() as client:
        wait_for(lambda: client.get_run(run_id).state == "cancelled", 30, what="the run to be cancelled")
        asked = client.list_events(run_id=run_id, kind="run.cancel")
    assert asked and asked[0].data.get("reason") == "from the console test"


def test_actions_are_offered_only_where_the_api_allows_them(setup: dict[str, Any]) -> None:
    """A submit-only user sees no Raise budget or Cancel on another user's Change (the API would refuse
    it), sees both on its own; run.manage and admin see them on every open Change; a finished one offers
    neither."""
    fleet: Fleet = setup["fleet"]
    theirs, _ = printing_run(fleet, "theirs", 300, running=True)  # submitted by the admin
    with fleet.plane.client(setup["tokens"]["submitter"]) as sam:
        task = {"key": "mine", "kind": "test", "objective": "mine", "command": printing(300)}
        mine = sam.submit_change("web", "mine", [task], budget_usd=1)
    try:
        offers = {
            (who, which): [
                label
                for label in ("Raise budget</button>", "Cancel this Change</button>")
                if label in signed_in(setup, who).get(f"/changes/{change.id}").text
            ]
            for who in ("submitter", "operator", "admin")
            for which, change in (("theirs", theirs), ("mine", mine))
        }
        both = ["Raise budget</button>", "Cancel this Change</button>"]
        assert offers == {
            ("submitter", "theirs"): [],
            ("submitter", "mine"): both,
            ("operator", "theirs"): both,
            ("operator", "mine"): both,
            ("admin", "theirs"): both,
            ("admin", "mine"): both,
        }
        refused = signed_in(setup, "submitter").act(f"/changes/{theirs.id}/budget", budget_usd="5")
        assert refused.status_code == 403 and "run.manage" in refused.text  # the API's own rule, unchanged
        finished = signed_in(setup).get(f"/changes/{setup['graph'].id}").text
        assert "Raise budget</button>" not in finished and "Cancel this Change</button>" not in finished
    finally:
        with fleet.plane.client() as client:
            for change in (theirs, mine):
                client.cancel_change(change.id)


def test_the_favicon_is_an_image(setup: dict[str, Any]) -> None:
    visitor = Console(setup["url"])
    icon = visitor.get("/favicon.ico")  # no session needed: the browser asks before anything else
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")
    assert icon.text.startswith("<svg") and icon.headers["x-content-type-options"] == "nosniff"
    linked = visitor.get("/static/favicon.svg")
    assert linked.status_code == 200 and linked.headers["content-type"].startswith("image/svg+xml")
    assert '<link rel="icon" href="/static/favicon.svg"' in visitor.get("/login").text
    assert '<link rel="icon" href="/static/favicon.svg"' in signed_in(setup).get("/fleet").text


def test_stderr_is_shown_as_a_stream_not_as_an_error(setup: dict[str, Any]) -> None:
    """Passing unittest output goes to stderr: the page tags it, says so, and does not paint it red."""
    report = "import sys\nprint('Ran 1 test in 0.001s\\n\\nOK', file=sys.stderr)\n"
    with setup["fleet"].plane.client() as client:
        task = {"key": "unit", "kind": "test", "objective": "unit", "command": ["python", "-c", report]}
        change = client.submit_change("web", "a passing report on stderr", [task])
        list(client.watch(change.id))
        run_id = client.get_change(change.id).tasks[0].latest_run_id
    run = signed_in(setup).get(f"/runs/{run_id}").text
    stderr = re.search(r'<li class="k-stderr"[^>]*><span class="kind">stderr</span><pre>Ran 1 test', run)
    assert stderr is not None and "data-failed" not in stderr.group(0)
    assert "normal report there" in run  # the page says stderr is not a verdict


def test_malformed_input_gets_a_clear_answer_and_changes_nothing(setup: dict[str, Any]) -> None:
    console = signed_in(setup)
    change = setup["graph"]
    assert console.get("/changes/chg_missing").status_code == 404
    assert console.get("/runs/" + "x" * 5000).status_code in (400, 404)
    bad = console.act(f"/changes/{change.id}/budget", budget_usd="lots")
    assert bad.status_code == 400 and "budget_usd" in bad.text
    huge = console.http.post(f"/changes/{change.id}/budget", content=b"a=" + b"x" * 100_000)
    assert huge.status_code == 413
    assert console.act("/runs/run_missing/input", kind="shout", text="hi").status_code in (400, 404)
    page = console.get(f"/changes/{change.id}?<script>=1")
    assert page.status_code == 200 and "<script>=1" not in page.text


def test_the_spend_page_shows_meters_and_charts(setup: dict[str, Any]) -> None:
    page = signed_in(setup).get("/spend")
    assert page.status_code == 200 and "Meters" in page.text and "Spend by project" in page.text


def test_the_packet_page_needs_a_packet(setup: dict[str, Any]) -> None:
    build = next(t for t in setup["graph"].tasks if t.key == "build")
    answer = signed_in(setup).get(f"/runs/{build.latest_run_id}/packet")
    assert answer.status_code == 409 and "FAILED_PRECONDITION" in answer.text  # a command run has none


def test_the_console_speaks_tls_with_the_grpc_certificate_and_refuses_plaintext_off_loopback(
    fleet: Fleet, pki: pathlib.Path
) -> None:
    refused = subprocess.run(
        [
            sys.executable,
            "-m",
            "controlplane.cli",
            "serve",
            "--data-dir",
            str(fleet.tmp / "plain"),
            "--listen",
            "127.0.0.1:0",
            "--http-listen",
            "0.0.0.0:0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode != 0 and "refusing a plaintext console on 0.0.0.0:0" in refused.stderr
    tls = ("--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key"))
    fleet.start_plane("--http-listen", "127.0.0.1:0", *tls)
    url = console_url(fleet)
    assert url.startswith("https://")
    with httpx.Client(
        base_url=url, verify=ssl.create_default_context(cafile=pki / "ca.pem"), follow_redirects=False
    ) as http:
        answer = http.post("/login", data={"token": fleet.plane.admin_token, "next": "/fleet"})
        assert answer.status_code == 303 and "Secure" in answer.headers["set-cookie"]
    with pytest.raises(httpx.HTTPError), httpx.Client(base_url=url.replace("https", "http")) as plain:
        plain.get("/login")


def test_contended_claims_are_shown_on_the_change(setup: dict[str, Any]) -> None:
    page = signed_in(setup).get(f"/changes/{setup['overlapping'].id}").text
    assert "module:shared" in page and "<h3>Contended</h3>" in page
    assert re.search(r"wanted <code>module:shared</code>, held by run <a href=\"/runs/run_\w+\">", page)


def test_a_harness_run_shows_its_tool_calls_receipt_packet_and_spend(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path
) -> None:
    fix = {"path": "calc.py", "edits": [{"old_text": "return a - b", "new_text": "return a + b"}]}
    model.extend(
        [
            fake.tool_use("read_file", {"path": "calc.py"}),
            fake.tool_use("edit_file", fix),
            fake.tool_use("complete_task", {"summary": "read it", "files_changed": ["calc.py"]}),
        ]
    )
    fleet.plane.extra_env.update(ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=API_KEY)
    fleet.start_plane("--http-listen", "127.0.0.1:0")
    fleet.plane.add_project("calc", str(calc_repo))
    fleet.agent("harness-agent")
    with fleet.plane.client() as client:
        change = client.submit_change(
            "calc",
            "read calc",
            [{"key": "read", "kind": "implement", "objective": "read calc.py", "complexity": "medium"}],
        )
        list(client.watch(change.id))
        run = client.get_run(client.get_change(change.id).tasks[0].latest_run_id)
    assert run.state == "succeeded" and run.cost_micros > 0
    console = Console(console_url(fleet))
    assert console.sign_in(fleet.plane.admin_token).status_code == 303
    page = console.get(f"/runs/{run.id}").text
    kinds = re.findall(r'<li class="k-(\w+)"', page)
    assert "tool_use" in kinds and "tool_result" in kinds and "result" in kinds
    assert "read_file {" in page and f'href="/runs/{run.id}/packet"' in page and run.context_hash in page
    assert '"tier"' in page  # the decision receipt as recorded, under its table
    receipt = re.search(r'<table class="receipt".*?</table>', page, re.S)
    assert receipt is not None
    rows = re.findall(r'<th scope="row">([\w ]+)</th><td>([\w. -]+)</td>', receipt.group(0))
    assert rows[:3] == [("Rules", "medium_complexity"), ("Classifier", "not asked"), ("Floor", "none")]
    assert ("Tier", "sonnet") in rows and ("Member", "anthropic") in rows and ("Agent", "harness-agent") in rows
    assert '<table class="members"' in page and "chosen" in page
    # The ChangeSet's patch: one block per line, nothing between them (a newline there is an empty line).
    patch = re.search(r'<pre class="diff"[^>]*>(.*?)</pre>', console.get(f"/changes/{change.id}").text, re.S)
    assert patch is not None
    assert '<span class="d-del">-    return a - b</span><span class="d-add">+    return a + b</span>' in patch.group(1)
    assert "\n" not in patch.group(1)
    packet = console.get(f"/runs/{run.id}/packet")
    assert packet.status_code == 200 and run.context_hash in packet.text and "calc.py" in packet.text
    spend = console.get("/spend").text
    assert "provider_month" in spend and "<svg" in spend and "calc" in spend and "no spend yet" not in spend


def test_a_failed_task_is_retried_and_a_meter_raised_from_the_console(setup: dict[str, Any]) -> None:
    """Retry on a failed Task's row and Raise meter on /spend, each offered only to whom the API allows
    it, each needing the CSRF field, each recording its event."""
    fleet: Fleet = setup["fleet"]
    with fleet.plane.client() as client:
        task = {
            "key": "flaky",
            "kind": "test",
            "objective": "flaky",
            "command": ["python", "-c", "raise SystemExit(3)"],
        }
        change = client.submit_change("web", "fails once", [task])
        list(client.watch(change.id))
        (failed,) = client.get_change(change.id).tasks
    assert failed.status == "failed"
    admin, submitter = signed_in(setup), signed_in(setup, "submitter")
    assert f'action="/tasks/{failed.id}/retry"' in admin.get(f"/changes/{change.id}").text
    assert "/retry" not in submitter.get(f"/changes/{change.id}").text  # the admin's Change: sam may not
    assert admin.http.post(f"/tasks/{failed.id}/retry", data={"csrf": "0" * 64}).status_code == 403
    refused = submitter.act(f"/tasks/{failed.id}/retry")
    assert refused.status_code == 403 and "run.manage" in refused.text
    done = admin.act(f"/tasks/{failed.id}/retry")
    assert done.status_code == 303 and done.headers["location"] == f"/changes/{change.id}"
    with fleet.plane.client() as client:
        (retried,) = client.list_events(change_id=change.id, kind="task.retried")
        wait_for(lambda: client.get_change(change.id).status == "failed", 30, what="the retried Task to fail again")
    assert retried.data["by"] == "admin" and retried.data["key"] == "flaky"

    assert "Raise meter</button>" in admin.get("/spend").text
    assert "Raise meter</button>" not in submitter.get("/spend").text
    assert submitter.act("/meters/raise", meter="provider_month", limit="30").status_code == 403
    bad = admin.act("/meters/raise", meter="provider_month", limit="lots")
    assert bad.status_code == 400 and "limit" in bad.text
    raised = admin.act("/meters/raise", meter="provider_month", limit="30")
    assert raised.status_code == 303 and raised.headers["location"] == "/spend"
    assert "$30.00" in admin.get("/spend").text
    with fleet.plane.client() as client:
        (event,) = client.list_events(kind="meter.raised")
    assert event.data["by"] == "admin" and event.data["limit"] == 30_000_000


def test_a_running_change_is_amended_from_the_console(setup: dict[str, Any]) -> None:
    """Amend on the Change page: the YAML `drover amend` reads, offered only to whom the API allows it,
    a bad file refused with its line, a good one adding the Task with its `change.amended` event."""
    fleet: Fleet = setup["fleet"]
    nap = {"key": "nap", "kind": "test", "objective": "nap", "command": ["sleep", "300"]}
    with fleet.plane.client() as client:
        change = client.submit_change("web", "naps", [nap])
        wait_for(lambda: client.get_change(change.id).tasks[0].status == "running", 60, what="the nap to run")
    admin, submitter = signed_in(setup), signed_in(setup, "submitter")
    amend = f'action="/changes/{change.id}/amend"'
    assert amend in admin.get(f"/changes/{change.id}").text
    assert amend not in submitter.get(f"/changes/{change.id}").text  # the admin's Change: sam may not
    good = "tasks:\n  - key: after\n    kind: test\n    objective: after the nap\n    command: ['true']\n"
    good += "    depends_on: [nap]\n"
    assert admin.http.post(f"/changes/{change.id}/amend", data={"csrf": "0" * 64, "amendment": good}).status_code == 403
    assert submitter.act(f"/changes/{change.id}/amend", amendment=good).status_code == 403
    bad = admin.act(f"/changes/{change.id}/amend", amendment="tasks:\n  - key: x\n    command: ls -l\n")
    assert bad.status_code == 400 and "amendment:3: tasks[0].command: an argv list, not a shell string" in bad.text
    taken = admin.act(
        f"/changes/{change.id}/amend", amendment="tasks:\n  - {key: nap, kind: t, objective: o, command: ['true']}\n"
    )
    assert taken.status_code == 400 and "tasks[0].key" in taken.text  # the API's refusal, naming the field
    done = admin.act(f"/changes/{change.id}/amend", amendment=good)
    assert done.status_code == 303 and done.headers["location"] == f"/changes/{change.id}"
    with fleet.plane.client() as client:
        assert [(t.key, list(t.depends_on)) for t in client.get_change(change.id).tasks] == [
            ("nap", []),
            ("after", ["nap"]),
        ]
        (event,) = client.list_events(change_id=change.id, kind="change.amended")
        client.cancel_change(change.id)
    assert event.data == {"by": "admin", "tasks": ["after"], "edges": [["after", "nap"]]}
    assert '<th scope="row" rowspan="1">after</th>' in admin.get(f"/changes/{change.id}").text
