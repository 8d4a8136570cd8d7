"""Rerankers for the ``rerank`` method and the pipeline's rerank stage (§7.6, §3.1).

- :class:`LateInteractionReranker` — ``method: "colbert"``: MaxSim (§7.5) over an embedder's
  token vectors; works with the bundled MiniLM, no extra weights.
- :class:`CrossEncoderReranker` — ``method: "cross-encoder"``: a local ONNX cross-encoder that
  reads ``(query, passage)`` pairs and emits a relevance logit. No such model ships in a
  registry package, so it exists only when a user configures its files.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from rcpkit.engine.embedding import Embedder, OnnxModel

__all__ = ["CrossEncoderReranker", "LateInteractionReranker", "Reranker", "maxsim"]


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
    if len(query_tokens) == 0 or len(doc_tokens) == 0:
        return 0.0
    similarities = np.asarray(query_tokens, np.float64) @ np.asarray(doc_tokens, np.float64).T
    return float(similarities.max(axis=1).sum())


class LateInteractionReranker:
    """ColBERT-style late interaction (§7.5, §7.6 ``colbert``) over ``embedder`` token vectors.

    With ``normalise=True`` (default) the MaxSim sum is divided by the number of query tokens,
    giving a mean best-match cosine in [-1, 1] that is comparable across queries; ranking for
    one query is the same either way.
    """

    method = "colbert"

    def __init__(self, embedder: Embedder, *, normalise: bool = True) -> None:
        self.embedder = embedder
        self.normalise = normalise
        variant = "mean" if normalise else "sum"
        self.identity = f"maxsim-{variant}:{embedder.identity}"

    def score(self, query: str, passages: Sequence[str]) -> np.ndarray:
        """MaxSim of the query's token vectors against each passage's token vectors."""
        if not passages:
            return np.zeros(0, dtype=np.float64)
        query_tokens = self.embedder.token_embeddings([query], kind="query")[0]
        passage_tokens = self.embedder.token_embeddings(list(passages), kind="document")
        scores = np.array([maxsim(query_tokens, tokens) for tokens in passage_tokens])
        if self.normalise and len(query_tokens):
            scores /= len(query_tokens)
        return scores.astype(np.float64)


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
