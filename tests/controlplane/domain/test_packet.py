"""The Context Packet compiler (seed 000): determinism across processes, order, trimming, rendering."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys

import pytest

from controlplane.domain.packet import (
    CONVENTION,
    LIMIT_TOKENS,
    SOURCES,
    CompiledPacket,
    Item,
    PacketInputs,
    canonical_json,
    compile_packet,
    estimate_tokens,
    file_list_summary,
    render_prompt,
)
from drover.errors import InvalidArgument
from tests.conftest import ROOT

pytestmark = pytest.mark.timeout(60)

# Built the same way in this process and in two other processes (different PYTHONHASHSEED). The
# items and the repository files pass through sets, so their order differs between processes.
INPUTS = r"""
from controlplane.domain.packet import Item, PacketInputs
from controlplane.context.retrieval import (DictTree, conventions, declared_items, dependency_neighbours, failure_items,
                                    intent_items, neighbour_items, resource_owner_items)

AT = "2025-01-02T03:04:05+00:00"
files = {f"app/mod{n}.py": f"from app import mod{n + 1}\n" for n in range(30)}
files |= {"app/__init__.py": "", "app/core.py": "import app.mod3\nVALUE = 'é ☃'\n",
          "app/api.py": "from app.core import VALUE\n", "README.md": "# Demo\nUse tabs. ünïcode\n",
          "CONTRIBUTING.md": "Run pytest.\n"}
tree = DictTree({p: files[p] for p in {*files}})
declared = ["app/core.py", "app/new.py"]
items = {*declared_items(tree, declared, AT), *neighbour_items(tree, dependency_neighbours(tree, declared), AT),
         *resource_owner_items([{"resource": "db:users", "task_id": "t0", "task_key": "schema",
                                 "changeset_id": "cs-9", "summary": "added users", "files": ["app/db.py"]}], AT),
         *intent_items([{"relation": "dependency", "task_id": "t1", "task_key": "api", "changeset_id": None,
                         "intent": "expose VALUE", "files": ["app/api.py"]},
                        {"relation": "nearby", "task_id": "t2", "task_key": "ui", "intent": "show VALUE"}], AT),
         *failure_items([{"run_id": "r7", "task_key": "core", "attempt": 1, "tier": "haiku",
                          "outcome": "failed", "reason": "tests failed", "log": "AssertionError"}], AT),
         Item("semantic:app/mod9.py@x", "semantic", 6000, "x", AT, "app/mod9.py", "like mod9", 0.71),
         Item("semantic:app/mod8.py@y", "semantic", 6001, "y", AT, "app/mod8.py", "like mod8", 0.65)}
inputs = PacketInputs(
    change={"goal": "Show VALUE everywhere", "criteria": ["VALUE shown", "tests pass"], "invariants": ["no new deps"]},
    task={"key": "core", "kind": "implement", "objective": "Export VALUE from app.core", "resources": ["db:users"],
          "risk": "low", "files": declared},
    canonical_commit="0123456789abcdef0123456789abcdef01234567", file_list=tuple({*tree.files()}),
    conventions=tuple(conventions(tree, AT)),
    stacked_changesets=({"changeset_id": "cs-9", "task_key": "schema", "commit": "abc", "files": ["app/db.py"]},),
    prior_failures=tuple(failure_items([{"run_id": "r6", "task_key": "core", "attempt": 1, "tier": "haiku",
                                         "outcome": "run_call_cap", "reason": "ran out of calls"}], AT)),
    tools=("list_files", "read_file", "edit_file", "complete_task", "fail_task"),
    budget={"usd": 1.25, "calls": 32}, items=tuple(items), semantic_note="")
