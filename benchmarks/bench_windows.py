"""Sentence-window dense index: what the window vectors cost at search time, build and memory.

One :class:`~rcpkit.engine.indexes.windows.SentenceWindowIndex` holds ``--size`` chunk vectors and
window vectors in SciFact-train's proportions (71% of the abstracts run past the encoder's
head, with 1.52 windows each on average: 1.08 windows per chunk). Vectors are clustered unit
vectors (bench_dense.py's ``clustered`` corpus); a window is its chunk's vector plus noise.
Queries are noisy corpus vectors. Each query is searched, at the candidate depth the engine
uses (100), by the whole-text index alone (what a dense index without windows does) and by the
window index (the same search, its candidates re-scored with their windows), one right after
the other (alternating which goes first), unfiltered and with a random 50% and 1% of the
chunks allowed, on the HNSW path (after the graph is built) and the exact path (a seeded
request, §7.7.1). Read the ratio: on a shared machine the
milliseconds move, the pairing keeps the ratio.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_windows.py --size 100000
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _common import percentiles, rss_bytes, stamp
from bench_dense import DIMENSION, make_corpus, unit_rows

from rcpkit.engine.indexes.windows import SentenceWindowIndex, WindowVectors

DEPTH = 100
LONG_SHARE = 3681 / 5183
WINDOWS_PER_LONG = 5583 / 3681


def window_vectors(corpus: np.ndarray, rng: np.random.Generator) -> WindowVectors:
    long_rows = np.flatnonzero(rng.random(len(corpus)) < LONG_SHARE)
    extra = rng.random(len(long_rows)) < WINDOWS_PER_LONG - 1
    owners = np.sort(np.concatenate([long_rows, long_rows[extra]]))
    noise = 0.04 * rng.standard_normal((len(owners), DIMENSION))
    return WindowVectors(owners.astype(np.int64), unit_rows(corpus[owners] + noise))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    corpus = make_corpus("clustered", args.size, rng)
    windows = window_vectors(corpus, rng)
    print(f"bench_windows {stamp()}  chunks={args.size:,}  windows={len(windows.owners):,} "
          f"({len(windows.owners) / args.size:.2f} per chunk)  depth={DEPTH}")
    before = rss_bytes()
    index = SentenceWindowIndex.create(DIMENSION, enabled=True)
    started = time.perf_counter()
    for start in range(0, args.size, 1000):
        rows = np.arange(start, min(start + 1000, args.size))
        mine = (windows.owners >= rows[0]) & (windows.owners <= rows[-1])
        index.add(rows, corpus[rows], WindowVectors(windows.owners[mine], windows.vectors[mine]))
    added = time.perf_counter() - started
    index.wait_for_graph()
    settled = time.perf_counter() - started
    vector_bytes = (index.count + index.window_count) * DIMENSION * 4
    print(f"add {added:.1f} s, graph built after {settled:.1f} s; vectors "
          f"{index.count * DIMENSION * 4 / 2**20:.0f} MiB whole + "
          f"{index.window_count * DIMENSION * 4 / 2**20:.0f} MiB windows = "
          f"{vector_bytes / 2**20:.0f} MiB; RSS +{(rss_bytes() - before) / 2**20:.0f} MiB")
    picks = rng.integers(0, args.size, args.queries)
    queries = unit_rows(corpus[picks] + 0.05 * rng.standard_normal((args.queries, DIMENSION)))
    filters = {"none": None, "50%": rng.random(args.size) < 0.5,
               "1%": rng.random(args.size) < 0.01}
    print(f"\n{'path':<8}{'filter':<8}{'whole p50':>11}{'windows p50':>13}{'ratio':>8}"
          f"{'whole p95':>11}{'windows p95':>13}")
    for exact in (False, True):
        for label, allow in filters.items():
            timings: dict[str, list[float]] = {"whole": [], "windows": []}
            for number, query in enumerate(queries):
                order = ("whole", "windows") if number % 2 else ("windows", "whole")
                for which in order:
                    search = index.whole.search if which == "whole" else index.search
                    begun = time.perf_counter()
                    search(query, DEPTH, allow=allow, exact=exact)
                    timings[which].append((time.perf_counter() - begun) * 1000)
            whole, windowed = percentiles(timings["whole"]), percentiles(timings["windows"])
            print(f"{'exact' if exact else 'hnsw':<8}{label:<8}{whole[0]:>9.2f}ms"
                  f"{windowed[0]:>11.2f}ms{windowed[0] / whole[0]:>7.2f}x"
                  f"{whole[1]:>9.2f}ms{windowed[1]:>11.2f}ms", flush=True)
    index.close()


if __name__ == "__main__":
    main()
