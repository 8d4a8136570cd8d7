"""Exact dense search's int8 first pass (``engine/indexes/dense/quantised.py``), on the peer corpus.

Three tables, every figure a p50 over the same queries, one query at a time:

1. the scan kernels over ``n`` × 384 vectors: numpy's float32 gemv (what the floor and the
   exact search before the first pass used) against numkong's packed int8, bf16 and f16
   dot products, each right after a 48 MB read that pushes the matrices out of the cache
   (as in bench_peers.py, where every query follows other engines' scans) and warm;
2. the first pass on real MiniLM vectors: its bound and how many rows it keeps for exact
   scoring, unfiltered and with the 50 % filter;
3. ``DenseIndex`` exact search (first pass plus exact scoring) against the numpy floor
   (gemv + argpartition, ``bench_dense.numpy_top_k``), unfiltered and with the 50 % filter,
   queries alternated between the two.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_exact_scan.py --sizes 10000 50000
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
import peer_corpus
from bench_dense import numpy_top_k

from rcpkit.engine.indexes.dense import DenseIndex, quantised

_EVICT = np.ones(48_000_000 // 8)


def p50_us(run: Callable[[int], object], count: int, *, cold: bool) -> float:
    """p50 of ``run(i)`` for each query ``i``, in µs."""
    times = []
    for position in range(count):
        if cold:
            _EVICT.sum()
        began = time.perf_counter()
        run(position)
        times.append(time.perf_counter() - began)
    return float(np.median(times)) * 1e6


def kernels(vectors: np.ndarray, queries: np.ndarray) -> None:
    import numkong

    codes = quantised.encode(vectors)
    half = numkong.dots_pack(vectors.astype(np.float16))
    brain = numkong.dots_pack(numkong.astype(vectors, "bf16"))
    steps = np.abs(queries).max(axis=1, keepdims=True) / 127
    as_int8 = np.rint(queries / steps).astype(np.int8)
    as_bf16 = numkong.astype(queries, "bf16")
    as_f16 = queries.astype(np.float16)
    runs: dict[str, Callable[[int], object]] = {
        "numpy float32 gemv": lambda i: vectors @ queries[i],
        "numkong int8 (packed)": lambda i: numkong.dots_packed(as_int8[i:i + 1], codes.packed),
        "numkong bf16 (packed)": lambda i: numkong.dots_packed(as_bf16[i:i + 1], brain),
        "numkong f16 (packed)": lambda i: numkong.dots_packed(as_f16[i:i + 1], half),
    }
    print(f"\n-- scan kernels, {len(vectors):,} x {vectors.shape[1]}, one query (p50 µs)")
    print(f"{'kernel':<24}{'after a 48 MB read':>20}{'warm':>10}")
    for name, run in runs.items():
        print(f"{name:<24}{p50_us(run, len(queries), cold=True):>20.0f}"
              f"{p50_us(run, len(queries), cold=False):>10.0f}")


def first_pass(vectors: np.ndarray, queries: np.ndarray, allow: np.ndarray) -> None:
    codes = quantised.encode(vectors)
    bounds = [quantised.first_pass(codes, q)[1] for q in queries]
    for label, mask in (("unfiltered", None), ("50 % filter", allow)):
        kept = [len(quantised.candidates(codes, q, 10, mask)) for q in queries]
        print(f"-- first pass, {label}: bound p50 {np.median(bounds):.4f}; rows kept for exact "
              f"scoring p50 {np.median(kept):.0f}, p90 {np.percentile(kept, 90):.0f}, "
              f"max {max(kept)} of {len(vectors):,}")


def against_floor(vectors: np.ndarray, queries: np.ndarray, allow: np.ndarray) -> None:
    index = DenseIndex(vectors.shape[1], exact_threshold=len(vectors) + 1)
    index.add(np.arange(len(vectors)), vectors)
    print(f"\n-- exact top 10 of {len(vectors):,}, p50 ms (queries alternated), and agreement")
    for label, mask in (("unfiltered", None), ("50 % filter", allow)):
        ours, floor, agree = [], [], 0
        for query in queries:
            began = time.perf_counter()
            found = index.search(query, 10, allow=mask)[0]
            ours.append(time.perf_counter() - began)
            began = time.perf_counter()
            truth = numpy_top_k(vectors, query, k=10, allowed=mask)
            floor.append(time.perf_counter() - began)
            agree += set(found.tolist()) == set(truth.tolist())
        mine, base = np.median(ours) * 1000, np.median(floor) * 1000
        print(f"{label:<12} DenseIndex {mine:.3f}  numpy {base:.3f}  ratio {mine / base:.2f}x  "
              f"same top 10: {agree}/{len(queries)}")
    index.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000])
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    for size in args.sizes:
        corpus = peer_corpus.load(size)
        vectors = corpus.vectors.astype(np.float32)
        queries = corpus.query_vectors[:args.queries].astype(np.float32)
        allow = np.arange(size) % 2 == 1
        print(f"\n== {size:,} chunks of the peer corpus, {len(queries)} queries")
        kernels(vectors, queries)
        first_pass(vectors, queries, allow)
        against_floor(vectors, queries, allow)


if __name__ == "__main__":
    main()
