"""Dense recall benchmark: plain numpy vs DenseIndex (exact and HNSW), writes while the graph
builds, and MiniLM throughput.

Corpus: random unit vectors (d=384), the hard case for HNSW (no neighbourhood structure), and
optionally ``--corpus clustered`` (200 Gaussian clusters, closer to real embeddings). Queries:
corpus vectors plus Gaussian noise — ``--query-noise`` sets its scale.
Filters: a random 1% and 50% of row ids allowed. Recall@k is measured against exact search
under the same filter. Prints p50/p95 latency per query and the ratio to plain numpy; exact
search is timed with OpenBLAS limited to 1 thread and with all cores (threadpoolctl).
Writes: the corpus is added in batches of 1000 with the exact threshold at half of it; the
slowest ``add`` shows whether a writer ever waits for the HNSW build (it ran inside ``add``
before: 3.1 s at 20k clustered rows, 82 s at 100k).

    python benchmarks/bench_dense.py                     # 10k and 100k, plus MiniLM
    python benchmarks/bench_dense.py --sizes 10000 --skip-embed
    python benchmarks/bench_dense.py --sizes --skip-embed --search-width 100000 \
        --recall-expansions 64 128 256
    python benchmarks/bench_dense.py --corpus clustered peers --sizes --skip-embed \
        --build-order 200000 --build-threads 2
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from rcpkit.engine.config import GRAPH_DTYPES
from rcpkit.engine.indexes.dense import DenseIndex, usearch_format
from rcpkit.engine.indexes.dense.hnsw import BUILD_BATCH, insertion_order, unreachable
from rcpkit.engine.indexes.dense.index import SEARCH_WIDTH
from rcpkit.engine.models.embedding import minilm

DIMENSION = 384
SEARCH_CHECK_ROWS = 200_000
"""Past this many rows the build bench skips searching every row for itself (at 1M it takes
longer than the build); the walk over the links (``usearch_format.unlinked``) runs at every size."""


def unit_rows(matrix: np.ndarray) -> np.ndarray:
    return (matrix / np.linalg.norm(matrix, axis=1, keepdims=True)).astype(np.float32)


def numpy_top_k(
    corpus: np.ndarray, query: np.ndarray, k: int, allowed: np.ndarray | None
) -> np.ndarray:
    """The baseline: one matrix-vector product and argpartition, no index structure."""
    scores = corpus @ query
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    top = np.argpartition(-scores, k - 1)[:k]
    return top[np.argsort(-scores[top])]


def index_top_k(
    index: DenseIndex, query: np.ndarray, k: int, allowed: np.ndarray | None
) -> np.ndarray:
    return index.search(query, k, allow=allowed)[0]


def timed(
    run: Callable[[np.ndarray], np.ndarray], queries: np.ndarray
) -> tuple[list[set[int]], np.ndarray]:
    found, latencies = [], []
    for query in queries:
        start = time.perf_counter()
        rowids = run(query)
        latencies.append(time.perf_counter() - start)
        found.append(set(rowids.tolist()))
    return found, np.array(latencies) * 1000.0


def make_corpus(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    if kind == "random":
        return unit_rows(rng.standard_normal((n, DIMENSION)))
    centroids = unit_rows(rng.standard_normal((200, DIMENSION)))
    members = centroids[rng.integers(0, len(centroids), n)]
    return unit_rows(members + 0.06 * rng.standard_normal((n, DIMENSION)))


def bench_size(kind: str, n: int, n_queries: int, k: int, noise: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    corpus = make_corpus(kind, n, rng)
    picks = rng.choice(n, n_queries, replace=False)
    queries = unit_rows(corpus[picks] + noise * rng.standard_normal((n_queries, DIMENSION)))
    rowids = np.arange(n, dtype=np.int64)

    exact = DenseIndex(DIMENSION, exact_threshold=n + 1)
    exact.add(rowids, corpus)
    graph = DenseIndex(DIMENSION, exact_threshold=0)
    start = time.perf_counter()
    graph.add(rowids, corpus)
    add_ms = (time.perf_counter() - start) * 1000
    graph.wait_for_graph()
    build_s = time.perf_counter() - start

    print(f"\n== {kind} corpus  n={n:,}  d={DIMENSION}  queries={n_queries}  k={k}  "
          f"add returned in {add_ms:.0f} ms; background HNSW build {build_s:.1f} s "
          f"({n / build_s:,.0f} vectors/s)")
    print(f"{'filter':>7} {'method':<22} {'p50 ms':>8} {'p95 ms':>8} {'x numpy p50':>12} "
          f"{'recall@k':>9}")
    for label, fraction in (("none", None), ("1%", 0.01), ("50%", 0.5)):
        allowed = None if fraction is None else rng.random(n) < fraction
        truth, base = timed(partial(numpy_top_k, corpus, k=k, allowed=allowed), queries)
        with threadpool_limits(limits=1, user_api="blas"):
            single = timed(partial(index_top_k, exact, k=k, allowed=allowed), queries)
        runs = {
            "numpy (baseline)": (truth, base),
            "DenseIndex exact": timed(partial(index_top_k, exact, k=k, allowed=allowed), queries),
            "DenseIndex exact 1 BLAS": single,
            "DenseIndex HNSW": timed(partial(index_top_k, graph, k=k, allowed=allowed), queries),
        }
        base_p50 = float(np.percentile(base, 50))
        for method, (found, latency) in runs.items():
            recall = np.mean([len(f & t) / len(t) for f, t in zip(found, truth, strict=True)])
            p50, p95 = np.percentile(latency, [50, 95])
            print(f"{label:>7} {method:<22} {p50:8.3f} {p95:8.3f} {p50 / base_p50:12.2f} "
                  f"{recall:9.3f}")
    graph.close()


def bench_writes(kind: str, n: int, seed: int) -> None:
    """Grow an index past its exact threshold in batches; no write may wait for the graph."""
    corpus = make_corpus(kind, n, np.random.default_rng(seed))
    index = DenseIndex(DIMENSION, exact_threshold=n // 2)
    latencies = []
    for start in range(0, n, 1000):
        began = time.perf_counter()
        index.add(np.arange(start, start + 1000), corpus[start : start + 1000])
        latencies.append((time.perf_counter() - began) * 1000)
    searches = timed(partial(index_top_k, index, k=10, allowed=None), corpus[:50])[1]
    building = not index.wait_for_graph(0)
    began = time.perf_counter()
    index.wait_for_graph()
    print(f"\n== writes, {kind} n={n:,} in batches of 1000, exact threshold {n // 2:,}: add p50 "
          f"{np.percentile(latencies, 50):.1f} ms, slowest {max(latencies):.1f} ms; search p50 "
          f"{np.percentile(searches, 50):.2f} ms right after (graph still building: {building}); "
          f"build finished {time.perf_counter() - began:.1f} s later; tail {index.graph_tail}")
    index.close()


def bench_build(kind: str, n: int, seed: int, thread_counts: list[int],
                graph: dict[str, Any], expansions: list[int]) -> None:
    """Graph settle time of a bulk load per build-thread count, side by side, while a client
    thread keeps querying (exact search serves until the graph is published); then how many
    rows of the published graph no link leads to (the builder's own check), how many their own
    vector does not find (a search widened up to ef 256 for the rows a narrower one misses;
    up to ``SEARCH_CHECK_ROWS``) and recall@10 against exact search of the engine (the
    graph's candidates re-scored exactly) and of the graph alone at each of ``expansions``."""
    rng = np.random.default_rng(seed)
    corpus = make_corpus(kind, n, rng)
    probes = unit_rows(corpus[rng.choice(n, 64, replace=False)])
    picks = rng.choice(n, 200, replace=False)
    queries = unit_rows(corpus[picks] + 0.05 * rng.standard_normal((len(picks), DIMENSION)))
    print(f"\n== graph build, {kind} n={n:,} (one bulk add, exact threshold 1,000, {graph})")
    seconds = {}
    for threads in thread_counts:
        index = DenseIndex(DIMENSION, exact_threshold=1000, build_threads=threads, **graph)
        began = time.perf_counter()
        index.add(np.arange(n), corpus)
        served: list[float] = []
        done = threading.Event()

        def serve(index: DenseIndex = index, served: list[float] = served,
                  done: threading.Event = done) -> None:
            while not done.is_set():
                start = time.perf_counter()
                index.search(probes[len(served) % len(probes)], 10)
                served.append(time.perf_counter() - start)
                time.sleep(0.5)  # a client querying about twice a second, not a flood

        client = threading.Thread(target=serve, daemon=True)
        client.start()
        while not index.wait_for_graph(60):
            elapsed = time.perf_counter() - began
            print(f"  {elapsed:5.0f} s: {n - index.graph_pending:,} rows in the graph "
                  f"({(n - index.graph_pending) / elapsed:,.0f} rows/s)", flush=True)
        seconds[threads] = time.perf_counter() - began
        done.set()
        client.join()
        p50 = float(np.median(served)) * 1000 if served else float("nan")
        print(f"{threads} thread(s): settled in {seconds[threads]:7.1f} s "
              f"({n / seconds[threads]:,.0f} rows/s); {len(served)} queries served "
              f"meanwhile, p50 {p50:.1f} ms", flush=True)
        published = index._view.graph
        assert published is not None and index.graph_tail == published.orphans
        saved = np.frombuffer(published.index.save(), dtype=np.uint8)
        try:
            layout = usearch_format.parse(saved)
        except usearch_format.FormatError:
            unlinked: int | str = "?"
        else:
            unlinked = int(usearch_format.unlinked(saved, layout).sum())
        print(f"  rows no link leads to: {unlinked}; left out by the repair and searched "
              f"exactly: {published.orphans}", end="", flush=True)
        if n <= SEARCH_CHECK_ROWS:
            lost = int(unreachable(published.index, np.arange(n), corpus, threads).sum())
            published.index.expansion_search = index.expansion_search
            print(f"; rows not found by their own vector (ef up to 256): {lost}", end="")
        print(flush=True)
        truth = [set(rowids.tolist()) for rowids, _ in index.search_batch(queries, 10,
                                                                          exact=True)]
        engine = [set(rowids.tolist()) for rowids, _ in index.search_batch(queries, 10)]
        print(f"  recall@10 of the engine {mean_recall(engine, truth):.3f} "
              f"(expansion_search {index.expansion_search}); of the graph alone at "
              f"expansion_search", end="")
        for expansion in expansions:
            published.index.expansion_search = expansion
            from_graph = np.asarray(published.index.search(queries, 10).keys)
            print(f" {expansion}: {mean_recall(from_graph.reshape(len(queries), -1), truth):.3f}",
                  end="")
        print(flush=True)
        index.close()
    if 1 in seconds:
        for threads in seconds:
            if threads != 1:
                print(f"speed-up with {threads} threads: {seconds[1] / seconds[threads]:.2f}x")


def bench_search_width(n: int, expansions: list[int], queries: int) -> None:
    """Graph search on MiniLM vectors of real text (the peer corpus, ``peer_corpus.py``):
    p50 of ``DenseIndex.search`` and recall@k against exact search, for k = 10, 40 and 100
    and for k = 10 with a 50 % filter, at each ef_search of ``expansions``; next to the
    graph alone asked for only k (what the engine did before ``SEARCH_WIDTH``)."""
    import peer_corpus

    corpus = peer_corpus.load(n)
    vectors = corpus.query_vectors[:queries]
    index = DenseIndex(DIMENSION, exact_threshold=1000, build_threads=2)
    index.add(np.arange(n), corpus.vectors)
    index.wait_for_graph()
    published = index._view.graph
    assert published is not None
    print(f"\n== search width, peer corpus n={n:,}, {len(vectors)} queries "
          f"(SEARCH_WIDTH {SEARCH_WIDTH})")
    half = np.arange(n) % 2 == 1
    for k, allow in ((10, None), (40, None), (100, None), (10, half)):
        truth = [set(rowids.tolist()) for rowids, _ in index.search_batch(vectors, k,
                                                                          allow=allow,
                                                                          exact=True)]
        label = f"k {k:3}{', 50 % filter' if allow is not None else ''}"
        for expansion in expansions:
            published.index.expansion_search = expansion
            index.expansion_search = expansion
            latencies, found = [], []
            for query in vectors:
                start = time.perf_counter()
                found.append(index.search(query, k, allow=allow)[0])
                latencies.append(time.perf_counter() - start)
            line = (f"{label} ef_search {expansion:3}: p50 {np.median(latencies) * 1000:.3f} "
                    f"ms, recall@k {mean_recall(found, truth):.4f}")
            if allow is None:
                alone = np.asarray(published.index.search(vectors, k).keys)
                line += (" (graph asked for k alone: "
                         f"{mean_recall(alone.reshape(len(vectors), -1), truth):.4f})")
            print(line, flush=True)
    index.close()


def mean_recall(found: Iterable[Iterable[int]], truth: list[set[int]]) -> float:
    return float(np.mean([len(set(map(int, hits)) & exact) / len(exact)
                          for hits, exact in zip(found, truth, strict=True)]))


def bench_usearch_alone(kind: str, n: int, seed: int, threads: int,
                        graph: dict[str, Any]) -> None:
    """usearch's own build rate with DenseIndex's graph settings and no self-check, no
    queries: the ceiling the background build is measured against."""
    corpus = make_corpus(kind, n, np.random.default_rng(seed))
    probe = DenseIndex(DIMENSION, **graph)
    index = probe._new_graph()
    began = time.perf_counter()
    for start in range(0, n, BUILD_BATCH):
        index.add(np.arange(start, min(n, start + BUILD_BATCH)),
                  corpus[start:start + BUILD_BATCH], threads=threads)
    seconds = time.perf_counter() - began
    print(f"usearch alone, {kind} n={n:,}, {threads} thread(s): {seconds:.1f} s "
          f"({n / seconds:,.0f} rows/s)")


def bench_build_order(kind: str, n: int, seed: int, threads: int) -> None:
    """usearch alone (DenseIndex's graph settings) building the same rows in random order and
    in ``insertion_order`` (what a fresh bulk build of ``ORDERED_BUILD_ROWS`` or more uses),
    alternately: build time and recall@10 at ef_search 128 and 256. ``kind`` "peers" is
    the peer corpus (MiniLM vectors of real text) with its own queries."""
    rng = np.random.default_rng(seed)
    if kind == "peers":
        import peer_corpus

        loaded = peer_corpus.load(n)
        corpus, queries = loaded.vectors, loaded.query_vectors[:300]
    else:
        corpus = make_corpus(kind, n, rng)
        picks = rng.choice(n, 200, replace=False)
        queries = unit_rows(corpus[picks] + 0.05 * rng.standard_normal((len(picks), DIMENSION)))
    truth = [set(row.tolist()) for row in np.argsort(-(queries @ corpus.T), axis=1)[:, :10]]
    print(f"\n== build order, {kind} n={n:,}, usearch alone, {threads} thread(s)")
    for name in ("random", "ordered", "random", "ordered"):
        began = time.perf_counter()
        order = (rng.permutation(n) if name == "random"
                 else insertion_order(corpus, np.arange(n)))
        ordering = time.perf_counter() - began
        graph = DenseIndex(DIMENSION)._new_graph()
        for start in range(0, n, BUILD_BATCH):
            batch = order[start:start + BUILD_BATCH]
            graph.add(batch, corpus[batch], threads=threads)
        seconds = time.perf_counter() - began
        recalls = []
        for expansion in (128, 256):
            graph.expansion_search = expansion
            found = np.asarray(graph.search(queries, 10).keys).reshape(len(queries), -1)
            recalls.append(mean_recall(found, truth))
        print(f"{name:>8}: {seconds:6.1f} s (ordering {ordering:.1f} s), recall@10 at ef 128 "
              f"{recalls[0]:.4f}, at ef 256 {recalls[1]:.4f}", flush=True)


def bench_embed(n_short: int, n_long: int) -> None:
    embedder = minilm()
    embedder.embed(["warm up"])
    short = [f"How do I fix crack number {i} in a concrete floor?" for i in range(n_short)]
    paragraph = ("Reinforced concrete slabs crack when shrinkage and thermal movement are "
                 "restrained; joints, curing and reinforcement ratios control crack widths. ")
    long = [f"{i}. " + paragraph * 6 for i in range(n_long)]
    print(f"\n== MiniLM int8 ONNX embed throughput ({embedder.model.threads} threads)")
    rates = {}
    for label, texts in (("short (~12 words)", short), ("long (~200 words, cut at 256 tok)", long)):
        start = time.perf_counter()
        embedder.embed(texts)
        rates[label] = len(texts) / (time.perf_counter() - start)
        print(f"{label:<36} {len(texts):>6} texts  {rates[label]:8.1f} texts/s")
    values = list(rates.values())
    print(f"short/long throughput ratio: {values[0] / values[1]:.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000])
    parser.add_argument("--corpus", choices=["random", "clustered", "peers"], nargs="+",
                        default=["random"])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--query-noise", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-embed", action="store_true")
    parser.add_argument("--skip-writes", action="store_true")
    parser.add_argument("--build", type=int, nargs="*", default=[], metavar="N",
                        help="also time graph builds of N vectors (see --build-threads)")
    parser.add_argument("--usearch-alone", action="store_true",
                        help="with --build, also time usearch's own build (the ceiling)")
    parser.add_argument("--build-threads", type=int, nargs="+", default=[1, 2],
                        help="build-thread counts to time, side by side")
    parser.add_argument("--expansion-add", type=int, default=None,
                        help="with --build, the graph's ef_construction (DenseIndex's default "
                             "otherwise)")
    parser.add_argument("--expansion-search", type=int, default=None,
                        help="with --build, the graph's ef_search at query time")
    parser.add_argument("--graph-dtype", choices=list(GRAPH_DTYPES), default=None,
                        help="with --build, how the graph keeps its vectors")
    parser.add_argument("--recall-expansions", type=int, nargs="+", default=[128, 256],
                        help="with --build, the ef_search values the graph's recall is given at")
    parser.add_argument("--search-width", type=int, nargs="*", default=[], metavar="N",
                        help="also time graph search at each --recall-expansions ef_search "
                             "on N chunks of the peer corpus (MiniLM vectors of real text)")
    parser.add_argument("--build-order", type=int, nargs="*", default=[], metavar="N",
                        help="also build N rows of each --corpus (or 'peers') with usearch "
                             "alone in random and in the bulk build's order")
    parser.add_argument("--embed-short", type=int, default=1000)
    parser.add_argument("--embed-long", type=int, default=200)
    args = parser.parse_args()
    for kind in args.corpus:
        for n in args.build_order:
            bench_build_order(kind, n, args.seed, max(args.build_threads))
        if kind == "peers":
            continue  # the other benches make their own corpus
        for n in args.sizes:
            bench_size(kind, n, args.queries, args.k, args.query_noise, args.seed)
            if not args.skip_writes:
                bench_writes(kind, n, args.seed)
        graph = {name: value for name, value in (("expansion_add", args.expansion_add),
                                                 ("expansion_search", args.expansion_search),
                                                 ("graph_dtype", args.graph_dtype))
                 if value is not None}
        for n in args.build:
            bench_build(kind, n, args.seed, args.build_threads, graph, args.recall_expansions)
            if args.usearch_alone:
                for threads in args.build_threads:
                    bench_usearch_alone(kind, n, args.seed, threads, graph)
    for n in args.search_width:
        bench_search_width(n, args.recall_expansions, args.queries)
    if not args.skip_embed:
        bench_embed(args.embed_short, args.embed_long)


if __name__ == "__main__":
    main()
