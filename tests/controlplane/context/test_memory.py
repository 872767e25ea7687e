"""Semantic memory with the real offline model: embeddings, incremental builds, queries, the daily
cap, waiting for a build, persistence, and a chroma server over a real socket."""

from __future__ import annotations

import json
import pathlib
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import chromadb
import numpy as np
import pytest
from chromadb.config import Settings

from controlplane.context.embedding import (
    EmbeddingModelMissing,
    OnnxEmbedder,
    find_model,
)
from controlplane.context.memory import (
    CHUNK_LINES,
    STALE_BUILD_SECONDS,
    Memory,
    collection_name,
)
from tests.conftest import ROOT, terminate, wait_for

ADD = 'def add(a, b):\n    """Add two numbers and return their sum."""\n    return a + b\n'
RELATED = {  # each scores at least 0.68 against "add two numbers" with int8 all-MiniLM-L6-v2
    "add.py": ADD,
    "plus.py": 'def plus(first, second):\n    """Add two numbers together."""\n    return first + second\n',
    "addition.py": "# Addition of two numbers.\ndef addition(a, b):\n    return a + b\n",
    "add_ints.py": 'def add_ints(a: int, b: int) -> int:\n    """Add two integer numbers."""\n    return a + b\n',
    "add_numbers.py": 'def add_numbers(a, b):\n    """Add two numbers."""\n    return a + b\n',
    "add_two.py": 'def add_two_numbers(x, y):\n    """Add the two numbers x and y."""\n    return x + y\n',
    "math_add.py": 'def add(a, b):\n    """Adds two numbers: add(2, 3) == 5."""\n    return a + b\n',
}
UNRELATED = {  # each below 0.5
    "weather.py": 'def forecast(city):\n    """The weather forecast for a city, e.g. sunny in Paris."""\n'
    "    return WEATHER[city]\n",
    "http.py": 'def fetch_with_retry(url, retries=3):\n    """Fetch url, retrying with exponential backoff."""\n'
    "    for attempt in range(retries):\n        try:\n            return requests.get(url)\n"
    "        except IOError:\n            time.sleep(2 ** attempt)\n",
    "subtract.py": 'def subtract(a, b):\n    """Subtract two numbers."""\n    return a - b\n',
}


def tree(texts: dict[str, str], blob: str = "1") -> dict[str, tuple[str, str]]:
    return {path: (f"{path}-{blob}", text) for path, text in texts.items()}


class CountingEmbedder(OnnxEmbedder):
    """Records every text it embeds."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.texts: list[str] = []

    def __call__(self, input: list[str]) -> Any:
        self.texts.extend(input)
        return super().__call__(input)


class GatedEmbedder(OnnxEmbedder):
    """Holds every call until `gate` is set: a build that is still running."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.entered, self.gate = threading.Event(), threading.Event()

    def __call__(self, input: list[str]) -> Any:
        self.entered.set()
        assert self.gate.wait(30)
        return super().__call__(input)


class FailingEmbedder(OnnxEmbedder):
    def __call__(self, input: list[str]) -> Any:
        raise RuntimeError("the model crashed")


@pytest.fixture(scope="module")
def model() -> tuple[pathlib.Path, pathlib.Path]:
    return find_model()


@pytest.fixture(scope="module")
def embedder(model: tuple[pathlib.Path, pathlib.Path]) -> OnnxEmbedder:
    return OnnxEmbedder(*model)


@pytest.fixture
def counting(model: tuple[pathlib.Path, pathlib.Path]) -> CountingEmbedder:
    return CountingEmbedder(*model)


@pytest.fixture
def client(tmp_path: pathlib.Path) -> Any:
    return chromadb.PersistentClient(str(tmp_path / "chroma"), settings=Settings(anonymized_telemetry=False))


def similarity(embedder: OnnxEmbedder, a: str, b: str) -> float:
    va, vb = embedder([a, b])
    return float(np.dot(va, vb))


@pytest.mark.parametrize(
    "query, related, unrelated",
    [
        ("how do I add two numbers", ADD, "the weather in Paris is sunny"),
        (
            "parse a JSON configuration file",
            'def load_config(path):\n    """Read the JSON config file at path."""\n    with open(path) as f:\n'
            "        return json.load(f)\n",
            ADD,
        ),
        ("retry an HTTP request with exponential backoff", UNRELATED["http.py"], "I like pizza with cheese."),
        ("A man is playing a guitar.", "A person plays a guitar.", "The cat sits on the mat."),
    ],
)
def test_related_texts_score_above_the_threshold_and_unrelated_ones(
    embedder: OnnxEmbedder, query: str, related: str, unrelated: str
) -> None:
    close, far = similarity(embedder, query, related), similarity(embedder, query, unrelated)
    assert close >= 0.6, close
    assert far < 0.3, far
    assert close - far > 0.3


