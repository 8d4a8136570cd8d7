"""Choose fusion and BM25 defaults by numbers: in-process sweeps over cached recall lists.

Embedding a corpus costs minutes of CPU, so each collection is embedded once, by the engine,
into a data directory (``rcpkit eval ... --stdio "rcpkit serve --stdio --data DIR"`` does it
while measuring the baseline), and every sweep here reuses that directory: the stored vectors
and texts, the engine's own dense index and the same candidate depth (``candidateK`` 100) as a
served ``retrieve``. Only the fusion function, the BM25 index or the dense scoring changes
between configurations. Query vectors (and the sentence windows of ``--sweep windows``) go
through a content-hash embedding cache (``--embedding-cache``), so a rerun embeds nothing.
The chosen configurations are then confirmed end to end over stdio with ``rcpkit eval``
(docs/benchmarks.md, "Quality (development data)").

    python benchmarks/tune_quality.py --collection scifact=DATASET_DIR:DATA_DIR \\
        --collection faq-en=...:... --sweep fusion --sweep bm25 --sweep windows
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rcpkit import fusion
from rcpkit.engine.config import EngineConfig
from rcpkit.engine.core import Engine
from rcpkit.engine.documents.chunking import sentence_spans
from rcpkit.engine.indexes.lexical import LexicalIndex
from rcpkit.engine.models.embedcache import CachedEmbedder
from rcpkit.engine.models.embedding import minilm
from rcpkit.engine.text import Analyzer
from rcpkit.engine.types import SearchRequest
from rcpkit.eval.datasets import Dataset, load_beir
from rcpkit.eval.metrics import evaluate

DEPTH = 100
SHOWN = ("nDCG@10", "Recall@100", "MRR@10")
ALPHAS = tuple(round(0.1 * step, 1) for step in range(2, 9))

Ranked = list[tuple[str, float]]
Fuser = Callable[[Sequence[Ranked]], list[fusion.Fused]]


@dataclass
class Collection:
    """One development collection: judgements, and per query the dense and sparse lists."""

    name: str
    dataset: Dataset
    engine: Engine
    doc_of: dict[int, str]
    query_vectors: np.ndarray
    dense: dict[str, Ranked]
    sparse: dict[str, Ranked]


def open_collection(name: str, dataset_dir: Path, data_dir: Path, split: str | None,
                    embedder: CachedEmbedder) -> Collection:
    dataset = load_beir(dataset_dir, split)
    engine = Engine.open(EngineConfig(data_dir=data_dir), embedder=embedder)
    indexes = engine.indexes
    assert indexes is not None  # SQLite: the engine searches its derived indexes
    doc_of: dict[int, str] = {}
    for batch in engine._store.iter_rows():
        records = engine._store.chunks(batch.rowids)
        doc_of.update({rowid: records[rowid].doc_id for rowid in batch.rowids})
    queries = dataset.judged_queries()
    texts = list(queries.values())
    vectors = np.concatenate([engine.embed(texts[start:start + 256], "query")
                              for start in range(0, len(texts), 256)])
    dense: dict[str, Ranked] = {}
    for (query_id, _), vector in zip(queries.items(), vectors, strict=True):
        rowids, scores = indexes.dense.search(vector, DEPTH, exact=True)
        dense[query_id] = [(str(r), float(s)) for r, s in zip(rowids.tolist(), scores.tolist(),
                                                               strict=True)]
    collection = Collection(name, dataset, engine, doc_of, vectors, dense, {})
    collection.sparse = sparse_lists(collection, indexes.lexical)
    return collection


def sparse_lists(collection: Collection, index: LexicalIndex) -> dict[str, Ranked]:
    lists: dict[str, Ranked] = {}
    for query_id, text in collection.dataset.judged_queries().items():
        rowids, scores = index.search(text, DEPTH)
        lists[query_id] = [(str(r), float(s)) for r, s in zip(rowids.tolist(), scores.tolist(),
                                                               strict=True)]
    return lists


def lexical_index(collection: Collection, k1: float, b: float, analyzer: Analyzer) -> LexicalIndex:
    index = LexicalIndex(analyzer, k1=k1, b=b)
    for batch in collection.engine._store.iter_rows():
        index.add(np.asarray(batch.rowids, dtype=np.int64), batch.texts)
    return index


def score(collection: Collection, ranked: dict[str, Sequence[str]]) -> dict[str, float]:
    run = {query_id: [collection.doc_of[int(key)] for key in keys]
           for query_id, keys in ranked.items()}
    return evaluate(run, collection.dataset.qrels).means


def single(lists: dict[str, Ranked]) -> dict[str, Sequence[str]]:
    return {query_id: [key for key, _ in items] for query_id, items in lists.items()}


def fused(collection: Collection, fuse: Fuser, sparse: dict[str, Ranked] | None = None,
          dense: dict[str, Ranked] | None = None) -> dict[str, Sequence[str]]:
    sparse = collection.sparse if sparse is None else sparse
    dense = collection.dense if dense is None else dense
    return {query_id: [item.key for item in fuse([dense[query_id], sparse[query_id]])]
            for query_id in collection.dense}


def fusers(alphas: Sequence[float] = ALPHAS) -> dict[str, Fuser]:
    """Every fusion configuration of the sweep, by name."""
    table: dict[str, Fuser] = {}
    for k in (10, 60):
        table[f"rrf k={k}"] = lambda lists, k=k: fusion.rrf(lists, k=k)
    for alpha in alphas:
        weights = (alpha, 1.0 - alpha)
        table[f"minmax a={alpha}"] = lambda lists, w=weights: fusion.weighted(lists, w)
        table[f"zscore a={alpha}"] = lambda lists, w=weights: fusion.zscore(lists, w)
        table[f"tm2c2 a={alpha}"] = lambda lists, w=weights: fusion.convex(lists, (-1.0, 0.0),
                                                                            w)
    return table


def row(name: str, means: dict[str, float]) -> str:
    return f"{name:<28}" + "".join(f"{means[m]:>12.4f}" for m in SHOWN)


def header(title: str) -> None:
    print(f"\n== {title}")
    print(f"{'configuration':<28}" + "".join(f"{m:>12}" for m in SHOWN))


def sweep_fusion(collections: list[Collection], alphas: Sequence[float]) -> None:
    table = fusers(alphas)
    results: dict[str, dict[str, dict[str, float]]] = {}
    for collection in collections:
        header(collection.name)
        print(row("sparse", score(collection, single(collection.sparse))))
        print(row("dense", score(collection, single(collection.dense))))
        results[collection.name] = {}
        for name, fuse in table.items():
            means = score(collection, fused(collection, fuse))
            results[collection.name][name] = means
            print(row(name, means))
    baseline = "rrf k=60"
    print("\n== nDCG@10 change against rrf k=60, per collection (best first by the first one)")
    names = [c.name for c in collections]
    print(f"{'configuration':<28}" + "".join(f"{n:>12}" for n in names))
    first = names[0]
    order = sorted(results[first], key=lambda n: -results[first][n]["nDCG@10"])
    for name in order:
        print(f"{name:<28}" + "".join(
            f"{results[n][name]['nDCG@10'] - results[n][baseline]['nDCG@10']:>+12.4f}"
            for n in names))


def sweep_bm25(collections: list[Collection], fuse_name: str) -> None:
    fuse = fusers()[fuse_name]
    grid = list(itertools.product((0.6, 0.9, 1.2, 1.5, 2.0), (0.4, 0.6, 0.75, 0.9, 1.0)))
    analyzers = {"stem+stop": Analyzer(), "stem": Analyzer(stopwords=False),
                 "stop": Analyzer(stem=False)}
    for collection in collections:
        header(f"{collection.name}: BM25 alone | hybrid {fuse_name} (nDCG@10 R@100 MRR@10)")
        for (label, analyzer), (k1, b) in itertools.product(analyzers.items(), grid):
            if label != "stem+stop" and (k1, b) != (1.2, 0.75):
                continue
            started = time.perf_counter()
            sparse = sparse_lists(collection, lexical_index(collection, k1, b, analyzer))
            alone = score(collection, single(sparse))
            hybrid = score(collection, fused(collection, fuse, sparse))
            print(row(f"{label} k1={k1} b={b}", alone)
                  + " |" + "".join(f"{hybrid[m]:>9.4f}" for m in SHOWN)
                  + f"   ({time.perf_counter() - started:.1f}s)")


def tail_windows(text: str, *, head_chars: int, window_chars: int) -> list[str]:
    """Whole-sentence windows of at most ``window_chars`` covering what the encoder did not
    read of ``text`` (it stops at 256 tokens, about ``head_chars`` characters): from the first
    sentence that does not end within the head; ``[]`` when the whole text fits in it."""
    if len(text) <= head_chars:
        return []
    windows: list[str] = []
    start = end = -1
    for sentence_start, sentence_end in sentence_spans(text, max_chars=window_chars):
        if sentence_end <= head_chars:
            continue
        if start < 0:
            start, end = sentence_start, sentence_end
        elif sentence_end - start <= window_chars:
            end = sentence_end
        else:
            windows.append(text[start:end])
            start, end = sentence_start, sentence_end
    if start >= 0:
        windows.append(text[start:end])
    return windows


def window_lists(collection: Collection, embedder: CachedEmbedder, head_chars: int,
                 window_chars: int, mix: float) -> dict[str, Ranked]:
    """Exact dense lists where a chunk scores ``whole + mix · max(0, best window - whole)``
    (``mix`` 1: the max of its vectors), the windows being :func:`tail_windows`."""
    rowids: list[int] = []
    wholes: list[np.ndarray] = []
    owners: list[int] = []
    texts: list[str] = []
    for batch in collection.engine._store.iter_rows():
        for position, (rowid, text) in enumerate(zip(batch.rowids, batch.texts, strict=True)):
            rowids.append(rowid)
            wholes.append(batch.vectors[position])
            windows = tail_windows(text, head_chars=head_chars, window_chars=window_chars)
            owners.extend([len(rowids) - 1] * len(windows))
            texts.extend(windows)
    whole = np.asarray(wholes, np.float32)
    parts = embedder.embed(texts, "document") if texts else np.zeros((0, whole.shape[1]))
    owner = np.asarray(owners, np.int64)
    keys = np.asarray(rowids, np.int64)
    lists: dict[str, Ranked] = {}
    for query_id, vector in zip(collection.dense, collection.query_vectors, strict=True):
        scores = whole @ vector
        best = np.full(len(keys), -np.inf, np.float32)
        np.maximum.at(best, owner, parts @ vector)
        scores = scores + mix * np.maximum(0.0, best - scores)
        top = np.argsort(-scores, kind="stable")[:DEPTH]
        lists[query_id] = [(str(keys[i]), float(scores[i])) for i in top]
    return lists


def sweep_windows(collections: list[Collection], fuse_name: str,
                  embedder: CachedEmbedder) -> None:
    fuse = fusers()[fuse_name]
    for collection in collections:
        header(f"{collection.name}: dense alone | hybrid {fuse_name} (nDCG@10 R@100 MRR@10)")
        print(row("whole-text vectors", score(collection, single(collection.dense)))
              + " |" + "".join(f"{v:>9.4f}" for v in
                               (score(collection, fused(collection, fuse))[m] for m in SHOWN)))
        for head, width, mix in ((1000, 1000, 1.0), (1000, 1000, 0.5), (1000, 1000, 0.25)):
            started = time.perf_counter()
            dense = window_lists(collection, embedder, head, width, mix)
            alone = score(collection, single(dense))
            hybrid = score(collection, fused(collection, fuse, dense=dense))
            print(row(f"windows {head}/{width} mix={mix}", alone)
                  + " |" + "".join(f"{hybrid[m]:>9.4f}" for m in SHOWN)
                  + f"   ({time.perf_counter() - started:.1f}s, {embedder.misses} embedded)")


def sweep_latency(collections: list[Collection]) -> None:
    """``Engine.search`` p50 of the default hybrid against RRF, interleaved query by query in
    one process, each going first on every other query (fusion cost depends on candidateK,
    not on the corpus size)."""
    for collection in collections:
        timings: dict[str | None, list[float]] = {None: [], "rrf": []}
        for number, text in enumerate(collection.dataset.judged_queries().values()):
            for method in ((None, "rrf") if number % 2 else ("rrf", None)):
                request = SearchRequest(query=text, k=10, fusion=method, include_text=False)
                started = time.perf_counter()
                collection.engine.search(request)
                timings[method].append((time.perf_counter() - started) * 1000)
        default, rrf = (float(np.median(timings[m])) for m in (None, "rrf"))
        print(f"{collection.name}: retrieve p50 default {default:.2f} ms, rrf {rrf:.2f} ms, "
              f"ratio {default / rrf:.3f} ({len(timings['rrf'])} queries each)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--collection", action="append", required=True,
                        help="NAME=DATASET_DIR:DATA_DIR (the data dir already holds the corpus)")
    parser.add_argument("--split", default=None, help="qrels split (default test / the only one)")
    parser.add_argument("--sweep", action="append",
                        choices=("fusion", "bm25", "windows", "latency"),
                        default=[])
    parser.add_argument("--embedding-cache", type=Path, default=Path("embedding-cache.sqlite3"),
                        help="content-hash embedding cache (queries, sentence windows)")
    parser.add_argument("--alphas", type=float, nargs="+", default=ALPHAS,
                        help="dense weights of the normalised fusions in the fusion sweep")
    parser.add_argument("--hybrid-fusion", default="tm2c2 a=0.5",
                        help="the fusion the BM25 and window sweeps measure the hybrid with")
    args = parser.parse_args()
    embedder = CachedEmbedder(minilm(), args.embedding_cache)
    collections = []
    for spec in args.collection:
        name, _, paths = spec.partition("=")
        dataset_dir, _, data_dir = paths.partition(":")
        started = time.perf_counter()
        collections.append(open_collection(name, Path(dataset_dir), Path(data_dir), args.split,
                                           embedder))
        print(f"{name}: lists for {len(collections[-1].dense)} queries in "
              f"{time.perf_counter() - started:.1f}s")
    if "fusion" in args.sweep:
        sweep_fusion(collections, args.alphas)
    if "bm25" in args.sweep:
        sweep_bm25(collections, args.hybrid_fusion)
    if "windows" in args.sweep:
        sweep_windows(collections, args.hybrid_fusion, embedder)
    if "latency" in args.sweep:
        sweep_latency(collections)
    for collection in collections:
        collection.engine.close()


if __name__ == "__main__":
    main()
