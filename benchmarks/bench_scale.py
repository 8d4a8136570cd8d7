"""Engine scaling: retrieve latency, ingest throughput and memory against corpus size.

For each size (1k, 10k, 100k chunks; 1M with ``--max``) the script builds a synthetic corpus —
Zipfian pseudo-word text from bench_lexical.py and random unit vectors (d=384) — ingests it
through ``Engine.add`` (SQLite record + both derived indexes, 1000 single-chunk documents per
call) and times ``Engine.search`` (k=10, candidateK=100, includeText false) for sparse, dense
(default path: HNSW beyond ``dense_exact_threshold``), dense with a ``seed`` (§7.7.1: always
exact) and hybrid (the default fusion, and RRF beside it), unfiltered and with a §8 filter
keeping 1% (``bucket eq 7``) or 50% (``bucket lt 50``) of the chunks. The embedding model is
bypassed: corpus and query vectors are precomputed and served by ``_common.LookupEmbedder``, so
figures are the engine's own.
Queries are 2–5 corpus words; query vectors are noisy copies of corpus vectors.

Baselines in the same process, same filters, depth 100 (the engine's candidate depth):
numpy brute force (matrix-vector product + argpartition) for dense, bm25s (``weight_mask``
for filters) for sparse, and their sum for hybrid. Memory: RSS of a fresh process before and
after ``Engine.open`` on the persisted data directory (what serving the index costs), and the
ingest process's peak RSS. Latency is timed once the background HNSW build caught up with
the last write (``Engine.wait_for_indexes``; the wait is printed as *graph settle*), i.e.
on the index a server settles on; until then exact search serves. Charts go to
docs/plots/scale_*.png. On a shared host, run with ``OPENBLAS_NUM_THREADS=1``: a
multi-threaded matrix-vector product under CPU contention adds milliseconds of noise to the
engine and the numpy baseline alike.

    python benchmarks/bench_scale.py                 # 1k, 10k, 100k
    python benchmarks/bench_scale.py --max           # … and 1M
    python benchmarks/bench_scale.py --quick         # smoke run, tiny sizes, no charts
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
from _common import (
    LookupEmbedder,
    figure_path,
    ingest,
    open_engine,
    peak_rss_bytes,
    rss_bytes,
    stamp,
    timed,
    unit_vectors,
)
from bench_dense import numpy_top_k
from bench_lexical import Bm25s, synthetic_corpus

from rcpkit.engine.text import Analyzer
from rcpkit.engine.types import SearchRequest
from rcpkit.protocol.filters import Condition

VARIANTS: dict[str, tuple[str, int | None, str | None]] = {
    "sparse": ("sparse", None, None),
    "dense": ("dense", None, None),
    "dense+seed": ("dense", 0, None),
    "hybrid": ("hybrid", None, None),
    "hybrid-rrf": ("hybrid", None, "rrf"),
}
"""Name → (mode, seed, fusion). A seeded request always searches vectors exactly (§7.7.1);
``hybrid`` is the default fusion, ``hybrid-rrf`` the rank fusion beside it."""
FILTERS: dict[str, Condition | None] = {
    "none": None,
    "1%": Condition("bucket", "eq", 7),
    "50%": Condition("bucket", "lt", 50),
}
DEPTH = 100


@dataclass
class SizeResult:
    """Everything measured at one corpus size."""

    size: int
    ingest_docs_per_s: float
    bm25s_index_docs_per_s: float
    served_rss_bytes: int
    peak_rss_bytes: int
    settle_s: float = 0.0
    """Wait after the last write until background index builds were done."""
    latency: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    baseline: dict[str, tuple[float, float, float]] = field(default_factory=dict)


def bm25s_top_k(baseline: Bm25s, query: str, mask: np.ndarray | None) -> None:
    """bm25s retrieval of ``DEPTH`` rows, restricted by a 0/1 ``weight_mask`` when given."""
    known = [t for t in baseline.analyzer.tokens(query) if t in baseline.model.vocab_dict]
    if known:
        baseline.model.retrieve([known], k=DEPTH, show_progress=False, weight_mask=mask)


def served_rss(data_dir: Path) -> int:
    """RSS growth of a fresh process that opens the persisted engine (indexes loaded)."""
    output = subprocess.run([sys.executable, __file__, "--measure-open", str(data_dir)],
                            check=True, capture_output=True, text=True).stdout
    return int(output.split()[-1])


def measure_open(data_dir: Path) -> None:
    """Child mode of :func:`served_rss`: print the RSS delta of ``Engine.open``."""
    before = rss_bytes()
    engine = open_engine(data_dir, LookupEmbedder())
    print(rss_bytes() - before)
    engine.close()


def bench_size(size: int, query_count: int, work: Path, seed: int) -> SizeResult:
    texts, query_texts = synthetic_corpus(size, seed)
    query_texts = query_texts[:query_count]
    corpus_vectors = unit_vectors(size, seed)
    rng = np.random.default_rng(seed + 1)
    noisy = corpus_vectors[rng.integers(0, size, len(query_texts))] + 0.05 * rng.standard_normal(
        (len(query_texts), corpus_vectors.shape[1]), dtype=np.float32)
    query_vectors = noisy / np.linalg.norm(noisy, axis=1, keepdims=True)
    embedder = LookupEmbedder()
    embedder.register(texts, corpus_vectors)
    embedder.register(query_texts, query_vectors)
    buckets = np.arange(size) % 100
    data_dir = work / f"scale-{size}"
    engine = open_engine(data_dir, embedder)
    start = time.perf_counter()
    ingest(engine, texts, [{"bucket": int(b)} for b in buckets])
    ingest_rate = size / (time.perf_counter() - start)
    start = time.perf_counter()
    engine.wait_for_indexes()  # time the index a server settles on, not one mid-build
    settle_s = time.perf_counter() - start
    peak = peak_rss_bytes()
    analyzer = Analyzer()
    start = time.perf_counter()
    baseline = Bm25s(analyzer, analyzer.tokens_batch(texts))
    result = SizeResult(size, ingest_rate, size / (time.perf_counter() - start), 0, peak,
                        settle_s)
    for label, condition in FILTERS.items():
        allowed = None if condition is None else allowed_rows(buckets, condition)
        weight = None if allowed is None else allowed.astype(np.float32)
        dense_base = timed([partial(numpy_top_k, corpus_vectors, vector, DEPTH, allowed)
                            for vector in query_vectors])
        sparse_base = timed([partial(bm25s_top_k, baseline, query, weight)
                             for query in query_texts])
        result.baseline[f"dense/{label}"] = dense_base
        result.baseline[f"dense+seed/{label}"] = dense_base
        result.baseline[f"sparse/{label}"] = sparse_base
        d50, d95, d99 = dense_base
        s50, s95, s99 = sparse_base
        result.baseline[f"hybrid/{label}"] = (d50 + s50, d95 + s95, d99 + s99)
        result.baseline[f"hybrid-rrf/{label}"] = result.baseline[f"hybrid/{label}"]
        for name, (mode, request_seed, method) in VARIANTS.items():
            result.latency[f"{name}/{label}"] = timed([
                partial(engine.search, SearchRequest(query=query, k=10, mode=mode,
                                                     candidate_k=DEPTH, filter=condition,
                                                     include_text=False, seed=request_seed,
                                                     fusion=method))
                for query in query_texts])
    engine.close()
    result.served_rss_bytes = served_rss(data_dir)
    return result


def allowed_rows(buckets: np.ndarray, condition: Condition) -> np.ndarray:
    """The boolean row mask of one of the :data:`FILTERS` conditions, for the baselines."""
    return np.asarray(buckets == condition.value if condition.op == "eq"
                      else buckets < condition.value)


def report(results: Sequence[SizeResult]) -> None:
    print(f"\n{'chunks':>9} {'ingest docs/s':>14} {'graph settle s':>15} {'bm25s idx docs/s':>17} "
          f"{'served RSS MB':>14} {'bytes/chunk':>12} {'peak RSS MB':>12}")
    for r in results:
        print(f"{r.size:>9,} {r.ingest_docs_per_s:>14,.0f} {r.settle_s:>15.1f} "
              f"{r.bm25s_index_docs_per_s:>17,.0f} "
              f"{r.served_rss_bytes / 2**20:>14.1f} {r.served_rss_bytes / r.size:>12,.0f} "
              f"{r.peak_rss_bytes / 2**20:>12.1f}")
    print(f"\n{'chunks':>9} {'mode':<10} {'filter':>6} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} "
          f"{'base p50':>9} {'x base':>7}")
    for r in results:
        for key, (p50, p95, p99) in r.latency.items():
            mode, label = key.split("/")
            base = r.baseline[key][0]
            print(f"{r.size:>9,} {mode:<10} {label:>6} {p50:8.2f} {p95:8.2f} {p99:8.2f} "
                  f"{base:9.2f} {p50 / base:7.2f}")
    if len(results) > 1:
        first, last = results[0], results[-1]
        growth = last.size / first.size
        print(f"\ngrowth {first.size:,} → {last.size:,} chunks (×{growth:,.0f}):")
        for key in first.latency:
            print(f"  {key:<14} p50 ×{last.latency[key][0] / first.latency[key][0]:8.1f}"
                  f"   baseline p50 ×{last.baseline[key][0] / first.baseline[key][0]:8.1f}")


def plot(results: Sequence[SizeResult], quick: bool) -> None:
    latency_path, resources_path = figure_path("scale_latency", quick), figure_path(
        "scale_resources", quick)
    if latency_path is None or resources_path is None:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [r.size for r in results]
    figure, axes = plt.subplots(1, 3, figsize=(15, 4.5), sharey=True)
    for axis, label in zip(axes, FILTERS, strict=True):
        for mode in VARIANTS:
            key = f"{mode}/{label}"
            line = axis.plot(sizes, [r.latency[key][0] for r in results], marker="o",
                             label=f"{mode} p50")
            axis.plot(sizes, [r.latency[key][2] for r in results], linestyle=":",
                      color=line[0].get_color(), label=f"{mode} p99")
            axis.plot(sizes, [r.baseline[key][0] for r in results], linestyle="--",
                      color=line[0].get_color(), alpha=0.5, label=f"{mode} baseline p50")
        axis.set(xscale="log", yscale="log", xlabel="chunks", title=f"filter: {label}")
        axis.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("retrieve latency (ms)")
    axes[0].legend(fontsize=7)
    figure.suptitle("Engine.search latency vs corpus size (baselines: numpy, bm25s, their sum)")
    figure.tight_layout()
    figure.savefig(latency_path, dpi=110)
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.plot(sizes, [r.ingest_docs_per_s for r in results], marker="o", label="Engine.add")
    left.plot(sizes, [r.bm25s_index_docs_per_s for r in results], marker="o",
              label="bm25s index (in memory only)")
    left.set(xscale="log", yscale="log", xlabel="chunks", ylabel="docs/s", title="ingest")
    left.legend()
    right.plot(sizes, [r.served_rss_bytes / r.size for r in results], marker="o")
    right.set(xscale="log", xlabel="chunks", ylabel="bytes per chunk",
              title="served RSS per chunk")
    for axis in (left, right):
        axis.grid(True, which="both", alpha=0.3)
    figure.tight_layout()
    figure.savefig(resources_path, dpi=110)
    print(f"charts: {latency_path}, {resources_path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--max", action="store_true", help="also run 1,000,000 chunks")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="smoke run: 500 and 2000 chunks")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    parser.add_argument("--measure-open", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure_open:
        measure_open(args.measure_open)
        return
    sizes = [500, 2_000] if args.quick else sorted(set(args.sizes) | ({1_000_000} if args.max
                                                                         else set()))
    queries = 20 if args.quick else args.queries
    print(f"bench_scale {stamp()}  sizes={sizes}  queries={queries}  k=10  depth={DEPTH}")
    results = []
    with tempfile.TemporaryDirectory(prefix="rcpkit-scale-") as work:
        for size in sizes:
            started = time.perf_counter()
            results.append(bench_size(size, queries, Path(work), args.seed))
            print(f"  {size:,} chunks done in {time.perf_counter() - started:.0f} s", flush=True)
    report(results)
    plot(results, args.quick)
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ for r in results], indent=1))


if __name__ == "__main__":
    main()
