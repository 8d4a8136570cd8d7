"""Maximal Marginal Relevance: the diversify stage of the pipeline (§3.1, §7.7 ``diversify``)."""

from __future__ import annotations

import numpy as np

__all__ = ["mmr"]


def mmr(
    query_vec: np.ndarray,
    cand_vecs: np.ndarray,
    relevance: np.ndarray,
    k: int,
    lam: float,
) -> np.ndarray:
    """Pick ``k`` candidates greedily, trading relevance against redundancy.

    Each step takes the candidate maximising ``lam · rel[i] − (1 − lam) · max_j sim(i, j)`` over
    the already selected ``j``, where ``rel`` is ``relevance`` min-max scaled to [0, 1] and
    ``sim`` is the cosine of the candidate vectors. ``lam = 1`` is pure relevance order,
    ``lam = 0`` pure novelty. Equal values go to the lower index, so the result is deterministic.
    ``query_vec`` is accepted for callers without precomputed relevance; relevance is what is
    used. Returns candidate indices (int64) in selection order. O(k·n) after one normalisation.
    """
    del query_vec  # relevance already encodes the query; kept for the common MMR signature
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lam must lie in [0, 1], not {lam}")
    vectors = np.asarray(cand_vecs, dtype=np.float64)
    scores = np.asarray(relevance, dtype=np.float64).reshape(-1)
    if vectors.ndim != 2 or len(vectors) != len(scores):
        raise ValueError("cand_vecs must be (n, d) with one relevance score per row")
    count = min(k, len(scores))
    if count <= 0:
        return np.zeros(0, dtype=np.int64)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors = np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)
    spread = scores.max() - scores.min()
    scaled = (scores - scores.min()) / spread if spread > 0 else np.ones_like(scores)
    redundancy = np.full(len(scores), -np.inf)
    available = np.ones(len(scores), dtype=bool)
    chosen = np.empty(count, dtype=np.int64)
    for step in range(count):
        penalty = redundancy if step else np.zeros(len(scores))
        value = np.where(available, lam * scaled - (1.0 - lam) * penalty, -np.inf)
        best = int(np.argmax(value))  # argmax returns the first (lowest) index on ties
        chosen[step] = best
        available[best] = False
        redundancy = np.maximum(redundancy, vectors @ vectors[best])
    return chosen
