"""Whole harness runs: the real anthropic client in agentd against the scripted fake Messages API,
a real control plane, real git repositories and the bubblewrap sandbox."""

from __future__ import annotations

import json
import pathlib

import pygit2

from drover.testing import fake_anthropic as fake
from tests.conftest import API_KEY, Fleet


def start(fleet: Fleet, model: fake.FakeAnthropic, repo: pathlib.Path | None) -> None:
    fleet.plane.extra_env.update(ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=API_KEY)
    fleet.start_plane()
    fleet.plane.add_project("calc", str(repo) if repo else "")
    fleet.agent("harness-1")


CLASSIFIED = fake.text('{"tier": "sonnet", "confidence": 0.9}')  # the routing classifier's answer
FIX = [
    CLASSIFIED,
    fake.tool_use("list_files", {}),
    fake.tool_use("read_file", {"path": "calc.py"}, text="Let me look at calc.py."),
    fake.tool_use(
        "edit_file", {"path": "calc.py", "edits": [{"old_text": "return a - b", "new_text": "return a + b"}]}
    ),
    fake.tool_use("run_command", {"command": "python -m pytest -q"}),
    fake.tool_use(
        "complete_task",
        {"summary": "add adds", "files_changed": ["calc.py"], "tests_run": ["python -m pytest -q"]},
        usage={
            "input_tokens": 1000,
            "output_tokens": 200,
            "cache_creation_input_tokens": 500,
            "cache_read_input_tokens": 3000,
        },
    ),
]


def test_a_task_becomes_a_changeset(fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path) -> None:
    model.extend(FIX)
    start(fleet, model, calc_repo)
    with fleet.plane.client() as client:
        change = client.submit_change(
            "calc",
            "make add correct",
            [{"key": "fix", "kind": "implement", "objective": "add() must add"}],
            criteria=["tests pass"],
        )
        events = list(client.watch(change.id))
        final = client.get_change(change.id)
        run = client.get_run(final.tasks[0].latest_run_id)
        lines = list(client.run_logs(run.id))
        changesets = client.list_changesets(change.id)
        patch = client.get_patch(changesets[0].id)
    assert final.status == "succeeded", [e.kind for e in events]
    assert run.outcome == "completed" and run.model_calls == 5 and run.cost_micros > 0
    # The ChangeSet: a branch in the project repository and the right patch.
    [cs] = changesets
    origin = pygit2.Repository(str(calc_repo))
    assert origin.branches[cs.branch].target == pygit2.Oid(hex=cs.commit)
    assert cs.branch == f"drover/{change.id}/{final.tasks[0].id}" and list(cs.own_files) == ["calc.py"]
    assert "-    return a - b\n+    return a + b" in patch
    assert final.candidate_branch == f"drover/{change.id}/candidate"
    assert final.candidate_branch in origin.branches
    # Run events: text, tool_use, tool_result and result, in order, each step once.
    stream = [json.loads(line) for ln in lines if ln.stream == "event" for line in ln.text.splitlines()]
    kinds = [e["kind"] for e in stream]
    assert kinds.count("tool_use") == 5 and kinds.count("tool_result") == 5 and kinds[-1] == "result"
    assert {"kind": "text", "text": "Let me look at calc.py."}.items() <= stream[kinds.index("text")].items()
    pytest_result = next(e for e in stream if e["kind"] == "tool_result" and e["tool"] == "run_command")
    assert "1 passed" in pytest_result["text"] and not pytest_result["error"]
    steps = [e["step"] for e in stream]
    assert steps == sorted(steps)
    # The fake saw the real client: bearer auth, SDK retries off, prompt caching, calls remaining.
    requests = model.requests
    assert len(requests) == 6 and requests[0].headers["authorization"] == f"Bearer {API_KEY}"
    assert requests[0].body["model"] == "claude-haiku-5-5" and requests[0].body["max_tokens"] == 100  # the classifier
    requests = requests[1:]
    first = requests[0].body
    assert first["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert first["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert first["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    last_result = requests[-1].body["messages"][-1]["content"][0]
    assert last_result["type"] == "tool_result" and last_result["content"].endswith("[28 model calls remain]")
    # Full tool inputs and outputs in the object store.
    objects = fleet.plane.data_dir / "objects" / "context" / "calc" / change.id / final.tasks[0].id
    tools = json.loads((objects / f"tools-{run.id}.json").read_text())
    assert [c["tool"] for c in tools["calls"]] == [
        "list_files",
        "read_file",
        "edit_file",
        "run_command",
        "complete_task",
    ]
    assert "def add(a, b)" in tools["calls"][1]["output"]
    # The API key never reached the database, the object store or any streamed line.
    assert API_KEY.encode() not in (fleet.plane.data_dir / "drover.db").read_bytes()
    for path in (fleet.plane.data_dir / "objects").rglob("*"):
        if path.is_file():
            assert API_KEY.encode() not in path.read_bytes()
    assert all(API_KEY not in ln.text for ln in lines)
