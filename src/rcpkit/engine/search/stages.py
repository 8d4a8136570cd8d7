"""The pure ranking stages after recall (§3): fuse, rerank, adjust (recency, poison),
diversify (MMR), one hit per document, token packing, and the hit of a stored chunk.

Scores (§4.6): cosine in ``dense`` mode, BM25 in ``sparse``, the fused score in ``hybrid``,
the reranker's score after ``rerank``; recency (blended with relevance) and the feedback
poison policy scale them down, and MMR caps them so they never increase down the list.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from rcpkit.engine.errors import InvalidInput
from rcpkit.engine.models.rerank import Reranker
from rcpkit.engine.search.mmr import mmr
from rcpkit.engine.search.planner import Plan
from rcpkit.engine.search.recall import Candidate
from rcpkit.engine.store import ChunkRecord
from rcpkit.engine.text import count_tokens
from rcpkit.engine.types import Citation, Hit, SearchRequest

__all__ = ["adjust", "best_per_document", "cite", "diversify", "fuse", "hit", "hit_id", "pack",
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
    weights = None
    if request.weights is not None:
        weights = (float(request.weights.get("dense", 0.5)),
                   float(request.weights.get("sparse", 0.5)))
    alpha = default_alpha if request.alpha is None else request.alpha
    method = request.fusion or default_method
    if method == "rrf":
        rrf_k = request.rrf_k
        fused = _fuse_lists(candidates, weights or (1.0, 1.0),
                            lambda _name, ranks, _scores: 1.0 / (rrf_k + ranks))
    elif method == "convex":
        fused = _fuse_lists(candidates, (alpha, 1.0 - alpha), _convex)
    else:
        fused = _fuse_lists(candidates, weights or (alpha, 1.0 - alpha), _min_max)
    ranked = []
    for position, score in zip(*(part.tolist() for part in fused), strict=True):
        candidate = candidates[position]
        candidate.score = score
        candidate.scores["fused"] = score
        ranked.append(candidate)
    return ranked


Floats = npt.NDArray[np.float64]
Normalise = Callable[[str, Floats, Floats], Floats | float]
"""``normalise(list_name, ranks, scores)``: the contributions of one list's members (1-based
ranks, raw scores) before weighting, as :mod:`rcpkit.fusion`'s normalisers compute them."""


def _min_max(_name: str, _ranks: Floats, scores: Floats) -> Floats | float:
    low, high = scores.min(), scores.max()
    return 1.0 if high == low else (scores - low) / (high - low)


def _convex(name: str, _ranks: Floats, scores: Floats) -> Floats | float:
    floor, high = _FLOORS[name], scores.max()
    return 0.0 if high <= floor else (scores - floor) / (high - floor)


def _fuse_lists(candidates: list[Candidate], weights: tuple[float, float],
                normalise: Normalise) -> tuple[npt.NDArray[np.intp], Floats]:
    """:mod:`rcpkit.fusion` of the dense and sparse lists (each best first, ties by row id)
    with arrays: positions in ``candidates``, best first, and their fused scores. The same
    sums in the same order give the same floats, sorted in the same §16.3 order (score, then
    summed weight, then the key as a string), at a fraction of the cost of ranking some 200
    candidates object by object."""
    count = len(candidates)
    totals = np.zeros(count)
    weight_sums = np.zeros(count)
    rowids = np.fromiter((c.rowid for c in candidates), np.int64, count)
    found: dict[str, tuple[list[int], list[float]]] = {"dense": ([], []), "sparse": ([], [])}
    dense, sparse = found["dense"], found["sparse"]
    for position, candidate in enumerate(candidates):
        of = candidate.scores
        if "dense" in of:
            dense[0].append(position)
            dense[1].append(of["dense"])
        if "sparse" in of:
            sparse[0].append(position)
            sparse[1].append(of["sparse"])
    for (name, (members, scores)), weight in zip(found.items(), weights, strict=True):
        if not members:
            continue
        rows, values = np.asarray(members), np.asarray(scores, dtype=np.float64)
        ranks = np.empty(len(rows))
        ranks[np.lexsort((rowids[rows], -values))] = np.arange(1, len(rows) + 1)
        totals[rows] += weight * normalise(name, ranks, values)
        weight_sums[rows] += weight
    order = np.lexsort((rowids.astype(str), -weight_sums, -totals))
    return order, totals[order]


def rerank(query: str, head: list[Candidate], reranker: Reranker) -> list[Candidate]:
    """Rescore the loaded ``topN`` head with ``reranker``; best first (§3.3)."""
    assert all(c.has_text for c in head), "rerank needs the candidates' texts"
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
        query_vector: npt.NDArray[np.float32], *, text: bool = True) -> Hit:
    """The hit of a loaded candidate, with its confidence and per-stage scores; ``text``
    False leaves the body out (``includeText: false``)."""
    assert candidate.has_text or not text, "hit body asked of a candidate loaded without it"
    assert candidate.loaded is not None, "hit of a candidate not loaded"
    record, vector, citation = candidate.loaded
    cosine = float(vector.dot(query_vector))  # np.dot's BLAS call, without its dispatch
    return record_hit(record, candidate.score, request.unit, text=text, citation=citation,
                      confidence=min(1.0, max(0.0, cosine)),
                      vector=vector.tolist() if request.include_vectors else None,
                      scores=dict(candidate.scores))


def record_hit(record: ChunkRecord, score: float, unit: str = "chunk", *, text: bool = True,
               citation: Citation | None = None, confidence: float | None = None,
               vector: list[float] | None = None,
               scores: dict[str, float] | None = None) -> Hit:
    """The §7.7 hit of a stored chunk (text, metadata, citation, trust) with ``score``; built
    in one go, as it is per hit on every request (a changed copy would be a second
    construction), from the record's ``citation`` when already made."""
    meta = record.meta
    return Hit(id=hit_id(record, unit), score=score, unit=unit, doc_id=record.doc_id,
               chunk_index=record.index, confidence=confidence,
               text=record.text if text else None, meta=meta, vector=vector,
               scores={} if scores is None else scores,
               citation=citation or cite(record),
               trust_level=str(meta.get("trust", "untrusted")), context=record.context)


def cite(record: ChunkRecord) -> Citation:
    """Where a stored chunk comes from (§7.7 ``citation``), from its document's metadata."""
    meta = record.meta
    uri = meta.get("uri") or meta.get("url")
    page = meta.get("page")
    title = meta.get("title")
    return Citation(source=str(meta.get("source") or record.doc_id),
                    uri=uri if isinstance(uri, str) else None,
                    title=title if isinstance(title, str) else None,
                    start=record.start, end=record.end,
                    page=page if isinstance(page, int) and not isinstance(page, bool) else None)


def hit_id(record: ChunkRecord, unit: str) -> str:
    """``"doc#index"`` for a chunk hit, the document id for ``unit: document``."""
    return record.doc_id if unit == "document" else f"{record.doc_id}#{record.index}"
