"""Client-side IR metrics over ``retrieve`` rankings (Appendix F).

Conventions, all deliberate:

* **Judgements** are graded (``qrels``: query id → document id → grade). A grade
  ``> 0`` means relevant; ``0`` or negative means judged non-relevant.
* **nDCG@k** uses the Appendix F formula with *linear* gain:
  ``DCG@k = Σ_{i=1..k} rel_i / log2(i+1)``; ``IDCG@k`` is the DCG of the judged
  grades sorted best first. (Not the exponential ``2^rel - 1`` gain of some
  toolkits; the two agree for binary judgements.)
* **Recall@k** = relevant documents in the top ``k`` / all relevant documents.
* **MRR@10** = ``1 / rank`` of the first relevant document within the top 10, else 0.
* **AP** = Σ over relevant documents at rank ``i`` of ``precision@i``, divided by the
  number of relevant documents (unretrieved ones count as zero); MAP is its mean.
  It is computed over the whole ranking the engine returned (its depth is the
  configuration's ``k``).
* A query with **no relevant document** has undefined recall/nDCG, so it is
  excluded from every mean; :class:`MetricSummary` reports how many were excluded.
* A ranking is a list of **document** ids. :func:`document_ranking` maps hits to
  documents and keeps only the first occurrence of each document, so a duplicate
  never earns credit twice and later duplicates do not push documents down.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MRR_CUTOFF",
    "NDCG_CUTOFF",
    "RECALL_CUTOFFS",
    "MetricSummary",
    "Qrels",
    "average_precision",
    "document_id",
    "document_ranking",
    "evaluate",
    "latency_percentiles",
    "metric_names",
    "ndcg_at_k",
    "query_metrics",
    "recall_at_k",
    "reciprocal_rank_at_k",
]

Qrels = Mapping[str, Mapping[str, int]]
"""query id → document id → relevance grade."""

NDCG_CUTOFF = 10
MRR_CUTOFF = 10
RECALL_CUTOFFS: tuple[int, ...] = (10, 50, 100)

_CHUNK_SUFFIX = re.compile(r"#\d+$")


def document_id(hit: Mapping[str, Any]) -> str:
    """The document a hit belongs to (§7.7 Hit).

    ``hit.chunk.docId`` when the engine provides it, otherwise the stringified
    ``hit.id`` with a trailing ``#<int>`` chunk suffix removed (``"doc#3"`` → ``"doc"``).
    """
    chunk = hit.get("chunk")
    if isinstance(chunk, Mapping) and isinstance(chunk.get("docId"), str):
        return str(chunk["docId"])
    return _CHUNK_SUFFIX.sub("", str(hit.get("id")))


def document_ranking(hits: Iterable[Mapping[str, Any]]) -> list[tuple[str, float]]:
    """``(document id, score)`` in hit order, first occurrence of each document only."""
    seen: set[str] = set()
    ranking: list[tuple[str, float]] = []
    for hit in hits:
        doc = document_id(hit)
        if doc in seen:
            continue
        seen.add(doc)
        score = hit.get("score")
        ranking.append((doc, float(score) if isinstance(score, int | float) else 0.0))
    return ranking


def _relevant(judgements: Mapping[str, int]) -> set[str]:
    return {doc for doc, grade in judgements.items() if grade > 0}


def _first_occurrences(ranking: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(ranking))


def ndcg_at_k(ranking: Sequence[str], judgements: Mapping[str, int], k: int) -> float:
    """nDCG@k with linear gain (Appendix F); 0.0 when nothing is relevant."""
    gains = [max(judgements.get(doc, 0), 0) for doc in _first_occurrences(ranking)[:k]]
    ideal = sorted((g for g in judgements.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    if idcg == 0:
        return 0.0
    return sum(g / math.log2(i + 2) for i, g in enumerate(gains)) / idcg


def recall_at_k(ranking: Sequence[str], judgements: Mapping[str, int], k: int) -> float:
    """Fraction of all relevant documents found in the top ``k``; 0.0 when none exist."""
    relevant = _relevant(judgements)
    if not relevant:
        return 0.0
    return len(relevant.intersection(_first_occurrences(ranking)[:k])) / len(relevant)


def reciprocal_rank_at_k(ranking: Sequence[str], judgements: Mapping[str, int], k: int) -> float:
    """``1/rank`` of the first relevant document within the top ``k``, else 0.0."""
    relevant = _relevant(judgements)
    for rank, doc in enumerate(_first_occurrences(ranking)[:k], start=1):
        if doc in relevant:
            return 1.0 / rank
    return 0.0


def average_precision(ranking: Sequence[str], judgements: Mapping[str, int]) -> float:
    """Average precision over the whole ranking, normalised by all relevant documents."""
    relevant = _relevant(judgements)
    if not relevant:
        return 0.0
    found = 0
    precision_sum = 0.0
    for rank, doc in enumerate(_first_occurrences(ranking), start=1):
        if doc in relevant:
            found += 1
            precision_sum += found / rank
    return precision_sum / len(relevant)


@dataclass(frozen=True, slots=True)
class MetricSummary:
    """Means over the judged queries; ``excluded`` counts queries with no relevant document."""

    means: dict[str, float]
    evaluated: int
    excluded: int


def metric_names() -> list[str]:
    """Report order of the metric keys produced by :func:`evaluate`."""
    return [f"nDCG@{NDCG_CUTOFF}", *(f"Recall@{k}" for k in RECALL_CUTOFFS),
            f"MRR@{MRR_CUTOFF}", "MAP"]


def query_metrics(ranking: Sequence[str], judgements: Mapping[str, int]) -> dict[str, float]:
    """Every reported metric for one query, keyed as in :func:`metric_names`."""
    values = {f"nDCG@{NDCG_CUTOFF}": ndcg_at_k(ranking, judgements, NDCG_CUTOFF)}
    values.update({f"Recall@{k}": recall_at_k(ranking, judgements, k) for k in RECALL_CUTOFFS})
    values[f"MRR@{MRR_CUTOFF}"] = reciprocal_rank_at_k(ranking, judgements, MRR_CUTOFF)
    values["MAP"] = average_precision(ranking, judgements)
    return values


def evaluate(run: Mapping[str, Sequence[str]], qrels: Qrels) -> MetricSummary:
    """Mean metrics of ``run`` (query id → ranked document ids) against ``qrels``.

    Every query of ``qrels`` with at least one relevant document is evaluated; a
    query missing from ``run`` scores zero. Queries without a relevant document
    are excluded from the means and counted in ``excluded``.
    """
    totals = dict.fromkeys(metric_names(), 0.0)
    evaluated = excluded = 0
    for query_id, judgements in qrels.items():
        if not _relevant(judgements):
            excluded += 1
            continue
        evaluated += 1
        for name, value in query_metrics(run.get(query_id, ()), judgements).items():
            totals[name] += value
    means = {name: (total / evaluated if evaluated else 0.0) for name, total in totals.items()}
    return MetricSummary(means=means, evaluated=evaluated, excluded=excluded)


def latency_percentiles(latencies_ms: Sequence[float]) -> dict[str, float]:
    """p50/p95/p99 and mean in milliseconds (linear interpolation between order statistics)."""
    if not latencies_ms:
        return {"p50": 0.0, "p95": 0.0, "p99": 0.0, "mean": 0.0}
    ordered = sorted(latencies_ms)

    def percentile(p: float) -> float:
        position = (len(ordered) - 1) * p / 100
        low = math.floor(position)
        high = min(low + 1, len(ordered) - 1)
        return ordered[low] + (ordered[high] - ordered[low]) * (position - low)

    return {"p50": percentile(50), "p95": percentile(95), "p99": percentile(99),
            "mean": sum(ordered) / len(ordered)}
