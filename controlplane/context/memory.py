"""Semantic memory: a chroma index per project of the canonical tree's files and ChangeSet intents.

One collection per project, `drover-<project>`, in cosine space, embedded with `OnnxEmbedder`.
A file is split into chunks of `CHUNK_LINES` (20) lines: the embedder truncates each to its
`max_length` (256 tokens), and 40 lines of this repository's Python are a median 510 tokens, so
longer chunks would be embedded by their first half only. The chunk alone is embedded: prefixing
its path lowered the similarity of related pairs by about 0.09 with all-MiniLM-L6-v2, which the
fixed 0.6 threshold cannot afford. Chunk ids are `file:<path>:<n>@<blob>`, so a file whose blob
id did not change keeps its vectors and a rebuild embeds only new and changed files. An intent's
id is `intent:<changeset id>`.

The collection's metadata holds the index state: `tree`, the tree the index reflects, and while a
build runs `building` (the tree being built) with `building_since` (epoch seconds). It lives in
chroma, not beside it, so every control plane sharing a chroma server sees it. Two builds of one
project at once are not excluded; both converge on the ids of their tree.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import chromadb
from chromadb.config import Settings

from controlplane.context.embedding import OnnxEmbedder, find_model

CHUNK_LINES = 20
ADD_BATCH = 256  # chunks embedded and added at a time
"""Chunks embedded and added per chroma call."""
STALE_BUILD_SECONDS = 3600.0
"""A `building` marker older than this is a build that died: nobody waits for it."""
FILE, INTENT = "file", "intent"

Spend = Callable[[], bool]
"""Consumes one query embedding from the daily cap; False when the cap is reached."""
Sleep = Callable[[float], None]


@dataclasses.dataclass(frozen=True)
class Match:
    """One related file (its best chunk) or ChangeSet intent.

    similarity: 1 - cosine distance. For an intent `path` is `changeset:<id>` and `blob` is "".
    line: the chunk's first line (1-based); 0 for an intent.
    """

    path: str
    similarity: float
    text: str
    blob: str
    kind: str
    line: int = 0
    changeset: str = ""


class Matches(list[Match]):
    """The matches of a query, best first. `reason` says why the query did not run ("" when it did)."""

    def __init__(self, matches: Iterable[Match] = (), reason: str = "", tree: str = "") -> None:
        super().__init__(matches)
        self.reason = reason
        self.tree = tree
        """The tree the index reflected when queried."""


@dataclasses.dataclass(frozen=True)
class IndexState:
    tree: str = ""
    """The tree the index reflects; "" before the first build."""
    building: str = ""
    """The tree a running build is indexing; "" when none runs."""
    building_since: float = 0.0


def files_done_after(wanted: Sequence[Chunk]) -> list[int]:
    """For each chunk (a file's chunks are adjacent), the files whose every chunk is at or before it."""
    out, done = [], 0
    for i, chunk in enumerate(wanted):
        path = chunk.metadata["path"] if chunk.metadata["kind"] == FILE else None
        if path is None or i + 1 == len(wanted) or wanted[i + 1].metadata["path"] != path:
            done += path is not None
        out.append(done)
    return out


@dataclasses.dataclass(frozen=True)
class BuildReport:
    tree: str
    embedded: int
    """Chunks and intents embedded by this build."""
    deleted: int
    seconds: float
    items: int = 0
    """Chunks and intents in the project's index after the build."""


@dataclasses.dataclass(frozen=True)
class Chunk:
    id: str
    text: str
    metadata: dict[str, Any]


def collection_name(project: str) -> str:
    """`drover-<project>`; a project name chroma would refuse is slugged and given a hash suffix."""
    name = f"drover-{project}"
    if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{1,510}[A-Za-z0-9]", name) and ".." not in name:
        return name
    slug = re.sub(r"[^A-Za-z0-9]+", "-", project).strip("-")[:100]
    return "-".join(filter(None, ("drover", slug, hashlib.sha256(project.encode()).hexdigest()[:10])))


def chunks(path: str, blob: str, tree: str, text: str) -> list[Chunk]:
    """The chunks of one file: `CHUNK_LINES` lines each; an empty file has none."""
    lines = text.splitlines(keepends=True)
    out = []
    for n, start in enumerate(range(0, len(lines), CHUNK_LINES)):
        body = "".join(lines[start : start + CHUNK_LINES])
        out.append(
            Chunk(
                f"file:{path}:{n}@{blob}",
                body,
                {"kind": FILE, "path": path, "blob": blob, "tree": tree, "changeset": "", "line": start + 1},
            )
        )
    return out


def intent_chunk(intent: Mapping[str, Any], tree_id: str) -> Chunk:
    """A ChangeSet's intent as a chunk of its own."""
    return Chunk(
        f"intent:{intent['changeset_id']}",
        str(intent["text"]),
        {
            "kind": INTENT,
            "path": "",
            "blob": "",
            "tree": tree_id,
            "changeset": str(intent["changeset_id"]),
            "line": 0,
            "files": "\n".join(intent.get("files") or ()),
        },
    )


class Memory:
    """The semantic index of each project's canonical tree, in chroma."""

    def __init__(self, client: Any, embedder: OnnxEmbedder | None = None) -> None:
        self.client = client
        self.embedder = embedder if embedder is not None else OnnxEmbedder(*find_model())

    @classmethod
    def open(cls, data_dir: str | Path, url: str = "", model_dir: str = "") -> Memory:
        """A PersistentClient in `<data_dir>/chroma`, or an HttpClient to the chroma server at `url`
        (http://host:port; https for TLS); the model from `model_dir`, else the packaged one."""
        settings = Settings(anonymized_telemetry=False)
        if url:
            parts = urllib.parse.urlsplit(url if "//" in url else f"http://{url}")
            https = parts.scheme == "https"
            client = chromadb.HttpClient(
                host=parts.hostname or "localhost",
                port=parts.port or (443 if https else 8000),
                ssl=https,
                settings=settings,
            )
        else:
            client = chromadb.PersistentClient(path=str(Path(data_dir) / "chroma"), settings=settings)
        return cls(client, OnnxEmbedder(*find_model(model_dir)))

    def _collection(self, project: str) -> Any:
        return self.client.get_or_create_collection(
            collection_name(project), metadata={"hnsw:space": "cosine"}, embedding_function=self.embedder
        )

    def state(self, project: str) -> IndexState:
        """The project's index state, read from chroma now."""
        return self._state(self._collection(project))

    @staticmethod
    def _state(collection: Any) -> IndexState:
        meta = collection.metadata or {}
        return IndexState(
            str(meta.get("tree", "")), str(meta.get("building", "")), float(meta.get("building_since", 0.0))
        )

    @staticmethod
    def _set_state(collection: Any, state: IndexState) -> None:
        # modify() replaces the metadata; chroma refuses hnsw:* keys there, the space is in the configuration.
        collection.modify(metadata=dataclasses.asdict(state))

    def build(
        self,
        project: str,
        tree_id: str,
        files: Mapping[str, tuple[str, str]],
        intents: Iterable[Mapping[str, Any]] = (),
        progress: Callable[[int, int], None] | None = None,
    ) -> BuildReport:
        """Index `tree_id`: `files` maps every path of the tree to (blob id, text); `intents` are
        {changeset_id, text, files} of the ChangeSets composed so far.

        Embeds only chunks whose ids (path and blob) are not indexed yet and intents not indexed yet,
        deletes the chunks of files that changed or left the tree, then records `tree_id` as indexed.
        A tree already indexed is not looked at again. `progress(files done, files to embed)` is told
        after each batch.
        """
        started = time.monotonic()
        collection = self._collection(project)
        previous = self._state(collection)
        if previous.tree == tree_id:
            return BuildReport(tree_id, 0, 0, time.monotonic() - started, collection.count())
        self._set_state(collection, IndexState(previous.tree, tree_id, time.time()))
        try:
            indexed = self._indexed_ids(collection)
            candidates = [chunk for path, (blob, text) in files.items() for chunk in chunks(path, blob, tree_id, text)]
            candidates += [intent_chunk(intent, tree_id) for intent in intents]
            keep = {chunk.id for chunk in candidates}
            wanted = [c for c in candidates if c.id not in indexed and (c.metadata["kind"] != INTENT or c.text.strip())]
            # Intents stay after their files leave the tree; a query skips those whose files all left.
            stale = [i for i in indexed if i not in keep and i.startswith("file:")]
            done_at = files_done_after(wanted)
            if progress is not None:
                progress(0, done_at[-1] if done_at else 0)
            for start in range(0, len(wanted), ADD_BATCH):
                batch = wanted[start : start + ADD_BATCH]
                collection.add(
                    ids=[c.id for c in batch],
                    documents=[c.text for c in batch],
                    metadatas=[c.metadata for c in batch],
                    embeddings=self.embedder([c.text for c in batch]),
                )
                if progress is not None:
                    progress(done_at[start + len(batch) - 1], done_at[-1])
            for start in range(0, len(stale), ADD_BATCH * 8):
                collection.delete(ids=stale[start : start + ADD_BATCH * 8])
        except BaseException:
            self._set_state(collection, IndexState(previous.tree))
            raise
        self._set_state(collection, IndexState(tree_id))
        return BuildReport(tree_id, len(wanted), len(stale), time.monotonic() - started, collection.count())

    @staticmethod
    def _indexed_ids(collection: Any, page: int = 5000) -> set[str]:
        ids: set[str] = set()
        while True:
            got = collection.get(include=[], limit=page, offset=len(ids))["ids"]
            ids.update(got)
            if len(got) < page:
                return ids

    def wait_for_index(
        self,
        project: str,
        tree_id: str,
        waits: int = 6,
        interval: float = 2.0,
        sleep: Sleep = time.sleep,
        now: Callable[[], float] = time.time,
    ) -> bool:
        """True once `tree_id` is indexed. While a build of `tree_id` runs, sleeps `interval` up to
        `waits` times; False when it is still running after that, or when no build of it runs."""
        for attempt in range(waits + 1):
            state = self.state(project)
            if state.tree == tree_id:
                return True
            running = state.building == tree_id and now() - state.building_since < STALE_BUILD_SECONDS
            if not running or attempt == waits:
                return False
            sleep(interval)
        return False

    def query(
        self,
        project: str,
        tree_id: str,
        text: str,
        tree_files: set[str],
        k: int = 5,
        min_similarity: float = 0.6,
        spend: Spend = lambda: True,
    ) -> Matches:
        """The at most `k` files and intents most similar to `text`, each at least `min_similarity`,
        one per path (its best chunk), only files in `tree_files` and intents touching one of them.

        `spend` is asked once, before the query is embedded; when it refuses nothing is embedded and
        the result is empty with a reason. `tree_id` is the asking run's tree; the result's `tree`
        is the tree the index reflects, which differs while a newer or older tree is indexed.
        """
        collection = self._collection(project)
        state = self._state(collection)
        if not state.tree:
            return Matches(reason=f"semantic memory: project {project} is not indexed yet")
        if not spend():
            return Matches(reason="semantic memory: the daily cap of query embeddings is reached", tree=state.tree)
        # Fetch more than k: several chunks of one file, and files not in the run's tree, are dropped.
        found = collection.query(
            query_texts=[text], n_results=max(4 * k, 20), include=["documents", "metadatas", "distances"]
        )
        matches: dict[str, Match] = {}
        for meta, document, distance in zip(
            found["metadatas"][0], found["documents"][0], found["distances"][0], strict=True
        ):
            similarity = 1.0 - float(distance)
            if similarity < min_similarity or len(matches) >= k:
                break
            if meta["kind"] == FILE:
                if meta["path"] not in tree_files:
                    continue
                key = str(meta["path"])
            else:
                touched = [f for f in str(meta.get("files", "")).split("\n") if f]
                if touched and not tree_files.intersection(touched):
                    continue
                key = f"changeset:{meta['changeset']}"
            if key not in matches:
                matches[key] = Match(
                    key,
                    similarity,
                    document or "",
                    str(meta.get("blob", "")),
                    str(meta["kind"]),
                    int(meta.get("line", 0)),
                    str(meta.get("changeset", "")),
                )
        return Matches(matches.values(), tree=state.tree)
