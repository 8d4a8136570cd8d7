"""Where a store's bytes go, and what float16 vectors and int8 quantisation cost (issue 19).

Ingests the bench_peers corpus (peer_corpus.py: real chunks, cached MiniLM vectors) into a fresh
SQLite engine, lets the HNSW graph settle (past 50k rows), closes it (saving the derived
indexes), then prints per chunk:

- the bytes of every SQLite table and index (the ``dbstat`` virtual table: pages, payload,
  unused) and of every derived index file;
- past the exact threshold, the reopen: the open, when the saved graph is published (its
  codes rebuilt from the record on the builder thread), that restore's thread CPU against
  loading a whole usearch file, and recall@10 of graph search afterwards;
- recall@10 against exact float32 search of the vectors as the store keeps them (float16),
  of int8 scalar quantisation (one scale per dimension) alone, and of int8 candidates rescored
  exactly from the float16 vectors;
- the thread CPU time of one exact scan: float32 (BLAS ``gemv``, the search path), float16
  (numpy) and int8 (usearch's exact SIMD kernel);
- with ``--graph N``: the saved size per row of the HNSW graph the dense index builds past its
  exact threshold (usearch, the index's M and ef_construction) over the first N vectors, with
  f16 vectors (the default) and with i8 (``dense_graph_dtype``), and graph recall@10 of each
  (ef_search 128) before and after exact rescoring of ``RESCORE[dtype] × 10`` candidates.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_storage.py --size 10000 --graph 10000
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from _common import LookupEmbedder, open_engine
from peer_corpus import PeerCorpus, load

from rcpkit.engine import EngineConfig
from rcpkit.engine.config import GRAPH_DTYPES
from rcpkit.engine.indexes.dense import DenseIndex
from rcpkit.engine.indexes.dense.index import RESCORE
from rcpkit.engine.indexes.dense.usearch_format import load_usearch
from rcpkit.engine.types import DocumentIn, SearchRequest

K = 10
RESCORED = (10, 20, 40, 100)


def build(directory: Path, size: int, graph_dtype: str) -> PeerCorpus:
    """The corpus of ``size`` chunks, ingested into ``directory``."""
    corpus = load(size)
    lookup = LookupEmbedder()
    lookup.register(corpus.texts, corpus.vectors)
    lookup.register(corpus.queries, corpus.query_vectors)
    engine = open_engine(directory, lookup, field_types={"group": "int", "half": "int"},
                         dense={"graph_dtype": graph_dtype})
    metas = corpus.metas()
    for start in range(0, size, 1000):
        engine.add([DocumentIn(text=text, id=str(start + i), meta=meta) for i, (text, meta)
                    in enumerate(zip(corpus.texts[start:start + 1000],
                                     metas[start:start + 1000], strict=True))])
    engine.wait_for_indexes()  # past the exact threshold the saved state holds the graph
    engine.close()
    return corpus


def disk(directory: Path, size: int) -> None:
    with sqlite3.connect(directory / "store.sqlite3") as db:
        rows = db.execute("SELECT name, SUM(pgsize), SUM(payload), SUM(unused) FROM dbstat "
                          "GROUP BY name ORDER BY 2 DESC").fetchall()
    print("| SQLite table or index | bytes/chunk | payload | unused |\n|---|---:|---:|---:|")
    for name, pages, payload, unused in rows:
        if pages / size >= 1:
            print(f"| {name} | {pages / size:.0f} | {payload / size:.0f} | {unused / size:.0f} |")
    print("\n| file | bytes/chunk |\n|---|---:|")
    total = 0
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        total += path.stat().st_size
        if path.stat().st_size / size >= 1:
            name = path.relative_to(directory).as_posix()
            print(f"| {name} | {path.stat().st_size / size:.0f} |")
    print(f"| **total** | **{total / size:.0f}** |\n")


def reopen(directory: Path, corpus: PeerCorpus, queries: int | None, graph_dtype: str) -> None:
    """Open the saved store cold (in this process): the open, and when the saved graph is
    published (its vectors are rebuilt from the record on the builder thread); the thread
    CPU of that restore against loading the same graph from a whole usearch file (what the
    open paid when the file kept the vectors); recall@10 of graph search against exact
    float32 search."""
    lookup = LookupEmbedder()
    lookup.register(corpus.queries, corpus.query_vectors)
    started, cpu = time.perf_counter(), time.thread_time()
    engine = open_engine(directory, lookup, field_types={"group": "int", "half": "int"},
                         dense={"graph_dtype": graph_dtype})
    opened, opened_cpu = time.perf_counter() - started, time.thread_time() - cpu
    assert engine.wait_for_indexes(600) and engine.indexes is not None
    published = time.perf_counter() - started
    index = engine.indexes.dense.whole
    view = index._view
    assert view.graph is not None and index.uses_graph, "the saved graph was not restored"
    (dense_dir,) = directory.glob("indexes/state-*/dense")
    meta = json.loads((dense_dir / "dense.json").read_text())
    lean = meta.get("graph_vectors")
    print("| reopening the saved store | |\n|---|---:|")
    print(f"| open (this process) | {opened:.2f} s wall, {opened_cpu:.2f} s thread CPU |")
    print(f"| saved graph published | {published:.2f} s after the open began |")
    if lean is not None:
        started = time.thread_time()
        saved = np.fromfile(dense_dir / meta["files"]["graph"], dtype=np.uint8)
        assert index._restored_graph(saved, lean, view.snapshot) is not None
        print(f"| graph restore: file read, {lean['rows'] - lean['kept']} rows' codes rebuilt, "
              f"checksummed, loaded | {(time.thread_time() - started) * 1000:.0f} ms "
              f"thread CPU |")
    with tempfile.TemporaryDirectory(prefix="rcpkit-graph-") as scratch:
        whole = Path(scratch) / "graph.usearch"
        view.graph.index.save(str(whole))
        started = time.thread_time()
        index._new_graph().load(str(whole))
        print(f"| graph load from a whole usearch file | "
              f"{(time.thread_time() - started) * 1000:.0f} ms thread CPU |")
    texts = corpus.queries[:queries]
    truth = top(corpus.query_vectors[:queries] @ corpus.vectors.T, K)
    found = np.array([[int(hit.doc_id) for hit in engine.search(
        SearchRequest(query=text, k=K, mode="dense")).hits] for text in texts])
    engine.close()
    print(f"| recall@10, graph search after the open ({len(texts)} queries) | "
          f"{recall(truth, found):.4f} |\n")


def recall(truth: np.ndarray, found: np.ndarray) -> float:
    return float(np.mean([len(set(t) & set(f)) / K for t, f in zip(truth, found, strict=True)]))


def top(scores: np.ndarray, k: int) -> np.ndarray:
    return np.argsort(-scores, axis=1, kind="stable")[:, :k]


def thread_ms(function: Callable[[int], object], rounds: int) -> float:
    times = []
    for i in range(rounds):
        started = time.thread_time()
        function(i)
        times.append(time.thread_time() - started)
    return float(np.median(times)) * 1000


def precision(vectors: np.ndarray, queries: np.ndarray) -> None:
    vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    truth = top(queries @ vectors.T, K)
    half = vectors.astype(np.float16).astype(np.float32)
    half /= np.linalg.norm(half, axis=1, keepdims=True)
    # MiniLM has dimensions of magnitude ~1e-9, zero in float16: keep their scale finite.
    scale = np.maximum(np.abs(half).max(axis=0), 1e-6) / 127
    quantised = np.round(half / scale).astype(np.int8)
    approximate = (queries * scale) @ quantised.T.astype(np.float32)
    print(f"| {len(queries)} queries, recall@10 vs exact float32 | recall@10 |\n|---|---:|")
    print(f"| float16 (the store's vectors) | {recall(truth, top(queries @ half.T, K)):.4f} |")
    print(f"| int8, no rescoring | {recall(truth, top(approximate, K)):.4f} |")
    for depth in RESCORED:
        candidates = top(approximate, depth)
        rescored = np.stack([c[np.argsort(-(half[c] @ q), kind="stable")[:K]]
                             for c, q in zip(candidates, queries, strict=True)])
        print(f"| int8, top {depth} rescored from float16 | {recall(truth, rescored):.4f} |")

    load_usearch()  # imports onnxruntime first: the other order crashes the process
    from usearch.index import MetricKind, search

    query_codes = np.round(queries * scale / np.abs(queries * scale).max(axis=1, keepdims=True)
                           * 127).astype(np.int8)
    half16 = half.astype(np.float16)
    scans: dict[str, tuple[Callable[[int], object], int]] = {
        "float32, BLAS gemv": (lambda i: half @ queries[i], 200),
        "float16, numpy": (lambda i: half16 @ queries[i].astype(np.float16), 10),
        "int8, usearch exact (top 100)": (lambda i: search(
            quantised, query_codes[i], 100, MetricKind.IP, exact=True, threads=1), 200)}
    print("\n| one exact scan, thread CPU ms (median) | ms |\n|---|---:|")
    for name, (scan, rounds) in scans.items():
        print(f"| {name} | {thread_ms(scan, rounds):.2f} |")

def graph(vectors: np.ndarray, queries: np.ndarray, rows: int) -> None:
    defaults = DenseIndex(vectors.shape[1])
    index_class = load_usearch()
    vectors = np.ascontiguousarray(vectors[:rows] / np.linalg.norm(vectors[:rows], axis=1,
                                                                     keepdims=True))
    truth = top(queries @ vectors.T, K)
    print(f"\n| HNSW graph over {rows} rows | bytes/row saved | recall@10, no rescoring "
          f"| top 10 × RESCORE rescored |\n|---|---:|---:|---:|")
    for dtype in GRAPH_DTYPES:
        built = index_class(ndim=vectors.shape[1], metric="cos", dtype=dtype,
                            connectivity=defaults.connectivity,
                            expansion_add=defaults.expansion_add,
                            expansion_search=defaults.expansion_search)
        built.add(np.arange(rows), vectors, threads=1)
        found = np.asarray(built.search(queries, K, threads=1).keys).reshape(len(queries), -1)
        wide = np.asarray(built.search(queries, RESCORE[dtype] * K, threads=1).keys).reshape(
            len(queries), -1)
        rescored = np.stack([c[np.argsort(-(vectors[c] @ q), kind="stable")[:K]]
                             for c, q in zip(wide, queries, strict=True)])
        with tempfile.TemporaryDirectory(prefix="rcpkit-graph-") as scratch:
            path = Path(scratch) / "graph.usearch"
            built.save(str(path))
            size = path.stat().st_size
        print(f"| {dtype} | {size / rows:.0f} | {recall(truth, found):.4f} "
              f"| {recall(truth, rescored):.4f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=None,
                        help="recall over the first N queries (default: all)")
    parser.add_argument("--graph-dtype", choices=GRAPH_DTYPES, default="f16",
                        help="[dense] graph_dtype of the store")
    parser.add_argument("--graph", type=int, default=0, metavar="N",
                        help="also build HNSW graphs over the first N vectors")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rcpkit-storage-") as scratch:
        directory = Path(scratch) / "store"
        corpus = build(directory, args.size, args.graph_dtype)
        disk(directory, args.size)
        if args.size > EngineConfig().dense.exact_threshold:
            reopen(directory, corpus, args.queries, args.graph_dtype)
        vectors, queries = corpus.vectors, corpus.query_vectors[:args.queries]
    precision(vectors, queries)
    if args.graph:
        graph(vectors, queries, args.graph)


if __name__ == "__main__":
    main()