def test_vectors_are_unit_length_and_in_input_order(model: tuple[pathlib.Path, pathlib.Path]) -> None:
    small_batches = OnnxEmbedder(*model, batch_size=2)
    texts = ["a much longer text about adding two numbers together in Python", "hi", ADD, "the weather", "x y z"]
    together = np.array(small_batches(texts))
    alone = np.array([small_batches([t])[0] for t in texts])
    assert together.shape == (5, 384)
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(together, alone, atol=1e-5)


def test_padding_is_to_the_longest_input_of_the_batch(embedder: OnnxEmbedder) -> None:
    short, long = "add two numbers", ADD * 30
    feed = embedder.encode([short, "a b"])
    assert feed["input_ids"].shape == (2, 5)  # [CLS] add two numbers [SEP], not the tokenizer.json's fixed 128
    assert set(feed) == {"input_ids", "attention_mask", "token_type_ids"}
    assert embedder.encode([short, long])["input_ids"].shape == (2, 256)  # truncated to max_length
    alone = np.array(embedder([short])[0])
    beside_long = np.array(embedder([short, long])[0])
    np.testing.assert_allclose(beside_long, alone, atol=1e-5)


def test_find_model_uses_the_configured_directory_or_says_how_to_provide_one(
    tmp_path: pathlib.Path, model: tuple[pathlib.Path, pathlib.Path]
) -> None:
    with pytest.raises(EmbeddingModelMissing, match=r"model\.onnx or tokenizer\.json.*model_dir"):
        find_model(str(tmp_path))
    shutil.copy(model[1], tmp_path / "tokenizer.json")
    with pytest.raises(EmbeddingModelMissing, match=r"has no model\.onnx\. .*optimum"):
        find_model(str(tmp_path))
    (tmp_path / "model.onnx").symlink_to(model[0])
    assert find_model(str(tmp_path)) == (tmp_path / "model.onnx", tmp_path / "tokenizer.json")
    assert model[0].name == "model.onnx" and model[1].name == "tokenizer.json"


def test_the_embedder_round_trips_through_chromas_config(embedder: OnnxEmbedder) -> None:
    rebuilt = OnnxEmbedder.build_from_config(embedder.get_config())
    assert not embedder.is_legacy()
    assert rebuilt.get_config() == embedder.get_config()
    assert OnnxEmbedder.name() == "drover-onnx"
    assert collection_name("api") == "drover-api"
    assert collection_name("my project/ü").startswith("drover-my-project-")


def test_a_rebuild_embeds_only_changed_files_and_drops_deleted_ones(client: Any, counting: CountingEmbedder) -> None:
    memory = Memory(client, counting)
    long_file = "".join(f"x_{i} = {i}\n" for i in range(CHUNK_LINES * 2 + 5))  # three chunks
    files = tree({**RELATED, "consts.py": long_file, "empty.py": ""})
    report = memory.build("p", "t1", files, [{"changeset_id": "cs1", "text": "Add numbers", "files": ["add.py"]}])
    assert report.embedded == len(RELATED) + 3 + 1 and report.deleted == 0
    assert len(counting.texts) == report.embedded
    assert memory.state("p").tree == "t1" and memory.state("p").building == ""

    counting.texts.clear()
    assert memory.build("p", "t1", files).embedded == 0  # a tree is indexed once
    files2 = {**files, "add.py": ("add.py-2", ADD.replace("a + b", "b + a"))}
    del files2["consts.py"]
    report = memory.build(
        "p",
        "t2",
        files2,
        [
            {"changeset_id": "cs1", "text": "Add numbers", "files": ["add.py"]},
            {"changeset_id": "cs2", "text": "Swap operands", "files": ["add.py"]},
        ],
    )
    assert counting.texts == [ADD.replace("a + b", "b + a"), "Swap operands"]
    assert (report.embedded, report.deleted) == (2, 1 + 3)
    ids = client.get_collection(collection_name("p")).get()["ids"]
    assert "file:add.py:0@add.py-2" in ids and "file:add.py:0@add.py-1" not in ids
    assert not [i for i in ids if i.startswith("file:consts.py:")]
    assert {"intent:cs1", "intent:cs2"} <= set(ids)


