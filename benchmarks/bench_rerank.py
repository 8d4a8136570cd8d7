"""ColBERT (late-interaction) rerank: latency and quality, before/after the request-path work.

Quality: the offline Zaragoza FAQ (question → its answer). Dense MiniLM recall takes the top
``--top-n`` answers per question and each variant reranks them; nDCG@10 / MRR@10 / Recall@10
are printed next to dense recall alone, so a speed-up cannot silently cost quality.
Latency: per-query rerank wall time (p50/p95 ms) over the FAQ answers (~60 tokens) and over
chunk-sized passages (each answer repeated ×4, ~250 tokens, like a 1200-character chunk).

Variants: ``as before`` re-encodes every passage at the model's 256-token limit with no cache
(the previous behaviour); ``N tok`` truncates passages to N content tokens; ``cold`` has no
cache (every passage encoded); ``warm`` has the byte-bounded LRU cache already filled by a
first pass over the same queries (a popular chunk, a §10 continuation page).

    python benchmarks/bench_rerank.py                  # en FAQ, 100 queries (20 for chunks)
    python benchmarks/bench_rerank.py --language all --queries 1006 --chunk-queries 100
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import numpy as np

from rcpkit.engine.models.embedding import OnnxEmbedder, minilm
from rcpkit.engine.models.rerank import LateInteractionReranker
from rcpkit.eval.datasets import FaqLanguage, faq_to_beir
from rcpkit.eval.metrics import ndcg_at_k, recall_at_k, reciprocal_rank_at_k

CACHE_BYTES = 256 * 2**20


def quality(rankings: dict[str, list[str]], qrels: dict[str, dict[str, int]]) -> str:
    ndcg = np.mean([ndcg_at_k(rankings[q], qrels[q], 10) for q in rankings])
    mrr = np.mean([reciprocal_rank_at_k(rankings[q], qrels[q], 10) for q in rankings])
    recall = np.mean([recall_at_k(rankings[q], qrels[q], 10) for q in rankings])
    return f"{ndcg:8.4f} {mrr:8.4f} {recall:9.4f}"


def rerank_pass(
    reranker: LateInteractionReranker,
    queries: dict[str, str],
    heads: dict[str, list[int]],
    texts: Sequence[str],
    ids: Sequence[str],
) -> tuple[dict[str, list[str]], np.ndarray]:
    """Rerank each query's head; the reordered doc ids and per-query wall time (ms)."""
    rankings, latencies = {}, []
    for qid, query in queries.items():
        head = heads[qid]
        start = time.perf_counter()
        scores = reranker.score(query, [texts[i] for i in head])
        latencies.append((time.perf_counter() - start) * 1000)
        order = sorted(range(len(head)), key=lambda i: (-scores[i], i))
        rankings[qid] = [ids[head[i]] for i in order]
    return rankings, np.asarray(latencies)


def variants(embedder: OnnxEmbedder, budgets: Sequence[int]) -> dict[str, tuple[
        LateInteractionReranker, bool]]:
    """name → (reranker, warm): ``warm`` variants get a first pass to fill their cache."""
    chosen: dict[str, tuple[LateInteractionReranker, bool]] = {
        "as before (256 tok, no cache)": (LateInteractionReranker(embedder, cache_bytes=0),
                                          False),
    }
    for budget in budgets:
        chosen[f"{budget} tok, cold"] = (
            LateInteractionReranker(embedder, passage_tokens=budget, cache_bytes=0), False)
    chosen[f"{budgets[0]} tok, warm cache"] = (
        LateInteractionReranker(embedder, passage_tokens=budgets[0], cache_bytes=CACHE_BYTES),
        True)
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--language", choices=["en", "sv", "all"], default="en")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--chunk-queries", type=int, default=20,
                        help="queries timed on chunk-sized passages (the slow part)")
    parser.add_argument("--top-n", type=int, default=20)
    parser.add_argument("--budgets", type=int, nargs="+", default=[128, 160, 64])
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    language: FaqLanguage = args.language
    dataset = faq_to_beir(language)
    embedder = minilm(threads=args.threads)
    ids = [doc.id for doc in dataset.corpus]
    texts = [doc.body() for doc in dataset.corpus]
    long_texts = [" ".join([text] * 4) for text in texts]
    queries = dict(list(dataset.judged_queries().items())[: args.queries])
    chunk_queries = dict(list(queries.items())[: args.chunk_queries])
    corpus_vectors = embedder.embed(texts)
    query_vectors = embedder.embed(list(queries.values()), "query")
    heads = {qid: np.argsort(-(corpus_vectors @ vector), kind="stable")[: args.top_n].tolist()
             for qid, vector in zip(queries, query_vectors, strict=True)}
    dense_rankings = {qid: [ids[i] for i in head] for qid, head in heads.items()}

    print(f"== ColBERT rerank on {dataset.name}: {len(queries)} queries, dense top-{args.top_n} "
          f"reranked, MiniLM {embedder.model.threads} threads")
    print(f"{'variant':<32} {'nDCG@10':>8} {'MRR@10':>8} {'Recall@10':>9} "
          f"{'FAQ p50':>8} {'p95':>7} {'x before':>8} {'chunk p50':>9} {'p95':>7} {'x before':>8}")
    print(f"{'dense recall only':<32} {quality(dense_rankings, dataset.qrels)}")
    base: tuple[float, float] | None = None
    for name, (reranker, warm) in variants(embedder, args.budgets).items():
        reranker.score("warm up", texts[:2])
        if warm:
            rerank_pass(reranker, queries, heads, texts, ids)
            rerank_pass(reranker, chunk_queries, heads, long_texts, ids)
        rankings, short_ms = rerank_pass(reranker, queries, heads, texts, ids)
        _, long_ms = rerank_pass(reranker, chunk_queries, heads, long_texts, ids)
        short_p50, short_p95 = np.percentile(short_ms, [50, 95])
        long_p50, long_p95 = np.percentile(long_ms, [50, 95])
        base = base or (float(short_p50), float(long_p50))
        print(f"{name:<32} {quality(rankings, dataset.qrels)} {short_p50:8.1f} {short_p95:7.1f} "
              f"{base[0] / short_p50:7.1f}x {long_p50:9.1f} {long_p95:7.1f} "
              f"{base[1] / long_p50:7.1f}x")


if __name__ == "__main__":
    main()
