"""rcpkit against the engines users would pick instead: Chroma, LanceDB, Qdrant (issue 19).

All engines get the same chunks, metadata and precomputed MiniLM vectors (peer_corpus.py:
SciFact sentence windows plus the Zaragoza FAQ, cached on disk), at 10k and 100k chunks, and
answer the same queries (SciFact claims and FAQ questions) with ``k = 10``:

- ``dense``: nearest neighbours of the query vector (cosine);
- ``dense 1%`` / ``dense 50%``: the same under a metadata filter (``group == 0`` / ``half == 1``);
- ``sparse``: BM25 over the chunk text (rcpkit, LanceDB's native full-text index, bm25s);
- ``hybrid``: dense and sparse fused by RRF (rcpkit over 100 candidates a side, LanceDB's own
  hybrid query, the floor over 100 a side).

The *floor* is no engine: numpy (one float32 matrix-vector product and argpartition) plus
bm25s fed rcpkit's analyzer tokens, fused with ``rcpkit.fusion.rrf``. Chroma runs embedded
(``PersistentClient``), LanceDB embedded without a vector index (exact scan, the right choice
at these sizes), Qdrant in local mode (``QdrantClient(path=...)``, its in-process engine).
Neither Chroma nor Qdrant local has a lexical ranking, so they answer the dense modes only.

Per engine and size: ingest rate (chunks/s until searchable; rcpkit's background HNSW graph,
built past 50k rows, is reported separately as *graph settle*), p50/p99 per mode with queries
interleaved across engines (query ``i`` goes to every engine, in an order that rotates, before
query ``i + 1``), recall@10 of the dense modes against exact float32 search, bytes on disk per
chunk, and — in a fresh process per engine — cold open (open the saved store and answer one
query) and RSS per chunk (resident memory after open and 50 queries, minus before open).

The peers are heavy; they live in their own virtualenv (the ``peers`` extra)::

    python3 -m venv ../venv-peers && ../venv-peers/bin/pip install -e '.[peers]'
    OPENBLAS_NUM_THREADS=1 ../venv-peers/bin/python benchmarks/bench_peers.py
    ../venv-peers/bin/python benchmarks/bench_peers.py --sizes 2000 --queries 30   # smoke run
    OPENBLAS_NUM_THREADS=1 ../venv-peers/bin/python benchmarks/bench_peers.py --sizes 10000 \
        --engines rcpkit numpy+bm25s --cpu-time   # rcpkit against the floor, by CPU time

The first run embeds ~50k texts with MiniLM (minutes) and caches the vectors.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

os.environ.setdefault("LANCE_LOG", "error")  # lance warns on every query about a future change

import numpy as np
from _common import LookupEmbedder, open_engine, percentiles, rss_bytes, stamp
from bench_dense import numpy_top_k
from bench_lexical import Bm25s
from peer_corpus import PeerCorpus, load, query_set

from rcpkit import fusion
from rcpkit.engine.text import Analyzer
from rcpkit.engine.types import DocumentIn, SearchRequest

K = 10
DEPTH = 100
"""Candidates a side for hybrid fusion."""
BATCH = 1000
MODES = ("dense", "dense 1%", "dense 50%", "sparse", "hybrid")
FILTERS: dict[str, tuple[str, int] | None] = {
    "dense": None, "dense 1%": ("group", 0), "dense 50%": ("half", 1)}
RSS_QUERIES = 50

Query = tuple[str, np.ndarray]


def _size_of(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


class Peer:
    """One engine under test: ingest, answer a mode, reopen from disk."""

    name = ""
    modes: tuple[str, ...] = MODES
    libraries: tuple[str, ...] = ()
    """Imported before a cold open is timed: starting Python is not opening a store."""
    max_size: int | None = None

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def ingest(self, corpus: PeerCorpus) -> None:
        raise NotImplementedError

    def settle(self) -> None:
        """Wait for background index work started by the ingest (rcpkit's graph)."""

    def query(self, mode: str, text: str, vector: np.ndarray) -> list[int]:
        raise NotImplementedError

    def close(self) -> None:
        """Release the store; it stays on disk for :meth:`open`."""

    def open(self, corpus: PeerCorpus) -> None:
        """Open the store :meth:`ingest` left on disk."""
        raise NotImplementedError


class Rcpkit(Peer):
    name = "rcpkit"
    overrides: ClassVar[dict[str, Any]] = {}
    """Engine settings of this run (``--dense-exact-threshold``)."""

    def _embedder(self, corpus: PeerCorpus) -> LookupEmbedder:
        lookup = LookupEmbedder()
        lookup.register(corpus.texts, corpus.vectors)
        lookup.register(corpus.queries, corpus.query_vectors)
        return lookup

    def ingest(self, corpus: PeerCorpus) -> None:
        self.engine = open_engine(self.directory, self._embedder(corpus),
                                  field_types={"group": "int", "half": "int"}, **self.overrides)
        metas = corpus.metas()
        for start in range(0, len(corpus.texts), BATCH):
            self.engine.add([DocumentIn(text=text, id=str(start + i), meta=meta)
                             for i, (text, meta) in enumerate(zip(
                                 corpus.texts[start:start + BATCH], metas[start:start + BATCH],
                                 strict=True))])

    def settle(self) -> None:
        self.engine.wait_for_indexes()

    def query(self, mode: str, text: str, vector: np.ndarray) -> list[int]:
        where = FILTERS.get(mode)
        request = SearchRequest(
            query=text, k=K, mode=mode.split()[0], candidate_k=DEPTH if mode == "hybrid" else K,
            include_text=False,
            filter=None if where is None else {"field": where[0], "op": "eq", "value": where[1]})
        return [int(hit.doc_id) for hit in self.engine.search(request).hits]

    def close(self) -> None:
        self.engine.close()

    def open(self, corpus: PeerCorpus) -> None:
        self.engine = open_engine(self.directory, self._embedder(corpus), **self.overrides)


class Floor(Peer):
    """numpy + bm25s: the cost of the search itself, with no engine around it."""

    name = "numpy+bm25s"
    libraries = ("bm25s",)

    def ingest(self, corpus: PeerCorpus) -> None:
        self.vectors = np.ascontiguousarray(corpus.vectors, dtype=np.float32)
        metas = corpus.metas()
        self.masks = {mode: np.asarray([m[where[0]] == where[1] for m in metas])
                      for mode, where in FILTERS.items() if where is not None}
        analyzer = Analyzer()
        self.bm25 = Bm25s(analyzer, analyzer.tokens_batch(corpus.texts))
        self.directory.mkdir(parents=True, exist_ok=True)
        np.save(self.directory / "vectors.npy", self.vectors)
        np.savez(self.directory / "masks.npz", *self.masks.values())
        self.bm25.model.save(str(self.directory / "bm25s"))

    def query(self, mode: str, text: str, vector: np.ndarray) -> list[int]:
        if mode == "sparse":
            return self.bm25.search(text, K)
        if mode == "hybrid":
            dense = numpy_top_k(self.vectors, vector, DEPTH, None).tolist()
            lists = [[(str(r), 0.0) for r in dense],
                     [(str(r), 0.0) for r in self.bm25.search(text, DEPTH)]]
            return [int(item.key) for item in fusion.rrf(lists)[:K]]
        return numpy_top_k(self.vectors, vector, K, self.masks.get(mode)).tolist()

    def open(self, corpus: PeerCorpus) -> None:
        self.vectors = np.load(self.directory / "vectors.npy")
        with np.load(self.directory / "masks.npz") as saved:
            filtered = [mode for mode, where in FILTERS.items() if where is not None]
            self.masks = {mode: saved[f"arr_{i}"] for i, mode in enumerate(filtered)}
        self.bm25 = Bm25s.load(Analyzer(), self.directory / "bm25s")


class Chroma(Peer):
    name = "chroma"
    modes = ("dense", "dense 1%", "dense 50%")
    libraries = ("chromadb",)

    def open(self, corpus: PeerCorpus) -> None:
        import chromadb

        self.client = chromadb.PersistentClient(
            path=str(self.directory), settings=chromadb.Settings(anonymized_telemetry=False))
        self.collection = self.client.get_or_create_collection(
            "chunks", metadata={"hnsw:space": "cosine"}, embedding_function=None)

    def ingest(self, corpus: PeerCorpus) -> None:
        self.open(corpus)
        batch = min(self.client.get_max_batch_size(), 5000)
        metas = corpus.metas()
        for start in range(0, len(corpus.texts), batch):
            end = start + batch
            self.collection.add(ids=[str(i) for i in range(start, min(end, len(metas)))],
                                embeddings=corpus.vectors[start:end],
                                documents=corpus.texts[start:end], metadatas=metas[start:end])

    def query(self, mode: str, text: str, vector: np.ndarray) -> list[int]:
        where = FILTERS[mode]
        found = self.collection.query(query_embeddings=vector[None, :], n_results=K,
                                      include=["distances"],
                                      where=None if where is None else {where[0]: where[1]})
        return [int(i) for i in found["ids"][0]]

    def close(self) -> None:
        del self.collection, self.client
        gc.collect()


class Lance(Peer):
    name = "lancedb"
    libraries = ("lancedb", "pyarrow")

    def open(self, corpus: PeerCorpus) -> None:
        import lancedb

        self.table = lancedb.connect(str(self.directory)).open_table("chunks")

    def ingest(self, corpus: PeerCorpus) -> None:
        import lancedb
        import pyarrow as pa

        vectors = pa.FixedSizeListArray.from_arrays(pa.array(corpus.vectors.ravel()),
                                                    corpus.vectors.shape[1])
        size = len(corpus.texts)
        data = pa.table({"id": np.arange(size), "text": corpus.texts,
                         "group": [i % 100 for i in range(size)],
                         "half": [i % 2 for i in range(size)], "vector": vectors})
        self.table = lancedb.connect(str(self.directory)).create_table("chunks", data=data)
        self.table.create_fts_index("text")

    def query(self, mode: str, text: str, vector: np.ndarray) -> list[int]:
        if mode == "sparse":
            search = self.table.search(text, query_type="fts").select(["id", "_score"])
        elif mode == "hybrid":
            search = (self.table.search(query_type="hybrid").vector(vector).text(text)
                      .select(["id"]))
        else:
            search = self.table.search(vector).metric("cosine").select(["id", "_distance"])
            where = FILTERS[mode]
            if where is not None:
                search = search.where(f"{where[0]} = {where[1]}", prefilter=True)
        return [int(row["id"]) for row in search.limit(K).to_list()]

    def close(self) -> None:
        del self.table
        gc.collect()


class Qdrant(Peer):
    name = "qdrant-local"
    modes = ("dense", "dense 1%", "dense 50%")
    libraries = ("qdrant_client",)
    max_size = 20_000
    """Local mode is Qdrant's in-process engine for development; its ingest slows with size
    (31 chunks/s at 2k on the shared host) and 100k would take hours."""

    def open(self, corpus: PeerCorpus) -> None:
        from qdrant_client import QdrantClient

        self.client = QdrantClient(path=str(self.directory))

    def ingest(self, corpus: PeerCorpus) -> None:
        from qdrant_client import models

        self.open(corpus)
        self.client.create_collection("chunks", vectors_config=models.VectorParams(
            size=corpus.vectors.shape[1], distance=models.Distance.COSINE))
        metas = corpus.metas()
        for start in range(0, len(metas), BATCH):
            self.client.upsert("chunks", points=models.Batch(
                ids=list(range(start, min(start + BATCH, len(metas)))),
                vectors=corpus.vectors[start:start + BATCH].tolist(),
                payloads=metas[start:start + BATCH]))

    def query(self, mode: str, text: str, vector: np.ndarray) -> list[int]:
        from qdrant_client import models

        where = FILTERS[mode]
        condition = None if where is None else models.Filter(must=[models.FieldCondition(
            key=where[0], match=models.MatchValue(value=where[1]))])
        found = self.client.query_points("chunks", query=vector.tolist(), limit=K,
                                         with_payload=False, query_filter=condition)
        return [int(point.id) for point in found.points]

    def close(self) -> None:
        self.client.close()


PEERS: dict[str, type[Peer]] = {peer.name: peer for peer in (Rcpkit, Floor, Chroma, Lance,
                                                            Qdrant)}


@dataclass
class Figures:
    ingest: float = 0.0
    settle: float = 0.0
    latency: dict[str, tuple[float, float]] = field(default_factory=dict)
    recall: dict[str, float] = field(default_factory=dict)
    disk: float = 0.0
    cold_open_ms: float = 0.0
    rss: float = 0.0


def _exact(corpus: PeerCorpus, queries: Sequence[Query]) -> dict[str, list[set[int]]]:
    """Exact float32 top-10 of each dense mode: the reference for recall@10."""
    metas = corpus.metas()
    truth = {}
    for mode, where in FILTERS.items():
        mask = None if where is None else np.asarray([m[where[0]] == where[1] for m in metas])
        truth[mode] = [set(numpy_top_k(corpus.vectors, vector, K, mask).tolist())
                       for _, vector in queries]
    return truth


def _interleaved(peers: Sequence[Peer], mode: str, queries: Sequence[Query],
                 clock: Callable[[], float] = time.perf_counter
                 ) -> dict[str, tuple[list[float], list[list[int]]]]:
    """Per peer: latency samples (ms, by ``clock``) and results, query by query, the order
    rotating."""
    taking = [peer for peer in peers if mode in peer.modes]
    out: dict[str, tuple[list[float], list[list[int]]]] = {p.name: ([], []) for p in taking}
    for peer in taking:  # warm-up: first-query costs (lazy loads, caches) are not latency
        peer.query(mode, *queries[0])
    for number, (text, vector) in enumerate(queries):
        for offset in range(len(taking)):
            peer = taking[(number + offset) % len(taking)]
            start = clock()
            found = peer.query(mode, text, vector)
            out[peer.name][0].append((clock() - start) * 1000)
            out[peer.name][1].append(found)
    return out


def _child(name: str, directory: Path) -> None:
    """In a fresh process: cold open and resident memory of one saved store (prints JSON)."""
    texts, vectors = query_set()
    corpus = PeerCorpus([], np.zeros((0, vectors.shape[1]), np.float32), texts, vectors)
    queries = list(zip(texts, vectors, strict=True))[:RSS_QUERIES]
    peer = PEERS[name](directory)
    for library in peer.libraries:
        importlib.import_module(library)
    gc.collect()
    before = rss_bytes()
    start = time.perf_counter()
    peer.open(corpus)
    peer.query("dense", *queries[0])
    cold = (time.perf_counter() - start) * 1000
    for text, vector in queries:
        for mode in peer.modes:
            peer.query(mode, text, vector)
    print(json.dumps({"cold_open_ms": cold, "rss_bytes": rss_bytes() - before}))


def _override_arguments() -> list[str]:
    """The command-line options that recreate this run's rcpkit settings in a child."""
    threshold = Rcpkit.overrides.get("dense", {}).get("exact_threshold")
    return [] if threshold is None else ["--dense-exact-threshold", str(threshold)]


def bench_size(size: int, names: Sequence[str], query_count: int, work: Path,
               clock: Callable[[], float] = time.perf_counter) -> dict[str, Figures]:
    corpus = load(size)
    queries: list[Query] = list(zip(corpus.queries, corpus.query_vectors, strict=True))
    queries = [queries[i] for i in
               np.random.default_rng(size).permutation(len(queries))[:query_count]]
    names = [name for name in names if (PEERS[name].max_size or size) >= size]
    figures = {name: Figures() for name in names}
    peers = []
    for name in names:
        print(f"… {size}: ingest {name}", file=sys.stderr, flush=True)
        peer = PEERS[name](work / f"{name}-{size}")
        start = time.perf_counter()
        peer.ingest(corpus)
        figures[name].ingest = size / (time.perf_counter() - start)
        start = time.perf_counter()
        peer.settle()
        figures[name].settle = time.perf_counter() - start
        peers.append(peer)
    truth = _exact(corpus, queries)
    for mode in MODES:
        print(f"… {size}: {mode}", file=sys.stderr, flush=True)
        for name, (samples, results) in _interleaved(peers, mode, queries, clock).items():
            p50, _, p99 = percentiles(samples)
            figures[name].latency[mode] = (p50, p99)
            if mode in truth:
                figures[name].recall[mode] = float(np.mean(
                    [len(truth[mode][i] & set(found)) / K for i, found in enumerate(results)]))
    for peer in peers:
        peer.close()
        figures[peer.name].disk = _size_of(peer.directory) / size
        reply = subprocess.run(
            [sys.executable, __file__, "--child", peer.name, str(peer.directory),
             *_override_arguments()],
            check=True, capture_output=True, text=True, env={**os.environ,
                                                            "OPENBLAS_NUM_THREADS": "1"})
        child = json.loads(reply.stdout.strip().splitlines()[-1])
        figures[peer.name].cold_open_ms = child["cold_open_ms"]
        figures[peer.name].rss = child["rss_bytes"] / size
        shutil.rmtree(peer.directory, ignore_errors=True)
    return figures


def report(results: dict[int, dict[str, Figures]], clock: str) -> None:
    print(f"\nrcpkit against Chroma, LanceDB and Qdrant local — {stamp()} — "
          f"{os.cpu_count()} cores, k={K}, latency by {clock}")
    for size, figures in results.items():
        names = list(figures)
        print(f"\n{size} chunks — p50 / p99 ms (recall@10 of the dense modes)")
        print(f"{'mode':<10}" + "".join(f"{name:>24}" for name in names))
        for mode in MODES:
            cells = []
            for name in names:
                if mode not in figures[name].latency:
                    cells.append(f"{'—':>24}")
                    continue
                p50, p99 = figures[name].latency[mode]
                recall = figures[name].recall.get(mode)
                note = f" ({recall:.2f})" if recall is not None else ""
                cells.append(f"{f'{p50:.2f} / {p99:.2f}{note}':>24}")
            print(f"{mode:<10}" + "".join(cells))
        ours = figures.get("rcpkit")
        if ours is not None:
            print("p50 ratio, engine / rcpkit (> 1: rcpkit is faster)")
            for mode in MODES:
                base = ours.latency[mode][0]
                print(f"{mode:<10}" + "".join(
                    f"{figures[n].latency[mode][0] / base:>24.2f}" if mode in figures[n].latency
                    else f"{'—':>24}" for n in names))
        rows: list[tuple[str, Callable[[Figures], str]]] = [
            ("ingest chunks/s", lambda f: f"{f.ingest:.0f}"),
            ("graph settle s", lambda f: f"{f.settle:.1f}"),
            ("cold open ms", lambda f: f"{f.cold_open_ms:.0f}"),
            ("disk bytes/chunk", lambda f: f"{f.disk:.0f}"),
            ("RSS bytes/chunk", lambda f: f"{f.rss:.0f}"),
        ]
        for label, render in rows:
            print(f"{label:<18}" + "".join(f"{render(figures[n]):>24}" for n in names)[6:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--engines", nargs="+", default=list(PEERS), choices=list(PEERS))
    parser.add_argument("--cpu-time", action="store_true",
                        help="time queries by the calling thread's CPU time, not wall time: "
                             "fair between in-process engines that search on that thread "
                             "(rcpkit, the floor) on a busy host, where waiting for a core "
                             "would count; it undercounts peers that work on threads of "
                             "their own (LanceDB, Chroma, Qdrant)")
    parser.add_argument("--dense-exact-threshold", type=int, default=None,
                        help="rcpkit searches its HNSW graph above this many rows (default: "
                             "the engine's, 50,000): recall against latency at small sizes")
    parser.add_argument("--child", nargs=2, metavar=("ENGINE", "DIR"), help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.dense_exact_threshold is not None:
        Rcpkit.overrides = {"dense": {"exact_threshold": options.dense_exact_threshold}}
    if options.child:
        name, directory = options.child
        _child(name, Path(directory))
        return
    with tempfile.TemporaryDirectory(prefix="rcpkit-bench-peers-") as tmp:
        clock = time.thread_time if options.cpu_time else time.perf_counter
        results = {size: bench_size(size, options.engines, options.queries, Path(tmp), clock)
                   for size in options.sizes}
    report(results, "thread CPU time" if options.cpu_time else "wall time")


if __name__ == "__main__":
    main()
