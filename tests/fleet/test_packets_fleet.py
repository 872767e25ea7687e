"""Context Packets and claims through real processes and the scripted fake model."""

from __future__ import annotations

import hashlib
import json
import pathlib

from controlplane.domain import packet
from drover.testing import fake_anthropic as fake
from tests.conftest import API_KEY, Fleet, wait_for
from tests.fleet.test_metrics import endpoint, plane_log, scrape, value


def start(fleet: Fleet, model: fake.FakeAnthropic, repo: pathlib.Path, capacity: int = 1, *args: str) -> None:
    fleet.plane.extra_env.update(ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=API_KEY)
    fleet.start_plane(*args)
    fleet.plane.add_project("calc", str(repo))
    fleet.agent("packer", capacity=capacity)


def test_a_dependent_task_gets_its_dependency_s_intent_and_files_and_the_prompt_is_the_packet(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path
) -> None:
    model.extend(
        [
            fake.tool_use("edit_file", {"path": "calc.py", "edits": [{"old_text": "a - b", "new_text": "a + b"}]}),
            fake.tool_use("complete_task", {"summary": "add() adds now", "files_changed": ["calc.py"]}),
            fake.tool_use("complete_task", {"summary": "documented"}),
        ]
    )
    start(fleet, model, calc_repo)
    with fleet.plane.client() as client:
        change = client.submit_change(
            "calc",
            "fix and document",
            [
                {
                    "key": "fix",
                    "kind": "implement",
                    "objective": "fix add",
                    "complexity": "medium",
                    "files": ["calc.py"],
                    "resources": ["module:calc"],
                },
                {
                    "key": "docs",
                    "kind": "implement",
                    "objective": "document add",
                    "complexity": "medium",
                    "files": ["test_calc.py"],
                    "depends_on": ["fix"],
                },
            ],
        )
        list(client.watch(change.id))
        final = client.get_change(change.id)
        runs = {t.key: client.get_run(t.latest_run_id) for t in final.tasks}
        docs_packet = client.get_packet(runs["docs"].id)
        fix_packet = client.get_packet(runs["fix"].id)
        claimed = client.list_events(change_id=change.id, kind="claim.")
        compiled = {e.run_id: e.data for e in client.list_events(change_id=change.id, kind="packet.compiled")}
    assert final.status == "succeeded"
    # The first packet on the commit scanned the tree if the import graph the control plane started
    # building when the project was added was not ready yet; the second used the graph. Same commit,
    # same neighbours either way.
    assert compiled[runs["fix"].id]["neighbours"] in ("scan", "graph")
    assert compiled[runs["docs"].id]["neighbours"] == "graph"
    assert runs["fix"].context_hash == compiled[runs["fix"].id]["context_hash"]
    # The packet is stored by the hash of its canonical bytes, which the run keeps.
    stored = (
        fleet.plane.data_dir
        / "objects"
        / "context"
        / "calc"
        / change.id
        / final.tasks[1].id
        / f"{runs['docs'].context_hash}.json"
    ).read_bytes()
    assert hashlib.sha256(stored).hexdigest() == runs["docs"].context_hash
    assert json.loads(stored) == docs_packet and docs_packet["packet_version"] == 1
    # The dependency's intent and the files it touched are in the dependent's packet.
    intents = [i for i in docs_packet["items"] if i["source"] == "dependency_intent"]
    assert len(intents) == 1 and "add() adds now" in intents[0]["text"] and "calc.py" in intents[0]["text"]
    assert intents[0]["source_version"].startswith("cs_")
    declared = [i for i in docs_packet["items"] if i["source"] == "declared_file"]
    assert declared[0]["item_id"].startswith("file:test_calc.py@")
    neighbours = [i["item_id"] for i in fix_packet["items"] if i["source"] == "dependency_neighbour"]
    assert any(n.startswith("file:test_calc.py@") for n in neighbours)  # test_calc imports calc
    assert all({"item_id", "source", "source_version", "captured_at"} <= set(i) for i in docs_packet["items"])
    # The model received exactly the prompt rendered from that packet.
    docs_request = model.requests[-1].body
    assert docs_request["messages"][0]["content"][0]["text"] == packet.render_prompt(docs_packet)
    # Claims were taken on the Task's files and resources and released when each run ended.
    kinds = [e.kind for e in claimed]
    assert kinds.count("claim.acquired") == 2 and kinds.count("claim.released") == 2


def test_contended_resources_never_block_and_the_change_records_the_conflict(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path
) -> None:
    model.extend([fake.tool_use("complete_task", {"summary": "done"}) for _ in range(2)])
    start(fleet, model, calc_repo, capacity=2)
    users = {"kind": "implement", "complexity": "medium", "resources": ["table:users"]}
    with fleet.plane.client() as client:
        change = client.submit_change(
            "calc",
            "two on one table",
            [{"key": "left", "objective": "left", **users}, {"key": "right", "objective": "right", **users}],
        )
        list(client.watch(change.id))
        final = client.get_change(change.id)
        contended = client.list_events(change_id=change.id, kind="claim.contended")
        live = client.list_claims(change.id)
    assert final.status == "succeeded"  # a contended claim never blocks
    assert len(contended) == 1 and contended[0].data["resource"] == "table:users"
    assert [(c.task_a, c.task_b, list(c.resources)) for c in final.conflicts] == [("left", "right", ["table:users"])]
    assert live == []  # every run end released its claims