def test_a_build_reports_files_embedded_of_files_to_embed(client: Any, embedder: OnnxEmbedder) -> None:
    memory = Memory(client, embedder)
    long_file = "".join(f"x_{i} = {i}\n" for i in range(CHUNK_LINES * 2 + 5))  # three chunks, one file
    many = {f"m{i}.py": f"def f{i}():\n    return {i}\n" for i in range(300)}
    told: list[tuple[int, int]] = []
    memory.build("p", "t1", tree({**many, "consts.py": long_file, "empty.py": ""}), progress=lambda *a: told.append(a))
    assert told[0] == (0, 301) and told[-1] == (301, 301)  # the empty file has nothing to embed
    assert len(told) == 3 and [d for d, _ in told] == sorted(d for d, _ in told)
    told.clear()
    changed = tree({**many, "consts.py": long_file, "empty.py": ""}) | {"m3.py": ("m3.py-2", "X = 3\n")}
    memory.build("p", "t2", changed, progress=lambda *a: told.append(a))
    assert told == [(0, 1), (1, 1)]  # incremental: only the changed file


def test_deleted_files_and_files_outside_the_runs_tree_are_never_returned(client: Any, embedder: OnnxEmbedder) -> None:
    memory = Memory(client, embedder)
    memory.build("p", "t1", tree(RELATED))
    everything = set(RELATED)
    assert "add.py" in [m.path for m in memory.query("p", "t1", "add two numbers", everything, k=10)]
    assert "add.py" not in [m.path for m in memory.query("p", "t1", "add two numbers", everything - {"add.py"}, k=10)]

    memory.build("p", "t2", tree({k: v for k, v in RELATED.items() if k != "add.py"}))
    # Even a run whose tree still lists the file gets nothing of it: its chunks left the index.
    found = memory.query("p", "t2", "add two numbers", everything, k=10)
    assert "add.py" not in [m.path for m in found] and len(found) == len(RELATED) - 1
    assert found.tree == "t2"


def test_a_query_returns_at_most_k_files_above_the_threshold_one_per_path(client: Any, embedder: OnnxEmbedder) -> None:
    memory = Memory(client, embedder)
    two_chunks = ADD + "\n" * (CHUNK_LINES - 3) + ADD.replace("add", "add_again")
    files = {**RELATED, **UNRELATED, "twice.py": two_chunks}
    memory.build(
        "p",
        "t1",
        tree(files),
        [
            {"changeset_id": "cs1", "text": "Add two numbers", "files": ["add.py"]},
            {"changeset_id": "cs0", "text": "Add two numbers", "files": ["gone.py"]},
        ],
    )
    found = memory.query("p", "t1", "add two numbers", set(files))
    assert len(found) == 5 and found.reason == ""
    assert [m.similarity for m in found] == sorted((m.similarity for m in found), reverse=True)
    assert all(m.similarity >= 0.6 for m in found)

    everything = memory.query("p", "t1", "add two numbers", set(files), k=50)
    paths = [m.path for m in everything]
    assert len(paths) == len(set(paths))
    assert set(paths) == set(RELATED) | {"twice.py", "changeset:cs1"}  # cs0 touched only a file not in the tree
    twice = next(m for m in everything if m.path == "twice.py")
    assert (twice.kind, twice.line, twice.blob) == ("file", 1, "twice.py-1")
    intent = next(m for m in everything if m.kind == "intent")
    assert (intent.text, intent.changeset, intent.blob) == ("Add two numbers", "cs1", "")
    assert not memory.query("p", "t1", "the weather in Paris is sunny", set(RELATED))


def test_the_daily_cap_stops_queries_before_anything_is_embedded(client: Any, counting: CountingEmbedder) -> None:
    memory = Memory(client, counting)
    memory.build("p", "t1", tree(RELATED))
    counting.texts.clear()
    refused = memory.query("p", "t1", "add two numbers", set(RELATED), spend=lambda: False)
    assert refused == [] and "daily cap" in refused.reason and counting.texts == []
    assert memory.query("p", "t1", "add two numbers", set(RELATED), spend=lambda: True)
    assert counting.texts == ["add two numbers"]

    unindexed = memory.query("q", "t1", "add two numbers", set(RELATED), spend=lambda: pytest.fail("spent"))
    assert unindexed == [] and "not indexed" in unindexed.reason


