"""Conversions between the engine's values and the protocol's structs (§7.7, §7.10, §7.16),
and engine field names → wire paths."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rcpkit.engine import types as engine
from rcpkit.protocol import types as wire
from rcpkit.protocol.codec import to_builtins
from rcpkit.protocol.content import plain_text
from rcpkit.protocol.errors import InvalidParams
from rcpkit.protocol.filters import FilterNode
from rcpkit.protocol.vectors import encode_vectors

__all__ = ["documents_in", "feedback_signals", "reply", "search_request", "wire_field",
           "wire_hit", "wire_usage"]

_WIRE_FIELDS = {
    "alpha": "fusion.alpha",
    "mmr_lambda": "mmr.lambda",
    "token_budget": "tokenBudget",
    "recency.half_life_days": "recency.halfLifeDays",
}
"""Engine field names whose wire path differs (the others are spelled alike)."""


def wire_field(field: str) -> str:
    """The §12.1 ``data.field`` path for an engine field name."""
    return _WIRE_FIELDS.get(field, field)


def reply(result: Any) -> dict[str, Any]:
    """A result struct as the JSON object sent, under the §4.6 float rules."""
    built: dict[str, Any] = to_builtins(result)
    return built


def search_request(params: wire.RetrieveParams, caller: str, filter_tree: FilterNode | None,
                   default_rerank: str | None) -> engine.SearchRequest:
    """Typed §7.7 params → the engine's request; absent options keep engine defaults.
    ``caller`` scopes session dedup and cursors; ``filter_tree`` is the filter the
    dispatcher's gating validated against the advertised fields (the engine's own schema)."""
    fusion = params.fusion
    rerank = params.rerank_options
    recency = None
    if params.recency is not None:
        if params.recency.field is None or params.recency.half_life_days is None:
            raise InvalidParams("recency needs field and halfLifeDays", field="recency")
        recency = engine.Recency(params.recency.field, params.recency.half_life_days)
    rerank_method = (rerank.method if rerank is not None and rerank.method else default_rerank)
    return engine.SearchRequest(
        query=plain_text(params.query, "query"), k=params.k, mode=params.mode or "hybrid",
        candidate_k=params.candidate_k,
        fusion=fusion.method if fusion else None,
        rrf_k=(fusion.rrf_k if fusion and fusion.rrf_k is not None else 60),
        weights=fusion.weights if fusion else None,
        alpha=fusion.alpha if fusion else None,
        rerank=(engine.RerankOptions(rerank_method, rerank.top_n)
                if rerank is not None and rerank_method is not None else None),
        mmr_lambda=((params.mmr.lambda_ if params.mmr.lambda_ is not None else 0.5)
                    if params.mmr is not None else None),
        filter=params.filter if filter_tree is None else filter_tree,
        filter_validated=filter_tree is not None, min_score=params.min_score,
        recency=recency,
        unit=params.unit or "chunk", token_budget=params.token_budget,
        session_id=params.session_id, include_text=params.include_text,
        include_vectors=params.include_vectors, seed=params.seed,
        index_version=params.index_version, cursor=params.cursor, caller=caller)


def wire_hit(hit: engine.Hit, encoding: str = "json",
             provenance: wire.Provenance | None = None) -> wire.Hit:
    """The §7.7 Hit of an engine hit; ``vector`` under ``encoding`` (§7.3.1)."""
    vector: list[float] | str | None = None
    if hit.vector is not None:
        floats = [float(x) for x in hit.vector]
        vector = floats if encoding == "json" else encode_vectors([floats], encoding)[0]
    citation = hit.citation
    return wire.Hit(
        id=hit.id, score=hit.score, unit=hit.unit, confidence=hit.confidence, text=hit.text,
        meta=dict(hit.meta) or None, vector=vector,
        scores={name: float(value) for name, value in hit.scores.items()} or None,
        citation=None if citation is None else wire.Citation(
            source=citation.source, uri=citation.uri, title=citation.title,
            start=citation.start, end=citation.end, page=citation.page),
        provenance=provenance, trust=wire.Trust(level=hit.trust_level),
        chunk=wire.ChunkRef(doc_id=hit.doc_id, index=hit.chunk_index,
                            context=hit.context or None))


def wire_usage(usage: engine.Usage, extra_notes: Sequence[str] = ()) -> wire.Usage:
    """§7.7 ``usage``; ``extra_notes`` are the dispatcher's (clamps it applied)."""
    notes = [*usage.notes, *extra_notes]
    return wire.Usage(candidates=usage.candidates, reranked=usage.reranked,
                      latency_ms=round(usage.latency_ms, 3), tokens=usage.tokens,
                      notes=notes or None)


def documents_in(documents: Sequence[wire.IndexDocument]) -> list[engine.DocumentIn]:
    return [engine.DocumentIn(text=d.text, id=d.id, meta=d.meta) for d in documents]


def feedback_signals(signals: Sequence[wire.FeedbackSignal]) -> list[engine.FeedbackSignal]:
    return [engine.FeedbackSignal(hit_id=str(s.hit_id), used=s.used, cited=s.cited,
                                  helpful=s.helpful, reward=s.reward,
                                  poison_suspected=s.poison_suspected,
                                  injection_suspected=s.injection_suspected)
            for s in signals]
