"""Lexical recall: rcpkit LexicalIndex vs bm25s vs tantivy: the figures behind
writing our own BM25.

Measures build time and single-query latency (p50/p95, k=10) on a synthetic Zipf corpus, and
nDCG@10 on the Zaragoza construction FAQ (question → its answer; English, and Swedish as a
bonus). LexicalIndex and bm25s get the same tokens from rcpkit's Analyzer (the analysis time
is reported separately and included in both "total" columns); tantivy uses its own
``en_stem`` analyzer.

    python benchmarks/bench_lexical.py                # 10k and 100k documents
    python benchmarks/bench_lexical.py --sizes 10000 --queries 100
"""

from __future__ import annotations

import argparse
import math
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from rcpkit.engine.indexes.lexical import LexicalIndex
from rcpkit.engine.text import Analyzer

SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "ta", "si", "po", "de", "ga", "bu", "ve", "ho", "ji"]


def synthetic_corpus(size: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """Documents of 20–120 words drawn from a Zipf(1.05) vocabulary of ~50k pseudo-words,
    plus queries of 2–5 words from the frequent-but-not-stop-word band."""
    rng = np.random.default_rng(seed)
    words = list(
        dict.fromkeys(
            "".join(rng.choice(SYLLABLES, size=rng.integers(2, 5))) for _ in range(60_000)
        )
    )
    probabilities = 1 / np.arange(1, len(words) + 1) ** 1.05
    probabilities /= probabilities.sum()
    lengths = rng.integers(20, 120, size=size)
    vocabulary = np.array(words)
    drawn = vocabulary[rng.choice(len(words), size=int(lengths.sum()), p=probabilities)]
    texts = [" ".join(doc) for doc in np.split(drawn, np.cumsum(lengths)[:-1])]
    queries = [" ".join(rng.choice(words[20:5000], size=rng.integers(2, 6))) for _ in range(500)]
    return texts, queries


def latencies(search: Callable[[str], object], queries: Sequence[str]) -> tuple[float, float]:
    samples = []
    for query in queries:
        start = time.perf_counter()
        search(query)
        samples.append((time.perf_counter() - start) * 1e3)
    return float(np.percentile(samples, 50)), float(np.percentile(samples, 95))


class Bm25s:
    """bm25s (method "lucene", same k1/b) fed with rcpkit Analyzer tokens."""

    def __init__(self, analyzer: Analyzer, tokens: list[list[str]] | None):
        import bm25s

        self.analyzer = analyzer
        self.model = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
        if tokens is not None:
            self.model.index(tokens, show_progress=False)

    @classmethod
    def load(cls, analyzer: Analyzer, path: Path) -> Bm25s:
        """An index ``self.model.save(path)`` wrote."""
        import bm25s

        loaded = cls(analyzer, None)
        loaded.model = bm25s.BM25.load(str(path))
        return loaded

    def search(self, query: str, k: int) -> list[int]:
        tokens = self.analyzer.tokens(query)
        if not tokens:
            return []
        known = [t for t in tokens if t in self.model.vocab_dict]
        if not known:
            return []
        rows, _ = self.model.retrieve(
            [known], k=min(k, self.model.scores["num_docs"]), show_progress=False
        )
        return [int(r) for r in rows[0]]


class Tantivy:
    """An in-RAM tantivy index with the ``en_stem`` tokenizer."""

    def __init__(self, texts: Sequence[str]):
        import tantivy

        builder = tantivy.SchemaBuilder()
        builder.add_integer_field("row", stored=True, fast=True)
        builder.add_text_field("body", tokenizer_name="en_stem")
        self.index = tantivy.Index(builder.build())
        writer = self.index.writer(heap_size=256_000_000)
        for row, text in enumerate(texts):
            writer.add_document(tantivy.Document(row=row, body=text))
        writer.commit()
        writer.wait_merging_threads()
        self.index.reload()
        self.searcher = self.index.searcher()

    def search(self, query: str, k: int) -> list[int]:
        words = re.findall(r"\w+", query)
        if not words:
            return []
        parsed = self.index.parse_query(" ".join(words), ["body"])
        hits = self.searcher.search(parsed, k).hits
        return [self.searcher.doc(address)["row"][0] for _, address in hits]


def speed(sizes: Sequence[int], query_count: int) -> None:
    print(
        f"{'docs':>7} {'engine':<12} {'analyze s':>9} {'index s':>8} {'total s':>8} "
        f"{'p50 ms':>7} {'p95 ms':>7}"
    )
    for size in sizes:
        speed_at(size, query_count)


def speed_at(size: int, query_count: int) -> None:
    """One table block: build times and query latencies of the three engines at ``size``."""
    analyzer = Analyzer()
    texts, queries = synthetic_corpus(size)
    queries = queries[:query_count]
    clock = time.perf_counter()
    tokens = analyzer.tokens_batch(texts)
    analyze = time.perf_counter() - clock

    ours = LexicalIndex(analyzer)
    clock = time.perf_counter()
    ours.add(np.arange(size), texts)
    ours_total = time.perf_counter() - clock
    rows = {"rcpkit": (analyze, ours_total - analyze, ours_total)}
    timings = {"rcpkit": latencies(lambda q: ours.search(q, 10), queries)}
    visible = np.random.default_rng(1).random(size) < 0.9
    rows["rcpkit+mask"] = (math.nan, math.nan, math.nan)
    timings["rcpkit+mask"] = latencies(
        lambda q: ours.search(q, 10, visible=visible, allow=visible), queries
    )

    clock = time.perf_counter()
    theirs = Bm25s(analyzer, tokens)
    index_time = time.perf_counter() - clock
    rows["bm25s"] = (analyze, index_time, analyze + index_time)
    timings["bm25s"] = latencies(lambda q: theirs.search(q, 10), queries)

    clock = time.perf_counter()
    rust = Tantivy(texts)
    rows["tantivy"] = (math.nan, math.nan, time.perf_counter() - clock)
    timings["tantivy"] = latencies(lambda q: rust.search(q, 10), queries)

    for engine, (analysis, indexing, total) in rows.items():
        p50, p95 = timings[engine]
        print(
            f"{size:>7} {engine:<12} {analysis:>9.2f} {indexing:>8.2f} {total:>8.2f} "
            f"{p50:>7.2f} {p95:>7.2f}"
        )
    for engine in ("bm25s", "tantivy"):
        build = rows[engine][2] / ours_total
        p50 = timings[engine][0] / timings["rcpkit"][0]
        p95 = timings[engine][1] / timings["rcpkit"][1]
        print(f"{'':>7} {engine}/rcpkit: build ×{build:.2f}, p50 ×{p50:.2f}, p95 ×{p95:.2f}")


def ndcg_at_10(ranked: Sequence[Sequence[int]]) -> float:
    """Mean nDCG@10 with one relevant document per query (query i ↔ document i)."""
    total = 0.0
    for query, rows in enumerate(ranked):
        for position, row in enumerate(rows[:10]):
            if row == query:
                total += 1 / math.log2(position + 2)
                break
    return total / len(ranked)


def quality() -> None:
    import zaragoza_construction_faq as faq

    print(f"\n{'FAQ nDCG@10':<12} {'rcpkit':>8} {'bm25s':>8} {'tantivy':>8}")
    for language, analyzer in (("en", Analyzer()), ("sv", Analyzer("swedish"))):
        pairs = faq.load(lang=language)
        answers = [pair["a"] for pair in pairs]
        questions = [pair["q"] for pair in pairs]
        ours = LexicalIndex(analyzer)
        ours.add(np.arange(len(answers)), answers)
        theirs = Bm25s(analyzer, analyzer.tokens_batch(answers))
        scores = [
            ndcg_at_10([ours.search(q, 10)[0].tolist() for q in questions]),
            ndcg_at_10([theirs.search(q, 10) for q in questions]),
        ]
        tantivy_score = math.nan
        if language == "en":
            tantivy = Tantivy(answers)
            tantivy_score = ndcg_at_10([tantivy.search(q, 10) for q in questions])
        print(
            f"{language + f' ({len(pairs)} q)':<12} {scores[0]:>8.4f} {scores[1]:>8.4f} "
            f"{tantivy_score:>8.4f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=300)
    arguments = parser.parse_args()
    speed(arguments.sizes, arguments.queries)
    quality()


if __name__ == "__main__":
    main()