def test_a_run_waits_for_the_build_of_its_tree_then_starts_without_it(
    client: Any, embedder: OnnxEmbedder, model: tuple[pathlib.Path, pathlib.Path]
) -> None:
    gated = GatedEmbedder(*model)
    reader = Memory(client, embedder)
    build = threading.Thread(target=Memory(client, gated).build, args=("p", "t1", tree(RELATED)))
    build.start()
    try:
        assert gated.entered.wait(30)
        assert reader.state("p").building == "t1"
        sleeps: list[float] = []
        assert reader.wait_for_index("p", "t1", sleep=sleeps.append) is False
        assert sleeps == [2.0] * 6
        # No build of its tree runs: nothing to wait for.
        assert reader.wait_for_index("p", "t0", sleep=lambda s: pytest.fail("waited")) is False
        # A marker an hour old is a build that died.
        later = time.time() + STALE_BUILD_SECONDS + 1
        assert reader.wait_for_index("p", "t1", sleep=lambda s: pytest.fail("waited"), now=lambda: later) is False

        sleeps.clear()

        def finish_on_third_wait(seconds: float) -> None:
            sleeps.append(seconds)
            if len(sleeps) == 3:
                gated.gate.set()
                build.join(30)

        assert reader.wait_for_index("p", "t1", sleep=finish_on_third_wait) is True
        assert sleeps == [2.0] * 3
    finally:
        gated.gate.set()
        build.join(30)
    assert reader.wait_for_index("p", "t1", sleep=lambda s: pytest.fail("waited")) is True


def test_a_failed_build_clears_its_marker_and_keeps_the_previous_tree(
    client: Any, embedder: OnnxEmbedder, model: tuple[pathlib.Path, pathlib.Path]
) -> None:
    Memory(client, embedder).build("p", "t1", tree(RELATED))
    with pytest.raises(RuntimeError, match="crashed"):
        Memory(client, FailingEmbedder(*model)).build("p", "t2", tree(UNRELATED))
    state = Memory(client, embedder).state("p")
    assert (state.tree, state.building) == ("t1", "")


def test_the_index_persists_across_processes(tmp_path: pathlib.Path) -> None:
    memory = Memory.open(tmp_path)
    memory.build("p", "t1", tree(RELATED))
    script = (
        "import json, sys; from controlplane.context.memory import Memory\n"
        "m = Memory.open(sys.argv[1])\n"
        "indexed = m.state('p').tree\n"
        "found = m.query('p', 't1', 'add two numbers', set(json.loads(sys.argv[2])))\n"
        "again = m.build('p', 't2', {k: tuple(v) for k, v in json.loads(sys.argv[3]).items()})\n"
        "print(json.dumps([indexed, [f.path for f in found], again.embedded]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path), json.dumps(list(RELATED)), json.dumps(tree(RELATED))],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        cwd=ROOT,
    )
    indexed, paths, embedded = json.loads(out.stdout.strip().splitlines()[-1])
    assert indexed == "t1" and len(paths) == 5 and set(paths) <= set(RELATED)
    assert embedded == 0  # same blobs in the next tree: nothing to embed again
    assert (tmp_path / "chroma").is_dir()


@pytest.fixture
def chroma_server(tmp_path: pathlib.Path) -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    chroma = shutil.which("chroma", path=str(pathlib.Path(sys.executable).parent)) or shutil.which("chroma")
    assert chroma, "the chroma command comes with chromadb"
    log = tmp_path / "chroma-server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [chroma, "run", "--path", str(tmp_path / "server"), "--host", "127.0.0.1", "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:

        def up() -> bool:
            assert proc.poll() is None, log.read_text(errors="replace")
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0

        wait_for(up, 30, what="the chroma server")
        yield f"http://127.0.0.1:{port}"
    finally:
        terminate(proc)


def test_a_fleet_shares_one_chroma_server(chroma_server: str, tmp_path: pathlib.Path) -> None:
    one, two = Memory.open(tmp_path / "a", url=chroma_server), Memory.open(tmp_path / "b", url=chroma_server)
    one.build("p", "t1", tree(RELATED))
    assert two.wait_for_index("p", "t1", sleep=lambda s: pytest.fail("waited")) is True
    assert [m.path for m in two.query("p", "t1", "add two numbers", set(RELATED), k=1)] == ["add_two.py"]
    assert not (tmp_path / "a" / "chroma").exists()
