"""Rerankers for the ``rerank`` method and the pipeline's rerank stage (§7.6, §3.1).

- :class:`LateInteractionReranker` — ``method: "colbert"``: MaxSim (§7.5) over an embedder's
  token vectors; works with the bundled MiniLM, no extra weights.
- :class:`CrossEncoderReranker` — ``method: "cross-encoder"``: a local ONNX cross-encoder that
  reads ``(query, passage)`` pairs and emits a relevance logit. No such model ships in a
  registry package, so it exists only when a user configures its files.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from rcpkit.engine.models.embedding import Embedder, OnnxEmbedder, OnnxModel

__all__ = ["CrossEncoderReranker", "LateInteractionReranker", "Reranker", "maxsim", "maxsim_many"]

QUERY_CACHE_BYTES = 4 * 2**20
"""Query token matrices kept for repeated queries (a §10 continuation re-runs the rerank)."""


class Reranker(Protocol):
    """Scores passages against a query; ``scores[i]`` belongs to ``passages[i]`` (§7.6)."""

    @property
    def method(self) -> str:
        """The §7.6 ``method`` this reranker implements: ``"colbert"`` or ``"cross-encoder"``."""
        ...

    @property
    def identity(self) -> str:
        """Pins the model (and scoring variant) behind the scores."""
        ...

    def score(self, query: str, passages: Sequence[str]) -> np.ndarray:
        """float64 relevance per passage, higher is better."""
        ...


def maxsim(query_tokens: np.ndarray, doc_tokens: np.ndarray) -> float:
    """§7.5 MaxSim: for each query token its best similarity to any document token, summed.

    Rows are used as given (dot product), so unit-norm rows make it a cosine MaxSim. An empty
    query or document scores 0.
    """
    return float(maxsim_many(query_tokens, [doc_tokens])[0])


def maxsim_many(query_tokens: np.ndarray, passages: Sequence[np.ndarray]) -> np.ndarray:
    """:func:`maxsim` of one query against each passage, with a single float32 product.

    Returns float64 scores aligned with ``passages``; empty passages (or query) score 0.
    """
    scores = np.zeros(len(passages), dtype=np.float64)
    lengths = np.array([len(tokens) for tokens in passages], dtype=np.int64)
    filled = np.flatnonzero(lengths)
    if len(query_tokens) == 0 or len(filled) == 0:
        return scores
    stacked = np.concatenate([np.asarray(passages[i], np.float32) for i in filled.tolist()])
    similarities = np.asarray(query_tokens, np.float32) @ stacked.T
    starts = np.concatenate([[0], np.cumsum(lengths[filled])[:-1]])
    best = np.maximum.reduceat(similarities, starts, axis=1)
    scores[filled] = best.sum(axis=0, dtype=np.float64)
    return scores


class _TokenCache:
    """Thread-safe LRU of token matrices keyed by text digest, bounded by their bytes."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @staticmethod
    def key(text: str) -> bytes:
        return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()

    def get(self, key: bytes) -> np.ndarray | None:
        with self._lock:
            matrix = self._entries.get(key)
            if matrix is not None:
                self._entries.move_to_end(key)
            return matrix

    def put(self, key: bytes, matrix: np.ndarray) -> None:
        if matrix.nbytes > self.max_bytes:
            return
        with self._lock:
            previous = self._entries.pop(key, None)
            if previous is not None:
                self._bytes -= previous.nbytes
            self._entries[key] = matrix
            self._bytes += matrix.nbytes
            while self._bytes > self.max_bytes:
                _, evicted = self._entries.popitem(last=False)
                self._bytes -= evicted.nbytes


