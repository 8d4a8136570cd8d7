"""Metrics against hand-computed values (Appendix F: linear-gain nDCG, Recall@k, MRR, MAP)."""

from __future__ import annotations

import pytest

from rcpkit.eval.metrics import (
    average_precision,
    document_id,
    document_ranking,
    evaluate,
    latency_percentiles,
    metric_names,
    ndcg_at_k,
    recall_at_k,
    reciprocal_rank_at_k,
)

GRADED = {"a": 3, "b": 2, "c": 1, "z": 0}
RANKING = ["c", "x", "a", "b"]


def test_graded_ndcg_uses_linear_gain() -> None:
    # DCG  = 1/log2(2) + 0 + 3/log2(4) + 2/log2(5)  = 1 + 1.5 + 0.861353 = 3.361353
    # IDCG = 3/log2(2) + 2/log2(3) + 1/log2(4)      = 3 + 1.261860 + 0.5 = 4.761860
    assert ndcg_at_k(RANKING, GRADED, 10) == pytest.approx(0.705891, abs=1e-6)


def test_ndcg_cutoff_truncates_both_dcg_and_ideal() -> None:
    # DCG@2 = 1 + 0; IDCG@2 = 3 + 2/log2(3) = 4.261860
    assert ndcg_at_k(RANKING, GRADED, 2) == pytest.approx(0.234639, abs=1e-6)


def test_ndcg_perfect_and_empty() -> None:
    assert ndcg_at_k(["a", "b", "c"], GRADED, 10) == pytest.approx(1.0)
    assert ndcg_at_k([], GRADED, 10) == 0.0
    assert ndcg_at_k(["a"], {"a": 0}, 10) == 0.0


def test_recall_with_several_relevant_documents() -> None:
    # relevant = {a, b, c}; "z" has grade 0 and is not relevant
    assert recall_at_k(RANKING, GRADED, 1) == pytest.approx(1 / 3)
    assert recall_at_k(RANKING, GRADED, 3) == pytest.approx(2 / 3)
    assert recall_at_k(RANKING, GRADED, 10) == pytest.approx(1.0)
    assert recall_at_k(["z"], GRADED, 10) == 0.0


def test_mrr_at_10() -> None:
    assert reciprocal_rank_at_k(RANKING, GRADED, 10) == 1.0
    assert reciprocal_rank_at_k(["x", "y", "b"], GRADED, 10) == pytest.approx(1 / 3)
    eleventh = [f"n{i}" for i in range(10)] + ["a"]
    assert reciprocal_rank_at_k(eleventh, GRADED, 10) == 0.0


def test_average_precision() -> None:
    # relevant at ranks 1, 3, 4: (1/1 + 2/3 + 3/4) / 3
    assert average_precision(RANKING, GRADED) == pytest.approx(0.805556, abs=1e-6)
    # an unretrieved relevant document counts as zero: (1/2) / 2
    assert average_precision(["x", "a"], {"a": 1, "b": 1}) == pytest.approx(0.25)


def test_duplicates_count_once() -> None:
    assert reciprocal_rank_at_k(["x", "x", "a"], {"a": 1}, 10) == pytest.approx(1 / 2)
    assert recall_at_k(["a", "a", "b"], {"a": 1, "b": 1}, 2) == pytest.approx(1.0)
    # [a, a] → [a]: DCG = 1, IDCG = 1 + 1/log2(3)
    assert ndcg_at_k(["a", "a"], {"a": 1, "b": 1}, 10) == pytest.approx(0.613147, abs=1e-6)
    assert average_precision(["a", "a", "b"], {"a": 1, "b": 1}) == pytest.approx(1.0)


def test_fewer_hits_than_k() -> None:
    assert recall_at_k(["a"], {"a": 1, "b": 1}, 100) == pytest.approx(0.5)
    assert ndcg_at_k(["a"], {"a": 1, "b": 1}, 10) == pytest.approx(0.613147, abs=1e-6)


def test_hit_to_document_mapping() -> None:
    assert document_id({"id": "x#2", "chunk": {"docId": "paper", "index": 2}}) == "paper"
    assert document_id({"id": "doc#3"}) == "doc"
    assert document_id({"id": "doc#3#4"}) == "doc#3"
    assert document_id({"id": "a#b"}) == "a#b"
    assert document_id({"id": 7}) == "7"
    hits = [{"id": "d1#0", "score": 3.0}, {"id": "d2#5", "score": 2}, {"id": "d1#4", "score": 1.0}]
    assert document_ranking(hits) == [("d1", 3.0), ("d2", 2.0)]


def test_evaluate_excludes_queries_without_relevant_documents() -> None:
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"c": 0}, "q4": {"d": 1}}
    run = {"q1": ["a"], "q2": ["x", "b"], "q3": ["c"]}  # q4 missing: scores zero
    summary = evaluate(run, qrels)
    assert (summary.evaluated, summary.excluded) == (3, 1)
    assert list(summary.means) == metric_names()
    assert summary.means["MRR@10"] == pytest.approx((1 + 0.5 + 0) / 3)
    assert summary.means["Recall@10"] == pytest.approx(2 / 3)
    assert summary.means["MAP"] == pytest.approx((1 + 0.5 + 0) / 3)


def test_evaluate_with_nothing_judged() -> None:
    summary = evaluate({"q": ["a"]}, {"q": {"a": 0}})
    assert (summary.evaluated, summary.excluded) == (0, 1)
    assert set(summary.means.values()) == {0.0}


def test_latency_percentiles_interpolate() -> None:
    figures = latency_percentiles([5.0, 1.0, 3.0, 2.0, 4.0])
    assert figures == pytest.approx({"p50": 3.0, "p95": 4.8, "p99": 4.96, "mean": 3.0})
    assert latency_percentiles([]) == {"p50": 0.0, "p95": 0.0, "p99": 0.0, "mean": 0.0}