"""


def build_inputs() -> PacketInputs:
    namespace: dict[str, object] = {}
    exec(INPUTS, namespace)
    inputs = namespace["inputs"]
    assert isinstance(inputs, PacketInputs)
    return inputs


def test_same_inputs_give_the_same_bytes_and_hash_across_processes() -> None:
    here = compile_packet(build_inputs())
    assert here.sha256 == hashlib.sha256(here.data).hexdigest()
    script = INPUTS + (
        "\nimport hashlib\nfrom controlplane.domain.packet import compile_packet\n"
        "c = compile_packet(inputs)\nprint(c.sha256, hashlib.sha256(c.data).hexdigest(), len(c.data))\n"
    )
    seen = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", script],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
            cwd=ROOT,
        )
        seen.append(out.stdout.split())
    assert seen == [[here.sha256, here.sha256, str(len(here.data))]] * 2
    # the sets really were iterated in different orders in the two processes
    order = "\nprint(','.join(i.item_id for i in inputs.items))\n"
    orders = {
        subprocess.run(
            [sys.executable, "-c", INPUTS + order],
            env={**os.environ, "PYTHONHASHSEED": s},
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout
        for s in ("1", "2", "3")
    }
    assert len(orders) > 1


def test_compiling_twice_in_one_process_is_identical() -> None:
    a, b = compile_packet(build_inputs()), compile_packet(build_inputs())
    assert (a.data, a.sha256, a.dropped) == (b.data, b.sha256, b.dropped)


@pytest.mark.parametrize(
    "change",
    [
        lambda i: dataclasses.replace(i, change={**i.change, "goal": "Show VALUE nowhere"}),
        lambda i: dataclasses.replace(i, task={**i.task, "risk": "high"}),
        lambda i: dataclasses.replace(i, canonical_commit="f" * 40),
        lambda i: dataclasses.replace(i, file_list=i.file_list + ("app/extra.py",)),
        lambda i: dataclasses.replace(i, tools=i.tools[:-1]),
        lambda i: dataclasses.replace(i, budget={"usd": 1.5, "calls": 32}),
        lambda i: dataclasses.replace(i, items=i.items[1:]),
        lambda i: dataclasses.replace(
            i,
            items=tuple(
                dataclasses.replace(x, text=x.text + " ") if x.source == "declared_file" else x for x in i.items
            ),
        ),
        lambda i: dataclasses.replace(
            i, items=tuple(dataclasses.replace(x, captured_at="2025-01-02T03:04:06+00:00") for x in i.items)
        ),
        lambda i: dataclasses.replace(i, semantic_note="index still building: no semantic items"),
    ],
    ids=[
        "goal",
        "risk",
        "commit",
        "file_list",
        "tools",
        "budget",
        "one item fewer",
        "item text",
        "captured_at",
        "semantic_note",
    ],
)
def test_a_changed_input_changes_the_hash(change) -> None:  # type: ignore[no-untyped-def]
    inputs = build_inputs()
    assert compile_packet(change(inputs)).sha256 != compile_packet(inputs).sha256


def test_the_bytes_are_canonical_json_of_packet_version_1() -> None:
    compiled = compile_packet(build_inputs())
    packet = json.loads(compiled.data)
    assert packet == compiled.packet and packet["packet_version"] == 1 and packet["limit_tokens"] == LIMIT_TOKENS
    assert compiled.data == json.dumps(packet, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8"
    )
    assert "é ☃".encode() in compiled.data  # UTF-8, not \u escapes
    assert compiled.tokens == estimate_tokens(compiled.data) <= LIMIT_TOKENS


@pytest.mark.parametrize(
    "text, tokens",
    [
        ("", 0),
        ("a", 1),
        ("abcd", 1),
        ("abcde", 2),
        ("x" * 400, 100),
        ("é" * 8, 4),  # UTF-8 bytes, not characters: 16 bytes
        ("☃", 1),  # 3 bytes
        (b"abcdefgh", 2),
    ],
)
def test_estimate_tokens(text: str | bytes, tokens: int) -> None:
    assert estimate_tokens(text) == tokens


AT = "2025-01-02T03:04:05+00:00"


def item(item_id: str, source: str, priority: int, text: str = "x", score: float | None = None) -> Item:
    return Item(item_id, source, priority, f"v-{item_id}", AT, item_id, text, score)


def inputs_with(items: list[Item], **fixed: object) -> PacketInputs:
    return PacketInputs(
        change={"goal": "G", "criteria": ["c"], "invariants": []},
        task={"key": "k", "kind": "implement", "objective": "O", "resources": [], "risk": "low"},
        canonical_commit="c0",
        items=tuple(items),
        **fixed,
    )  # type: ignore[arg-type]


def test_retrieval_order_declared_neighbours_owners_intents_failures_semantic() -> None:
    items = [
        item("sem", "semantic", 4000, score=0.9),
        item("fail", "prior_failure", 3000),
        item("near", "nearby_intent", 3000),
        item("dep", "dependency_intent", 3000),
        item("owner", "resource_owner", 2000),
        item("nb2", "dependency_neighbour", 1001),
        item("nb1", "dependency_neighbour", 1000),
        item("decl2", "declared_file", 1),
        item("decl1", "declared_file", 0),
    ]
    packet = compile_packet(inputs_with(items)).packet
    assert [i["item_id"] for i in packet["items"]] == [
        "decl1",
        "decl2",
        "nb1",
        "nb2",
        "owner",
        "dep",
        "near",
        "fail",
        "sem",
    ]


def test_equal_priorities_order_by_source_then_item_id() -> None:
    items = [
        item("b", "semantic", 5),
        item("z", "declared_file", 5),
        item("a", "declared_file", 5),
        item("m", "resource_owner", 5),
    ]
    assert [i["item_id"] for i in compile_packet(inputs_with(items)).packet["items"]] == ["a", "z", "m", "b"]


def test_a_repeated_item_id_keeps_its_most_important_place() -> None:
    items = [
        item("file:a.py@1", "dependency_neighbour", 1000, "neighbour copy"),
        item("file:a.py@1", "declared_file", 0, "declared copy"),
    ]
    packet = compile_packet(inputs_with(items)).packet
    assert [(i["source"], i["text"]) for i in packet["items"]] == [("declared_file", "declared copy")]


def sized(limit: int, items: list[Item], **fixed: object) -> CompiledPacket:
    return compile_packet(inputs_with(items, **fixed), limit_tokens=limit)


def test_over_the_limit_semantic_items_go_first_lowest_score_first() -> None:
    body = "y" * 400  # about 100 tokens each
    items = [
        item("decl", "declared_file", 0, body),
        item("nb", "dependency_neighbour", 1000, body),
        item("fail", "prior_failure", 3000, body),
        item("sem-high", "semantic", 0, body, score=0.9),  # a small priority number does not save it
        item("sem-low", "semantic", 4000, body, score=0.6),
    ]
    full = sized(999, items)  # three digits of limit, like the limits below
    assert full.dropped == () and 100 < full.tokens < 999
    one = sized(full.tokens - 1, items)
    assert one.dropped == ("sem-low",) and one.tokens <= full.tokens - 1
    two = sized(full.tokens - 150, items)
    assert two.dropped == ("sem-low", "sem-high")
    three = sized(full.tokens - 350, items)
    assert three.dropped == ("sem-low", "sem-high", "fail")
    assert [i["item_id"] for i in three.packet["items"]] == ["decl", "nb"]
    assert three.packet["dropped"] == ["sem-low", "sem-high", "fail"]


def test_then_the_lowest_priority_items_go_and_no_more_than_needed() -> None:
    items = [item(f"decl{n}", "declared_file", n, "z" * 200) for n in range(10)]
    full = sized(10**6, items).packet

    def tokens_keeping(k: int, limit: int) -> int:  # the oracle: the packet built by hand with k items kept
        packet = {
            **full,
            "limit_tokens": limit,
            "items": full["items"][:k],
            "dropped": [f"decl{n}" for n in reversed(range(k, 10))],
        }
        return estimate_tokens(canonical_json(packet))

    for limit in range(tokens_keeping(0, 100), tokens_keeping(10, 1000) + 2, 7):
        compiled = sized(limit, items)
        kept = [i["item_id"] for i in compiled.packet["items"]]
        assert kept == [f"decl{n}" for n in range(len(kept))]  # a prefix: the least important went first
        assert compiled.dropped == tuple(f"decl{n}" for n in reversed(range(len(kept), 10)))
        assert compiled.tokens == tokens_keeping(len(kept), limit) <= limit
        assert len(kept) == 10 or tokens_keeping(len(kept) + 1, limit) > limit


def test_the_fixed_part_is_always_kept_even_over_the_limit() -> None:
    conv = Item("file:README.md@r", CONVENTION, 0, "r", AT, "README.md", "conventions " * 50)
    failure = Item("failure:r1", "prior_failure", 3000, "r1", AT, "attempt 1", "it broke " * 50)
    items = [item("decl", "declared_file", 0, "d" * 100), item("sem", "semantic", 4000, "s", 0.8)]
    compiled = sized(
        10,
        items,
        conventions=(conv,),
        prior_failures=(failure,),
        tools=("read_file",),
        budget={"usd": 2.0, "calls": 16},
        file_list=("a.py", "b.py"),
    )
    packet = compiled.packet
    assert compiled.dropped == ("sem", "decl") and packet["items"] == []
    assert compiled.tokens > 10  # the fixed part alone is over: it is kept anyway
    assert packet["change"]["goal"] == "G" and packet["task"]["objective"] == "O"
    assert [c["item_id"] for c in packet["conventions"]] == ["file:README.md@r"]
    assert [f["item_id"] for f in packet["prior_failures"]] == ["failure:r1"]
    assert packet["tools"] == ["read_file"] and packet["budget"] == {"usd": 2.0, "calls": 16}
    assert packet["file_list"]["paths"] == ["a.py", "b.py"]


def test_the_file_list_is_bounded_with_a_note_declared_directories_first() -> None:
    paths = [f"pkg{n // 100:03d}/mod{n % 100:03d}.py" for n in range(10_000)]
    summary = file_list_summary(reversed(paths), declared=["pkg077/mod005.py"])
    assert summary["total"] == 10_000 and summary["omitted"] == 10_000 - len(summary["paths"]) > 9000
    assert summary["note"] == f"{summary['omitted']} more files not shown; list_files lists them"
    assert summary["paths"] == sorted(summary["paths"])
    assert {f"pkg077/mod{n:03d}.py" for n in range(100)} <= set(summary["paths"])
    assert summary["paths"][0] == "pkg000/mod000.py"  # then the others, in path order
    small = file_list_summary(["b.py", "a.py", "a.py"])
    assert small == {"total": 2, "paths": ["a.py", "b.py"], "omitted": 0, "note": ""}


def test_every_item_carries_its_provenance() -> None:
    packet = compile_packet(build_inputs()).packet
    for entry in packet["items"] + packet["conventions"] + packet["prior_failures"]:
        assert entry["item_id"] and entry["source"] and entry["source_version"]
        assert entry["captured_at"] == "2025-01-02T03:04:05+00:00"
    ids = [i["item_id"] for i in packet["items"]]
    order = [SOURCES.index(i["source"]) for i in packet["items"]]  # retrieval's priorities give seed 000's order
    assert order == sorted(order) and set(order) == set(range(len(SOURCES)))
    text = "import app.mod3\nVALUE = 'é ☃'\n".encode()
    core = "file:app/core.py@" + hashlib.sha1(b"blob %d\0" % len(text) + text).hexdigest()
    assert ids[:2] == [core, "file:app/new.py@absent"]
    assert "changeset:cs-9" in ids and "intent:t1" in ids and "failure:r7" in ids
    assert ids[-2:] == ["semantic:app/mod9.py@x", "semantic:app/mod8.py@y"]


@pytest.mark.parametrize(
    "bad, field",
    [
        (lambda i: dataclasses.replace(i, items=(item("a", "guess", 0),)), "items"),
        (lambda i: dataclasses.replace(i, items=(item("a", CONVENTION, 0),)), "items"),
        (lambda i: dataclasses.replace(i, conventions=(item("a", "declared_file", 0),)), "conventions"),
        (lambda i: dataclasses.replace(i, prior_failures=(item("a", "semantic", 0),)), "prior_failures"),
        (lambda i: dataclasses.replace(i, items=({"item_id": "a"},)), "items"),
        (lambda i: dataclasses.replace(i, change={"criteria": []}), "change"),
        (lambda i: dataclasses.replace(i, task={"key": "k", "kind": "implement"}), "task"),
    ],
)
def test_invalid_inputs_are_refused(bad, field: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidArgument) as err:
        compile_packet(bad(inputs_with([])))
    assert err.value.field == field


def test_nan_and_a_bad_limit_are_refused() -> None:
    with pytest.raises(ValueError):
        compile_packet(inputs_with([], budget={"usd": float("nan")}))
    with pytest.raises(InvalidArgument):
        compile_packet(inputs_with([]), limit_tokens=0)


def test_render_prompt_is_made_from_the_packet_alone() -> None:
    compiled = compile_packet(build_inputs(), limit_tokens=900)
    prompt = render_prompt(compiled.packet)
    assert prompt == render_prompt(json.loads(compiled.data)) == render_prompt(json.loads(compiled.data))
    assert prompt.startswith("# Change: Show VALUE everywhere\n")
    for text in (
        "- VALUE shown",
        "- no new deps",
        "# Your Task: core (implement, risk low)",
        "Export VALUE from app.core",
        "Resources: db:users",
        "- app/new.py",
        "Tools: list_files, read_file, edit_file, complete_task, fail_task",
        "Budget: calls 32, usd 1.25",
        "Use tabs. ünïcode",
        '"changeset_id": "cs-9"',
        "ran out of calls",
        "Repository at 0123456789abcdef0123456789abcdef01234567: 35 files",
    ):
        assert text in prompt
    for entry in compiled.packet["items"]:
        assert (
            f"item: {entry['item_id']} | source: {entry['source']} | version: {entry['source_version']} | "
            f"captured: {entry['captured_at']}"
        ) in prompt
        assert entry["text"] in prompt
    assert compiled.dropped
    assert f"Left out to fit 900 tokens (read them if you need them): {', '.join(compiled.dropped)}" in prompt
    by_id = {i.item_id: i for i in build_inputs().items}
    for dropped in compiled.dropped:  # dropped items are named, their text is not rendered
        assert by_id[dropped].text not in prompt


def test_render_prompt_changes_only_with_the_packet_and_fences_hold() -> None:
    fenced = item("decl", "declared_file", 0, "```python\nx = 1\n```")
    packet = compile_packet(inputs_with([fenced], semantic_note="index still building: no semantic items")).packet
    prompt = render_prompt(packet)
    assert "````\n```python\nx = 1\n```\n````" in prompt
    assert "Semantic memory: index still building: no semantic items" in prompt
    packet["task"]["objective"] = "Another objective"
    assert "Another objective" in render_prompt(packet) and "Another objective" not in prompt
