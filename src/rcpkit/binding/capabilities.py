"""Honest §6 capabilities from the engine's own description (:meth:`Engine.describe`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rcpkit.engine.types import EngineDescription
from rcpkit.protocol.lifecycle import LOG_LEVELS
from rcpkit.protocol.vectors import ENCODINGS
from rcpkit.server.framework import Conformance

__all__ = ["capabilities", "conformance", "filter_capability", "score_scales"]


def capabilities(described: EngineDescription,
                 sparse_identity: str | None) -> dict[str, dict[str, Any]]:
    """What the described engine can do, as §6 capabilities.

    ``scoreFloor`` (§6.1) must hold whatever the query and the request's mode: dense scores
    are cosines of unit vectors (≥ -1), BM25 and every fused score are ≥ 0, ColBERT MaxSim
    is a mean of cosines (≥ -1), and recency/poison factors only shrink a score towards 0,
    so -1.0 bounds them all. A cross-encoder's logits have no floor: with one configured the
    floor is omitted. The scales differ per mode, hence ``scoreScale: unbounded``; the
    vendor key ``x-rcpkit-scores`` (§6.2) says what each mode's score is.
    """
    retrieve: dict[str, Any] = {
        "maxK": described.max_k, "modes": list(described.modes),
        "fusion": list(described.fusion_methods), "mmr": described.mmr,
        "rerankBuiltin": bool(described.rerank_methods), "units": list(described.units),
        "tokenBudget": described.token_budget, "confidence": described.confidence,
        "scoreScale": "unbounded", "defaultMode": described.default_mode,
        "deterministic": described.deterministic, "snapshots": described.snapshots}
    if "cross-encoder" not in described.rerank_methods:
        retrieve["scoreFloor"] = -1.0
    retrieve["x-rcpkit-scores"] = score_scales(described.default_fusion)
    caps: dict[str, dict[str, Any]] = {
        "retrieve": retrieve,
        "embed": {"dimension": described.embed_dimension, "identity": described.embed_identity,
                  "batchLimit": described.max_batch_inputs, "normalized": True,
                  "encodings": list(ENCODINGS)},
        "multiVector": {"dimension": described.embed_dimension,
                        "identity": described.embed_identity, "similarity": "cosine",
                        "encodings": list(ENCODINGS)},
        "index": {"writable": True, "chunking": described.chunking,
                  "contextual": described.contextual},
        "filter": filter_capability(described.filter_fields, described.filter_operators),
        "citations": {}, "streaming": {}, "feedback": {},
        "session": {"dedup": True, "ttlSeconds": described.session_ttl_seconds},
        "log": {"levels": list(LOG_LEVELS)},
    }
    if described.rerank_methods:
        caps["rerank"] = {"methods": list(described.rerank_methods),
                          "maxCandidates": described.max_batch_inputs}
    if sparse_identity is not None:
        caps["sparseEmbed"] = {"identity": sparse_identity}
    if described.pagination:
        caps["pagination"] = {}
    if described.read_only:
        del caps["index"]
    return caps


def score_scales(default_fusion: str) -> dict[str, dict[str, Any]]:
    """``Hit.score`` per mode before rerank (which scores on the reranker's own scale):
    dense is a cosine, sparse a BM25 score, and hybrid, by default, a relevance in [0, 1]
    (a convex combination of per-list normalised scores, §16.3) so that ``minScore`` (§7.7)
    means the same in every query; only ``rrf`` fusion gives rank-based values instead."""
    hybrid: dict[str, Any] = {"fusion": default_fusion}
    if default_fusion == "rrf":
        hybrid["scale"] = "rrf"
    else:
        hybrid.update(scale="normalised", min=0.0, max=1.0)
    return {"dense": {"scale": "cosine", "min": -1.0, "max": 1.0},
            "sparse": {"scale": "bm25", "min": 0.0}, "hybrid": hybrid}


def filter_capability(fields: Mapping[str, str], operators: Sequence[str]) -> dict[str, Any]:
    """§8 ``filter``: the schema's fields (sorted) and the operators."""
    return {"fields": dict(sorted(fields.items())), "operators": list(operators)}


def conformance(caps: Mapping[str, Any]) -> Conformance:
    """§14: L2 when the L1 surface and a real L2 selection (rerank, late interaction,
    streaming, pagination, reproducibility) are all there; L1 otherwise."""
    retrieve = caps["retrieve"]
    l1 = (set(retrieve["modes"]) >= {"dense", "sparse", "hybrid"}
          and "filter" in caps and "citations" in caps)
    l2 = (l1 and "rerank" in caps and "multiVector" in caps and "streaming" in caps
          and "pagination" in caps and "log" in caps
          and retrieve["deterministic"] and retrieve["snapshots"])
    return "L2" if l2 else "L1" if l1 else "L0"