def test_a_long_failure_log_is_compacted_by_a_metered_haiku_call_before_the_retry(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path
) -> None:
    noisy = "x" * 30_000  # a tool result of ~7,500 tokens lands in the failed run's event log
    model.extend(
        [
            fake.tool_use("write_file", {"path": "noise.txt", "content": noisy}),
            fake.tool_use("read_file", {"path": "noise.txt"}),
            fake.tool_use("fail_task", {"reason": "gave up"}),
            fake.text("Tried writing and reading noise.txt; gave up without touching calc.py."),  # the compaction
            fake.tool_use("complete_task", {"summary": "second time lucky"}),
        ]
    )
    start(fleet, model, calc_repo)
    with fleet.plane.client() as client:
        change = client.submit_change(
            "calc", "retry", [{"key": "t", "kind": "implement", "objective": "t", "complexity": "medium"}]
        )
        list(client.watch(change.id))
        runs = sorted(client.list_runs(change_id=change.id), key=lambda r: r.attempt)
        retry_packet = client.get_packet(runs[1].id)
        usage = {m.kind: m for m in client.get_usage("agent-calls:")}
    compaction = model.requests[3].body
    assert compaction["model"] == "claude-haiku-5-5" and "noise" in compaction["messages"][0]["content"][0]["text"]
    [failure] = retry_packet["prior_failures"]
    assert "[compacted log]" in failure["text"] and "gave up without touching calc.py" in failure["text"]
    assert runs[1].outcome == "completed"
    assert usage["agent_calls_day"].used >= 5  # the compaction call was metered with the run's calls
    # The 30,000-character tool result arrived in pieces and is stored whole.
    tools = json.loads(
        (
            fleet.plane.data_dir
            / "objects"
            / "context"
            / "calc"
            / change.id
            / runs[0].task_id
            / f"tools-{runs[0].id}.json"
        ).read_text()
    )
    read = next(c for c in tools["calls"] if c["tool"] == "read_file")
    assert read["output"].startswith(noisy) and tools["pending"] == {}


NET = (
    "import time\n\n\ndef fetch_with_retry(url, attempts=5):\n"
    '    """Retry an HTTP request with exponential backoff: wait 1 s, 2 s, 4 s... between attempts."""\n'
    "    for attempt in range(attempts):\n        try:\n            return get(url)\n"
    "        except IOError:\n            time.sleep(2 ** attempt)\n"
)


def test_the_index_and_the_import_graph_are_built_when_the_project_is_added_and_runs_use_them(
    fleet: Fleet, model: fake.FakeAnthropic, tmp_path: pathlib.Path
) -> None:
    from tests.conftest import make_repo

    files = {"net.py": NET, "colors.py": "RED = '#ff0000'\nBLUE = '#0000ff'\n", "app.py": "import net\n"}
    repo = make_repo(tmp_path / "net", files)
    model.extend([fake.tool_use("complete_task", {"summary": "ok"})])
    start(fleet, model, repo, 1, "--metrics-listen", "127.0.0.1:0")
    url = wait_for(lambda: endpoint(plane_log(fleet.plane)), 30, what="the control plane's metrics endpoint")

    def warmed() -> dict[str, float] | None:  # before any run: the project was only added
        samples = scrape(url)
        done = value(samples, "drover_memory_index_files", project="calc", state="done")
        total = value(samples, "drover_memory_index_files", project="calc", state="total")
        graphs = value(samples, "drover_import_graph_build_seconds_count")
        return {"done": done, "total": total, "graphs": graphs} if done == total >= 3 and graphs >= 1 else None

    assert wait_for(warmed, 60, what="the index and the import graph") == {"done": 3, "total": 3, "graphs": 1}
    with fleet.plane.client() as client:
        change = client.submit_change(
            "calc",
            "retry an HTTP request with exponential backoff",
            [
                {
                    "key": "r",
                    "kind": "implement",
                    "objective": "retry an HTTP request with exponential backoff",
                    "complexity": "medium",
                }
            ],
        )
        list(client.watch(change.id))
        run_id = client.get_change(change.id).tasks[0].latest_run_id
        found = client.get_packet(run_id)
    semantic = [i for i in found["items"] if i["source"] == "semantic"]
    assert [i["item_id"].split("@")[0] for i in semantic] == ["semantic:net.py"], found.get("semantic_note")
    assert semantic[0]["score"] >= 0.6 and "fetch_with_retry" in semantic[0]["text"]
    # The index's size is a metric: at least one chunk for each of the three files.
    assert value(scrape(url), "drover_memory_index_items", project="calc") >= 3
    # The first packet found its neighbours in the graph built before the run.
    with fleet.plane.client() as client:
        compiled = client.list_events(run_id=run_id, kind="packet.compiled")
    assert compiled[0].data["neighbours"] == "graph"
