"""The pure ranking stages after recall (§3): fuse, rerank, adjust (recency, poison),
diversify (MMR), one hit per document, token packing, and the hit of a stored chunk.

Scores (§4.6): cosine in ``dense`` mode, BM25 in ``sparse``, the fused score in ``hybrid``,
the reranker's score after ``rerank``; recency (blended with relevance) and the feedback
poison policy scale them down, and MMR caps them so they never increase down the list.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from rcpkit import fusion
from rcpkit.engine.errors import InvalidInput
from rcpkit.engine.models.rerank import Reranker
from rcpkit.engine.search.mmr import mmr
from rcpkit.engine.search.planner import Plan
from rcpkit.engine.search.recall import Candidate
from rcpkit.engine.store import ChunkRecord
from rcpkit.engine.text import count_tokens
from rcpkit.engine.types import Citation, Hit, SearchRequest

__all__ = ["adjust", "best_per_document", "diversify", "fuse", "hit", "hit_id", "pack",
           "record_hit", "rerank"]

# Theoretical score minima for convex fusion (§6.1 scoreFloor, §16.3): cosine, BM25.
_FLOORS = {"dense": -1.0, "sparse": 0.0}
_MS_PER_DAY = 86_400_000


def fuse(request: SearchRequest, candidates: list[Candidate], *, default_method: str,
         default_alpha: float) -> list[Candidate]:
    """One ranked list: dense or sparse alone, or the two fused (§16.3).

    Every fusion but ``rrf`` is a weighted sum of per-list scores normalised into [0, 1]
    with weights summing to 1, so the fused score is a relevance in [0, 1]: explicit
    ``fusion.weights`` win, else ``(alpha, 1 - alpha)`` (dense, sparse), the request's
    alpha or the engine's tuned default.
    """
    if request.mode != "hybrid":
        return sorted(candidates, key=lambda c: (-c.score, c.rowid))
    by_key = {str(c.rowid): c for c in candidates}
    lists = [sorted(((str(c.rowid), c.scores[name]) for c in candidates
                     if name in c.scores), key=lambda item: (-item[1], int(item[0])))
             for name in ("dense", "sparse")]
    weights = None
    if request.weights is not None:
        weights = [float(request.weights.get("dense", 0.5)),
                   float(request.weights.get("sparse", 0.5))]
    alpha = default_alpha if request.alpha is None else request.alpha
    method = request.fusion or default_method
    if method == "rrf":
        fused = fusion.rrf(lists, weights, k=request.rrf_k)
    elif method == "convex":
        fused = fusion.convex(lists, [_FLOORS["dense"], _FLOORS["sparse"]],
                              [alpha, 1.0 - alpha])
    else:
        fused = fusion.weighted(lists, weights or [alpha, 1.0 - alpha])
    ranked = []
    for item in fused:
        candidate = by_key[item.key]
        candidate.score = float(item.score)
        candidate.scores["fused"] = float(item.score)
        ranked.append(candidate)
    return ranked


def rerank(query: str, head: list[Candidate], reranker: Reranker) -> list[Candidate]:
    """Rescore the loaded ``topN`` head with ``reranker``; best first (§3.3)."""
    scores = reranker.score(query, [c.record.indexed_text for c in head])
    for candidate, score in zip(head, np.asarray(scores).tolist(), strict=True):
        candidate.score = float(score)
        candidate.scores["rerank"] = float(score)
    return sorted(head, key=lambda c: -c.score)


def adjust(request: SearchRequest, plan: Plan, ranked: list[Candidate], *,
           recency_weight: float, poison_penalty: float) -> list[Candidate]:
    """Recency (§7.7; no decay without a date value) blended with relevance by
    ``recency_weight``, and the feedback poison policy (§7.16, §15.3): demoted documents
    scaled down, those of quarantined sources left out."""
    poisoned = plan.poisoned.documents
    recency = request.recency
    if recency is not None and plan.schema.get(recency.field) != "date":
        raise InvalidInput("the recency field must be a date field", field="recency.field")
    if plan.poisoned.quarantined:
        ranked = [c for c in ranked if not plan.poisoned.excludes(c.record.meta)]
    if recency is None and not poisoned:
        return ranked
    floor = min((c.score for c in ranked), default=0.0)
    freshness: dict[int, float] = {}
    for candidate in ranked:
        if recency is not None:
            stamp = candidate.record.filter_meta.get(recency.field)
            if isinstance(stamp, int | float):
                age_days = max(0.0, (plan.now_ms - stamp) / _MS_PER_DAY)
                decay = 0.5 ** (age_days / recency.half_life_days)
                freshness[candidate.record.rowid] = decay
                # A blend, not a product: relevance above the candidates' floor keeps
                # (1 - weight) of its size however old the hit is, so an old on-topic
                # document still beats a new off-topic one.
                candidate.score = floor + (candidate.score - floor) * (
                    1.0 - recency_weight + recency_weight * decay)
        if candidate.record.doc_id in poisoned:
            candidate.score = _demote(candidate.score, poison_penalty)
    # Equal relevance (at the floor, or duplicates): the newer hit first.
    return sorted(ranked, key=lambda c: (-c.score, -freshness.get(c.record.rowid, 1.0)))


def _demote(score: float, factor: float) -> float:
    """Scale a score towards "less relevant" by ``factor`` ∈ (0, 1], whatever its sign."""
    return score * factor if score >= 0 else score / factor


def diversify(lam: float | None, ranked: list[Candidate],
              query_vector: npt.NDArray[np.float32]) -> list[Candidate]:
    """MMR over the dense vectors; scores are capped to stay non-increasing (§4.6)."""
    if lam is None or len(ranked) < 2:
        return ranked
    vectors = np.stack([c.vector for c in ranked])
    relevance = np.asarray([c.score for c in ranked], dtype=np.float32)
    order = mmr(query_vector, vectors, relevance, len(ranked), lam)
    diversified = [ranked[int(i)] for i in order]
    ceiling = math.inf
    for candidate in diversified:
        candidate.score = min(candidate.score, ceiling)
        ceiling = candidate.score
    return diversified


def best_per_document(ranked: list[Candidate]) -> list[Candidate]:
    """``unit: document`` (§7.7.2): one entry per document, its best-ranked chunk."""
    best: dict[str, Candidate] = {}
    for candidate in ranked:
        best.setdefault(candidate.record.doc_id, candidate)
    return list(best.values())


def pack(hits: list[Hit], budget: int) -> tuple[list[Hit], int]:
    """Keep top hits while their bodies fit in ``budget`` tokens (§7.7.2)."""
    packed: list[Hit] = []
    used = 0
    for found in hits:
        cost = count_tokens(found.text or "")
        if used + cost > budget:
            break
        packed.append(found)
        used += cost
    return packed, used


def hit(candidate: Candidate, request: SearchRequest,
        query_vector: npt.NDArray[np.float32]) -> Hit:
    """The hit of a loaded candidate, with its confidence and per-stage scores."""
    cosine = float(np.dot(candidate.vector, query_vector))
    return replace(
        record_hit(candidate.record, candidate.score, request.unit),
        confidence=min(1.0, max(0.0, cosine)),
        vector=candidate.vector.tolist() if request.include_vectors else None,
        scores=dict(candidate.scores))


def record_hit(record: ChunkRecord, score: float, unit: str = "chunk") -> Hit:
    """The §7.7 hit of a stored chunk (text, metadata, citation, trust) with ``score``."""
    meta = record.meta
    uri = meta.get("uri") or meta.get("url")
    page = meta.get("page")
    citation = Citation(source=str(meta.get("source") or record.doc_id),
                        uri=uri if isinstance(uri, str) else None,
                        title=meta["title"] if isinstance(meta.get("title"), str) else None,
                        start=record.start, end=record.end,
                        page=page if isinstance(page, int) and not isinstance(page, bool)
                        else None)
    return Hit(id=hit_id(record, unit), score=score, unit=unit, doc_id=record.doc_id,
               chunk_index=record.index, text=record.text, meta=meta, citation=citation,
               trust_level=str(meta.get("trust", "untrusted")), context=record.context)


def hit_id(record: ChunkRecord, unit: str) -> str:
    """``"doc#index"`` for a chunk hit, the document id for ``unit: document``."""
    return record.doc_id if unit == "document" else f"{record.doc_id}#{record.index}"
