"""Storage backends side by side: embedded SQLite vs PostgreSQL + pgvector.

``scale``: for each size (10k and 100k chunks by default) the same synthetic corpus —
Zipfian pseudo-word text (bench_lexical.py) and random unit vectors (d=384, served by
``_common.LookupEmbedder`` so the model is bypassed) — is ingested through ``Engine.add``
(1000 single-chunk documents per call) into an engine on SQLite and one on PostgreSQL. Then
``Engine.search`` is timed (k=10, candidateK=100, includeText false) for sparse, dense and
hybrid (RRF), unfiltered and with a §8 filter keeping 1% of the chunks, on SQLite and on
PostgreSQL with each ``pg_recall``: ``database`` (the ingesting engine) and ``memory`` (a
second engine opened cold on the same database, with an empty data directory, so it builds its
indexes from the record). Prints ingest documents/s, the cold ``Engine.open`` time, p50/p95
latency per configuration and each PostgreSQL configuration's ratio to SQLite.

``lexical``: nDCG@10, Recall@10 and MRR@10 on the English FAQ (``faq_to_beir("en")``) for the
two lexical rankings of :class:`PostgresStore` — BM25 from tables and ``tsvector`` with
``ts_rank`` — next to the embedded in-memory BM25, at the store level.

The PostgreSQL server is a fresh embedded one (fsync on, as SQLite runs ``synchronous=FULL``)
in a temporary directory, stopped at the end.

    python benchmarks/bench_backends.py lexical
    python benchmarks/bench_backends.py scale                 # 10k and 100k chunks
    python benchmarks/bench_backends.py scale --sizes 2000 --queries 50
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from _common import LookupEmbedder, ingest, percentiles, stamp, unit_vectors
from bench_lexical import synthetic_corpus

from rcpkit.engine import pgserver
from rcpkit.engine.config import EngineConfig, IndexConfig, StoreConfig
from rcpkit.engine.core import Engine
from rcpkit.engine.indexes.lexical import LexicalIndex
from rcpkit.engine.models.embedding import HashingEmbedder
from rcpkit.engine.store import ChunkWrite, DocumentWrite
from rcpkit.engine.store.postgres import LexicalRanking, PostgresStore
from rcpkit.engine.types import SearchRequest
from rcpkit.eval.datasets import faq_to_beir
from rcpkit.eval.metrics import evaluate
from rcpkit.protocol.filters import Condition

MODES = ("sparse", "dense", "hybrid")
FILTERS: dict[str, Condition | None] = {"none": None, "1%": Condition("bucket", "eq", 7)}
DEPTH = 100


def timed(run: Callable[[int], object], count: int) -> tuple[float, float]:
    """p50 and p95 in ms of ``run(i)`` for ``i`` in ``range(count)``."""
    samples = []
    for i in range(count):
        start = time.perf_counter()
        run(i)
        samples.append((time.perf_counter() - start) * 1000)
    p50, p95, _ = percentiles(samples)
    return p50, p95


def search_latencies(engine: Engine, queries: Sequence[str]) -> dict[str, tuple[float, float]]:
    """p50/p95 of ``Engine.search`` per ``mode/filter`` column."""
    latencies = {}
    for label, condition in FILTERS.items():
        for mode in MODES:
            requests = [SearchRequest(query=query, k=10, mode=mode, candidate_k=DEPTH,
                                      filter=condition, include_text=False)
                        for query in queries]
            latencies[f"{mode}/{label}"] = timed(lambda i, r=requests: engine.search(r[i]),
                                                 len(requests))
    return latencies


def print_row(size: int, name: str, rate: str, opened: str,
              latencies: dict[str, tuple[float, float]]) -> None:
    cells = " ".join(f"{p50:>14.2f} {p95:>7.2f}" for p50, p95 in latencies.values())
    print(f"{size:>8,} {name:<12} {rate:>14} {opened:>7} {cells}", flush=True)


def scale(sizes: Sequence[int], query_count: int, server: pgserver.LocalPostgres,
          work: Path) -> None:
    print(f"{'chunks':>8} {'backend':<12} {'ingest docs/s':>14} {'open s':>7} "
          + " ".join(f"{f'{m}/{f} p50 p95':>22}" for f in FILTERS for m in MODES))
    for size in sizes:
        texts, queries = synthetic_corpus(size, seed=size)
        queries = queries[:query_count]
        vectors = unit_vectors(size, seed=size)
        rng = np.random.default_rng(size + 1)
        noisy = vectors[rng.integers(0, size, len(queries))] + 0.05 * rng.standard_normal(
            (len(queries), vectors.shape[1]), dtype=np.float32)
        embedder = LookupEmbedder()
        embedder.register(texts, vectors)
        embedder.register(queries, noisy / np.linalg.norm(noisy, axis=1, keepdims=True))
        metas = [{"bucket": i % 100} for i in range(size)]
        dsn = pgserver.create_database(server, f"scale_{size}")
        rows: dict[str, dict[str, tuple[float, float]]] = {}

        for backend in ("sqlite", "pg/database"):
            config = EngineConfig(data_dir=work / f"{backend.replace('/', '-')}-{size}",
                                  index=IndexConfig(save_every=1_000_000))
            store = PostgresStore.open(dsn) if backend != "sqlite" else None
            engine = Engine.open(config, embedder=embedder, store=store)
            start = time.perf_counter()
            ingest(engine, texts, metas)
            rate = size / (time.perf_counter() - start)
            rows[backend] = search_latencies(engine, queries)
            engine.close()
            print_row(size, backend, f"{rate:,.0f}", "-", rows[backend])
        for recall in ("database", "memory"):
            config = EngineConfig(data_dir=work / f"cold-{recall}-{size}",
                                  store=StoreConfig(pg_recall=recall),
                                  index=IndexConfig(save_every=1_000_000))
            start = time.perf_counter()
            engine = Engine.open(config, embedder=embedder, store=PostgresStore.open(dsn))
            opened = time.perf_counter() - start
            if recall == "memory":
                rows["pg/memory"] = search_latencies(engine, queries)
                print_row(size, "pg/memory", "-", f"{opened:.2f}", rows["pg/memory"])
            else:
                print(f"{size:>8,} {'pg/database':<12} {'(cold open)':>14} {opened:>7.2f}")
            engine.close()
        for name in ("pg/database", "pg/memory"):
            ratios = " ".join(f"{rows[name][k][0] / rows['sqlite'][k][0]:>14.2f} {'':>7}"
                              for k in rows["sqlite"])
            print(f"{size:>8,} {name + '/sqlite':<12} {'':>14} {'':>7} {ratios}", flush=True)


def lexical(server: pgserver.LocalPostgres) -> None:
    dataset = faq_to_beir("en")
    embedder = HashingEmbedder(64)  # vectors are stored but play no part in lexical ranking
    bodies = [doc.body() for doc in dataset.corpus]
    vectors = embedder.embed(bodies, "document")
    writes = [DocumentWrite(doc_id=doc.id, text=body, meta={}, filter_meta={},
                            content_hash=doc.id,
                            chunks=[ChunkWrite(index=0, start=0, end=len(body), text=body,
                                               context="", headings=(), vector=vector)])
              for doc, body, vector in zip(dataset.corpus, bodies, vectors, strict=True)]
    queries = dataset.judged_queries()
    runs: dict[str, dict[str, list[str]]] = {}
    ranking: LexicalRanking
    for ranking in ("bm25", "tsvector"):
        store = PostgresStore(pgserver.create_database(server, f"faq_{ranking}"),
                              lexical=ranking)
        seq = store.write(writes, []).seq
        doc_of = {r: c.doc_id for r, c in store.chunks(store.visible_rowids(seq).tolist()).items()}
        runs[f"postgres {ranking}"] = {
            qid: [doc_of[int(r)] for r in store.lexical_search(text, 10, seq)[0]]
            for qid, text in queries.items()}
        store.close()
    index = LexicalIndex()
    index.add(np.arange(len(bodies)), bodies)
    runs["in-memory BM25"] = {
        qid: [dataset.corpus[int(r)].id for r in index.search(text, 10)[0]]
        for qid, text in queries.items()}
    print(f"English FAQ: {len(dataset.corpus)} documents, {len(queries)} queries")
    print(f"{'ranking':<18} {'nDCG@10':>8} {'Recall@10':>10} {'MRR@10':>8}")
    for name, run in runs.items():
        means = evaluate(run, dataset.qrels).means
        print(f"{name:<18} {means['nDCG@10']:>8.4f} {means['Recall@10']:>10.4f} "
              f"{means['MRR@10']:>8.4f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=("scale", "lexical"))
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rcpkit-bench-backends-"))
    print(f"# bench_backends {args.part} — {stamp()}")
    server = pgserver.start(work / "postgres")
    try:
        if args.part == "scale":
            scale(args.sizes, args.queries, server, work)
        else:
            lexical(server)
    finally:
        pgserver.stop(server.data_dir)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