class LateInteractionReranker:
    """ColBERT-style late interaction (§7.5, §7.6 ``colbert``) over ``embedder`` token vectors.

    With ``normalise=True`` (default) the MaxSim sum is divided by the number of query tokens,
    giving a mean best-match cosine in [-1, 1] that is comparable across queries; ranking for
    one query is the same either way.

    Made for the request path: passages keep only their first ``passage_tokens`` content
    tokens (an ONNX embedder is run with that window, which is most of the saving; None keeps
    the embedder's own limit), their token matrices are cached by text in an LRU bounded to
    ``cache_bytes``, and query matrices in a small LRU, so re-ranking a passage seen before (a
    popular chunk, a §10 continuation page) costs one matrix product. Uncached passages are
    encoded in one call, which batches them by length. Cached matrices are the float32 ones
    a fresh encoding gives (float16 storage pushed MaxSim of identical texts above 1).
    """

    method = "colbert"

    def __init__(
        self,
        embedder: Embedder,
        *,
        normalise: bool = True,
        passage_tokens: int | None = None,
        cache_bytes: int = 128 * 2**20,
    ) -> None:
        if passage_tokens is not None and passage_tokens < 1:
            raise ValueError("passage_tokens must be positive")
        self.embedder = embedder
        self.normalise = normalise
        self.passage_tokens = passage_tokens
        self._passage_embedder = embedder
        if passage_tokens is not None and isinstance(embedder, OnnxEmbedder):
            model = embedder.model
            self._passage_embedder = OnnxEmbedder(
                model.model_path, model.tokenizer_path, identity=embedder.identity,
                max_tokens=passage_tokens + 2,  # [CLS] and [SEP] are not content tokens
                batch_size=model.batch_size, pooling=embedder.pooling, threads=model.threads,
                dimension=embedder.dimension,
            )
        self._passages = _TokenCache(cache_bytes)
        self._queries = _TokenCache(QUERY_CACHE_BYTES)
        variant = "mean" if normalise else "sum"
        window = "" if passage_tokens is None else f"-{passage_tokens}tok"
        self.identity = f"maxsim-{variant}{window}:{embedder.identity}"

    def score(self, query: str, passages: Sequence[str]) -> np.ndarray:
        """MaxSim of the query's token vectors against each passage's token vectors."""
        if not passages:
            return np.zeros(0, dtype=np.float64)
        query_tokens = self._query_tokens(query)
        scores = maxsim_many(query_tokens, self._passage_tokens(passages))
        if self.normalise and len(query_tokens):
            scores /= len(query_tokens)
        return scores

    def _query_tokens(self, query: str) -> np.ndarray:
        key = _TokenCache.key(query)
        tokens = self._queries.get(key)
        if tokens is None:
            tokens = self.embedder.token_embeddings([query], kind="query")[0]
            self._queries.put(key, tokens)
        return tokens

    def _passage_tokens(self, passages: Sequence[str]) -> list[np.ndarray]:
        """Token matrices for ``passages``: from the cache, the rest encoded in one call."""
        keys = [_TokenCache.key(text) for text in passages]
        found = [self._passages.get(key) for key in keys]
        missing = list(dict.fromkeys(
            text for text, matrix in zip(passages, found, strict=True) if matrix is None))
        if missing:
            fresh = dict(zip(missing, self._passage_embedder.token_embeddings(
                missing, kind="document"), strict=True))
            for position, text in enumerate(passages):
                if found[position] is None:
                    # A copy, so an entry holds only the bytes the cache counts for it.
                    tokens = fresh[text][: self.passage_tokens].copy()
                    self._passages.put(keys[position], tokens)
                    found[position] = tokens
        return [matrix for matrix in found if matrix is not None]


class CrossEncoderReranker:
    """A local ONNX cross-encoder (§7.6 ``cross-encoder``): one logit per (query, passage) pair.

    The tokenizer encodes the pair as one sequence (``[CLS] q [SEP] p [SEP]`` with segment ids);
    the model's first output is ``(batch,)``, ``(batch, 1)`` or ``(batch, classes)``, in which
    case the last class (``relevant``) is the score. Raw logits are returned: order is what
    matters, and no calibration is implied.
    """

    method = "cross-encoder"

    def __init__(
        self,
        model_path: str | Path,
        tokenizer_path: str | Path,
        *,
        identity: str,
        max_tokens: int = 512,
        batch_size: int = 16,
        threads: int | None = None,
    ) -> None:
        self.identity = identity
        self.model = OnnxModel(
            model_path, tokenizer_path, max_tokens=max_tokens, batch_size=batch_size,
            threads=threads,
        )

    def score(self, query: str, passages: Sequence[str]) -> np.ndarray:
        """The model's relevance logit for each ``(query, passage)`` pair."""
        scores = np.zeros(len(passages), dtype=np.float64)
        for batch in self.model.batches([(query, passage) for passage in passages]):
            logits = batch.output.reshape(len(batch.positions), -1)
            scores[batch.positions] = logits[:, -1]
        return scores
