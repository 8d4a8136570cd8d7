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
        --collection faq-en=...:... --sweep fusion --sweep bm25 --sweep windows --sweep rm3

``--sweep completion``, ``--sweep levers`` and ``--sweep prf`` work on whole score matrices (every
query against every row, dense cosine and BM25, computed once by the engine's own indexes):
candidate depth per half, score completion, normalisation and the other fusion levers are
then array operations, seconds a configuration. ``--sweep lexical`` (the BM25 half: analyzer,
k1/b, BM25+/BM25L, query-term counting, the title as a BM25F field, word pairs) and ``--sweep
dense-input`` (what the encoder reads: the text past its 256 tokens, the title alone, 512
tokens) rescore one half on the same matrices and fuse it as the default does; ``--sweep prf``
expands each query from a first page (RM3) and rescores the lexical half with it; ``--sweep
oracle`` asks how much a per-query dense weight could give and whether anything a query
shows predicts it.
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rcpkit import fusion
from rcpkit.engine.config import load_config
from rcpkit.engine.core import Engine
from rcpkit.engine.indexes.lexical import IDF_EXPONENT, LexicalIndex, leading_title
from rcpkit.engine.indexes.windows import sentence_windows
from rcpkit.engine.models.embedcache import CachedEmbedder
from rcpkit.engine.models.embedding import MINILM_TAIL_TOKENS, minilm
from rcpkit.engine.text import Analyzer
from rcpkit.engine.types import RerankOptions, SearchRequest
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
    engine = Engine.open(load_config(data_dir), embedder=embedder)  # with its rcpkit.toml
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


def window_lists(collection: Collection, embedder: CachedEmbedder, head_chars: int,
                 window_chars: int, mix: float) -> dict[str, Ranked]:
    """Exact dense lists where a chunk scores ``whole + mix · max(0, best window - whole)``
    (``mix`` 1: the max of its vectors), the windows being :func:`sentence_windows`."""
    rowids: list[int] = []
    wholes: list[np.ndarray] = []
    owners: list[int] = []
    texts: list[str] = []
    for batch in collection.engine._store.iter_rows():
        for position, (rowid, text) in enumerate(zip(batch.rowids, batch.texts, strict=True)):
            rowids.append(rowid)
            wholes.append(batch.vectors[position])
            windows = sentence_windows(text, head_chars=head_chars, window_chars=window_chars)
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


@dataclass
class FeedbackTerms:
    """Per row, its analysed terms and a surface word for each (a query text that analyses
    back to that term), for pseudo-relevance feedback over the engine's own BM25 index."""

    terms: dict[int, Counter[str]]
    lengths: dict[int, int]
    surface: dict[str, str]

    @classmethod
    def of(cls, collection: Collection) -> FeedbackTerms:
        indexes = collection.engine.indexes
        assert indexes is not None
        analyzer, plain = indexes.lexical.analyzer, Analyzer(stem=False)
        terms: dict[int, Counter[str]] = {}
        lengths: dict[int, int] = {}
        surface: dict[str, str] = {}
        for batch in collection.engine._store.iter_rows():
            for rowid, text in zip(batch.rowids, batch.texts, strict=True):
                stems = analyzer.tokens(text)
                terms[rowid], lengths[rowid] = Counter(stems), max(len(stems), 1)
                words = plain.tokens(text)
                if len(words) == len(stems):
                    for stem, word in zip(stems, words, strict=True):
                        surface.setdefault(stem, word)
        surface = {stem: word for stem, word in surface.items()
                   if analyzer.tokens(word) == [stem]}
        return cls(terms, lengths, surface)


def rm3_lists(collection: Collection, feedback: FeedbackTerms, docs: int, terms: int,
              original: float) -> dict[str, Ranked]:
    """BM25 lists for RM3-expanded queries (Lavrenko and Croft's relevance model, RM3 as in
    Anserini): the top ``docs`` rows weight their terms' ``tf / |d|`` by their BM25 score, the
    best ``terms`` of that model (L1-normalised) join the original query terms
    (L1-normalised, weight ``original``), and rows are scored by the weighted sum of
    per-term BM25 scores."""
    indexes = collection.engine.indexes
    assert indexes is not None
    index = indexes.lexical
    analyzer = index.analyzer
    lists: dict[str, Ranked] = {}
    for query_id, text in collection.dataset.judged_queries().items():
        first = collection.sparse[query_id][:docs]
        model: Counter[str] = Counter()
        total = sum(score for _, score in first) or 1.0
        for key, score in first:
            row_terms, length = feedback.terms[int(key)], feedback.lengths[int(key)]
            for term, count in row_terms.items():
                if len(term) > 1 and term in feedback.surface:
                    model[term] += score / total * count / length
        expansion = dict(model.most_common(terms))
        query_terms = Counter(analyzer.tokens(text))
        weights: Counter[str] = Counter()
        for term, count in query_terms.items():
            weights[term] += original * count / sum(query_terms.values())
        expansion_mass = sum(expansion.values()) or 1.0
        for term, weight in expansion.items():
            weights[term] += (1.0 - original) * weight / expansion_mass
        summed: np.ndarray | None = None
        for term, weight in weights.items():
            word = feedback.surface.get(term)
            scores = index._score(word, None, None) if word is not None else None
            if scores is not None:
                summed = weight * scores if summed is None else summed + weight * scores
        if summed is None:
            lists[query_id] = collection.sparse[query_id]
            continue
        rows = np.flatnonzero(summed)
        top = rows[np.lexsort((rows, -summed[rows]))][:DEPTH]
        lists[query_id] = [(str(r), float(summed[r])) for r in top.tolist()]
    return lists


def sweep_rm3(collections: list[Collection], fuse_names: Sequence[str]) -> None:
    """RM3 on the lexical side, judged by the hybrid it feeds (and BM25 alone beside it)."""
    grid = list(itertools.product((5, 10), (10, 20), (0.5, 0.7)))
    for collection in collections:
        started = time.perf_counter()
        feedback = FeedbackTerms.of(collection)
        print(f"\n{collection.name}: feedback terms of {len(feedback.terms)} rows in "
              f"{time.perf_counter() - started:.1f}s")
        labels = " | ".join(["BM25", *fuse_names])
        header(f"{collection.name}: {labels} (nDCG@10 R@100 MRR@10)")
        configurations = [("no feedback", collection.sparse)]
        configurations += [(f"rm3 docs={d} terms={t} orig={o}", rm3_lists(collection, feedback,
                                                                         d, t, o))
                           for d, t, o in grid]
        for label, sparse in configurations:
            line = row(label, score(collection, single(sparse)))
            for fuse_name in fuse_names:
                hybrid = score(collection, fused(collection, fusers()[fuse_name], sparse))
                line += " |" + "".join(f"{hybrid[m]:>9.4f}" for m in SHOWN)
            print(line, flush=True)


def sweep_rerank(collections: list[Collection], queries: int) -> None:
    """The late-interaction rerank (§7.6 ``colbert``, top 20) on the default hybrid against
    none, through ``Engine.search`` as a served ``retrieve`` runs it (k 20: topN ≥ k, §3.3),
    on the first ``queries`` judged queries; p50 per configuration, interleaved."""
    for collection in collections:
        judged = list(collection.dataset.judged_queries().items())[:queries]
        runs: dict[str, dict[str, list[str]]] = {"hybrid default": {}, "+ colbert top 20": {}}
        timings: dict[str, list[float]] = {name: [] for name in runs}
        for number, (query_id, text) in enumerate(judged):
            names = list(runs) if number % 2 else list(reversed(runs))
            for name in names:
                rerank = RerankOptions("colbert", top_n=20) if name != "hybrid default" else None
                request = SearchRequest(query=text, k=20, rerank=rerank, seed=42,
                                        include_text=False)
                started = time.perf_counter()
                hits = collection.engine.search(request).hits
                timings[name].append((time.perf_counter() - started) * 1000)
                runs[name][query_id] = [hit.doc_id for hit in hits]
        header(f"{collection.name}: rerank on the first {len(judged)} queries (k 20)")
        for name, run in runs.items():
            sampled = {query_id: collection.dataset.qrels[query_id] for query_id in run}
            means = evaluate(run, sampled).means
            print(row(name, means) + f"   p50 {np.median(timings[name]):.1f} ms, "
                  f"p95 {np.percentile(timings[name], 95):.1f} ms", flush=True)


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


@dataclass
class Matrices:
    """Every judged query against every stored row: cosine, BM25, relevance (one chunk a
    document, as the development collections are indexed)."""

    name: str
    dense: np.ndarray
    sparse: np.ndarray
    relevant: np.ndarray
    judged: np.ndarray
    vectors: np.ndarray
    query_vectors: np.ndarray
    texts: list[str]
    queries: list[str]
    coverage: np.ndarray | None = None

    @classmethod
    def of(cls, collection: Collection) -> Matrices:
        indexes = collection.engine.indexes
        assert indexes is not None
        rowids = np.asarray(sorted(collection.doc_of), np.int64)
        vectors = indexes.dense.get(rowids)
        queries = list(collection.dataset.judged_queries().items())
        sparse = np.zeros((len(queries), len(rowids)))
        for number, (_, text) in enumerate(queries):
            full = indexes.lexical._score(text, None, None)
            if full is not None:
                sparse[number] = full[rowids]
        column = {collection.doc_of[int(r)]: i for i, r in enumerate(rowids)}
        relevant = np.zeros(sparse.shape, bool)
        for number, (query_id, _) in enumerate(queries):
            for doc, grade in collection.dataset.qrels[query_id].items():
                if grade > 0 and doc in column:
                    relevant[number, column[doc]] = True
        judged = np.asarray([sum(g > 0 for g in collection.dataset.qrels[q].values())
                             for q, _ in queries], np.float64)
        texts = [t for batch in collection.engine._store.iter_rows(rowids.tolist())
                 for t in batch.texts]
        return cls(collection.name, (collection.query_vectors @ vectors.T).astype(np.float64),
                   sparse, relevant, judged, vectors, collection.query_vectors, texts,
                   [text for _, text in queries])


def top_columns(scores: np.ndarray, k: int) -> np.ndarray:
    """Per row the columns of the ``k`` best scores, best first, ties to the smaller column."""
    k = min(k, scores.shape[1])
    part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    order = np.lexsort((part, -np.take_along_axis(scores, part, 1)), axis=1)
    return np.take_along_axis(part, order, 1)


def per_query(m: Matrices, fused: np.ndarray, candidates: np.ndarray) -> dict[str, np.ndarray]:
    """Each query's nDCG@10, Recall@100 and MRR@10 over the top 100 candidates by ``fused``
    (as :mod:`rcpkit.eval.metrics` computes them for one chunk per document)."""
    ranked = top_columns(np.where(candidates, fused, -np.inf), DEPTH)
    hits = (np.take_along_axis(m.relevant, ranked, 1)
            & np.take_along_axis(candidates, ranked, 1))
    discount = 1.0 / np.log2(np.arange(2, 12))
    ideal = np.asarray([discount[:int(min(n, 10))].sum() for n in m.judged])
    first = np.where(hits[:, :10].any(1), hits[:, :10].argmax(1) + 1, np.inf)
    return {"nDCG@10": (hits[:, :10] * discount).sum(1) / ideal,
            "Recall@100": hits.sum(1) / m.judged, "MRR@10": 1.0 / first}


def matrix_means(m: Matrices, fused: np.ndarray, candidates: np.ndarray) -> dict[str, float]:
    """The means of :func:`per_query`."""
    return {name: float(values.mean()) for name, values in per_query(m, fused, candidates).items()}


def halves(m: Matrices, depth_dense: int = DEPTH, depth_sparse: int = DEPTH, *,
           complete: bool = True, ceiling_rank: int = 0, dense: np.ndarray | None = None,
           sparse: np.ndarray | None = None, dense_floor: float = -1.0
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(candidates, dense part, sparse part): each half's top ``depth`` rows, scores
    normalised against the floors (cosine ``dense_floor``, BM25 0) and each half's best
    candidate score (or its ``ceiling_rank``-th best, clipped to 1: the winsorised ceiling);
    with ``complete`` every candidate keeps both halves' scores, else only its own list's."""
    dense = m.dense if dense is None else dense
    sparse = m.sparse if sparse is None else sparse
    in_dense = np.zeros(dense.shape, bool)
    np.put_along_axis(in_dense, top_columns(dense, depth_dense), True, 1)
    in_sparse = np.zeros(sparse.shape, bool)
    np.put_along_axis(in_sparse, top_columns(sparse, depth_sparse), True, 1)
    in_sparse &= sparse > 0
    candidates = in_dense | in_sparse
    scored_dense = candidates if complete else in_dense
    scored_sparse = (candidates & (sparse > 0)) if complete else in_sparse
    parts = []
    for scores, scored, floor in ((dense, scored_dense, dense_floor),
                                  (sparse, scored_sparse, 0.0)):
        ordered = -np.sort(-np.where(scored, scores, -np.inf), 1)
        ceiling = ordered[:, min(ceiling_rank, ordered.shape[1] - 1)]
        ceiling = np.where(np.isfinite(ceiling), ceiling, ordered[:, 0])
        span = np.maximum(ceiling - floor, 1e-12)[:, None]
        parts.append(np.where(scored, np.clip((scores - floor) / span, 0.0, 1.0), 0.0))
    return candidates, parts[0], parts[1]


def coverage(m: Matrices) -> np.ndarray:
    """Per query and row the idf-weighted share of the query's distinct terms the row holds
    (the peer engine's coverage feature, with BM25's idf instead of a plain count)."""
    from scipy import sparse  # a benchmark-only dependency (numpy's companion)

    if m.coverage is not None:
        return m.coverage
    analyzer = Analyzer()
    vocabulary: dict[str, int] = {}
    rows, columns = [], []
    for row, tokens in enumerate(analyzer.tokens_batch(m.texts)):
        for term in set(tokens):
            rows.append(row)
            columns.append(vocabulary.setdefault(term, len(vocabulary)))
    present = sparse.csr_matrix((np.ones(len(rows)), (rows, columns)),
                                shape=(len(m.texts), len(vocabulary)))
    frequency = np.asarray(present.sum(0)).ravel()
    idf = np.log1p((len(m.texts) - frequency + 0.5) / (frequency + 0.5))
    weights = np.zeros((len(m.queries), len(vocabulary)))
    for number, tokens in enumerate(analyzer.tokens_batch(m.queries)):
        terms = [vocabulary[t] for t in set(tokens) if t in vocabulary]
        weights[number, terms] = idf[terms]
    m.coverage = np.asarray(present @ weights.T).T / np.maximum(weights.sum(1), 1e-12)[:, None]
    return m.coverage


def sweep_completion(matrices: list[Matrices], alphas: Sequence[float]) -> None:
    """Candidate depth per half, and each half scoring the other's candidates."""
    header("nDCG@10 / Recall@100 / MRR@10 per collection: " + ", ".join(m.name for m in matrices))
    grid: list[tuple[str, dict[str, object], float]] = [
        (f"depth {d}/{s} as recalled a={a}", {"depth_dense": d, "depth_sparse": s,
                                                "complete": False}, a)
        for d, s in ((100, 100), (200, 200), (300, 300), (500, 500)) for a in (0.8,)]
    grid += [(f"completed a={a}", {}, a) for a in alphas]
    for label, options, alpha in grid:
        line = f"{label:<28}"
        for m in matrices:
            candidates, dense, sparse = halves(m, **options)  # type: ignore[arg-type]
            means = matrix_means(m, alpha * dense + (1 - alpha) * sparse, candidates)
            line += " |" + "".join(f"{means[name]:>7.4f}" for name in SHOWN)
        print(line, flush=True)


def sweep_oracle(matrices: list[Matrices], alpha: float) -> None:
    """How much a per-query dense weight could give, and whether a query shows it: the mean
    nDCG@10 with each query's best of 21 weights (hindsight), with each query's better half
    alone, and the correlation of the best weight (over the queries where the weight matters)
    with features a query shows before fusion."""
    header("per-query fusion weight: hindsight ceilings and what predicts the best weight")
    weights = np.linspace(0.0, 1.0, 21)
    for m in matrices:
        candidates, dense, sparse = halves(m)
        table = np.stack([per_query(m, w * dense + (1 - w) * sparse, candidates)["nDCG@10"]
                          for w in weights], 1)
        today = per_query(m, alpha * dense + (1 - alpha) * sparse, candidates)["nDCG@10"]
        better = np.maximum(per_query(m, m.dense, np.ones(m.dense.shape, bool))["nDCG@10"],
                            per_query(m, m.sparse, m.sparse > 0)["nDCG@10"])
        matters = table.max(1) > table.min(1)
        best = np.asarray([weights[row == row.max()].mean() for row in table])
        model: dict[str, object] = {}
        bm25_variant(m, terms=model)
        possible = model["query"] @ model["idf"]  # type: ignore[operator]
        top_dense, top_sparse = (-np.sort(-m.dense, 1)[:, :10], -np.sort(-m.sparse, 1)[:, :10])
        overlap = [len(set(a) & set(b)) for a, b in zip(top_columns(m.dense, 10),
                                                        top_columns(m.sparse, 10), strict=True)]
        features = {"dense top cosine": top_dense[:, 0],
                    "dense top-1 minus top-5": top_dense[:, 0] - top_dense[:, 4],
                    "BM25 top over its maximum": top_sparse[:, 0] / np.maximum(possible, 1e-12),
                    "BM25 top-5 over top-1": top_sparse[:, 4] / np.maximum(top_sparse[:, 0],
                                                                           1e-12),
                    "query weight (sum of idf^p)": possible,
                    "top-10 overlap": np.asarray(overlap, float)}
        print(f"{m.name}: today {today.mean():.4f}, best weight per query {table.max(1).mean():.4f}"
              f", better half per query {better.mean():.4f}; the weight matters for "
              f"{matters.sum()} of {len(table)} queries, mean best {best[matters].mean():.2f}")
        for name, values in features.items():
            correlation = np.corrcoef(values[matters], best[matters])[0, 1]
            print(f"    {name:<30} correlation with the best weight {correlation:+.3f}")


LEVERS = ("none", "ceiling 1", "ceiling 5", "decisive 0.25", "decisive 0.5", "coverage 0.03",
          "coverage 0.05", "coverage 0.1", "prf 0.25", "prf 0.5", "title 1", "title 2",
          "title 3", "windows 0.5", "learned", "transfer", "floor -0.5", "floor 0",
          "idf-ceiling 0.25", "idf-ceiling 1", "product 0.05", "product 0.2", "power 0.5",
          "power 2", "rrf 0.1", "centred", "hub 0.1", "hub 0.5")


def sweep_levers(matrices: list[Matrices], alpha: float, embedder: CachedEmbedder,
                 levers: Sequence[str] = LEVERS, folds: int = 2) -> None:
    """The other fusion levers on top of score completion (``alpha`` the dense weight):
    a winsorised ceiling, per-query weights from how decisive each half is, the idf-weighted
    query-term coverage, dense pseudo-relevance feedback (Rocchio on the vectors of the top
    fused rows), the title counted twice by BM25, and a linear fusion learned (ListNet, with
    ``folds``-fold cross-validation) over both halves' scores, list membership and coverage,
    and the same fusion learned on the first collection's queries applied to every one; also
    the sentence windows (``windows MIX``, every row scored exactly with its windows). The
    shape of the fusion: the cosine's floor (``floor F``), BM25 normalised against a mix of
    its best candidate and the query's largest possible score, the sum of its term weights
    (``idf-ceiling BETA``), an agreement term ``G · dense · sparse`` (``product G``), both
    parts to a power (``power P``), RRF added (``rrf W``); the cosine re-scored after
    subtracting the rows' mean vector (``centred``), or less ``BETA`` times each row's mean
    cosine to its 10 nearest rows (``hub BETA``, hubness reduction)."""
    header("levers on completed convex fusion: nDCG@10 / Recall@100 / MRR@10 per collection")

    def fused_by(m: Matrices, lever: str) -> tuple[np.ndarray, np.ndarray]:
        kind, _, value = lever.partition(" ")
        number = float(value) if value else 0.0
        candidates, dense, sparse = halves(m, ceiling_rank=int(number) if kind == "ceiling"
                                           else 0, dense_floor=number if kind == "floor"
                                           else -1.0)
        fused = alpha * dense + (1 - alpha) * sparse
        if kind in ("centred", "hub"):
            candidates, dense, sparse = halves(m, dense=reshaped_cosines(m, kind, number))
            fused = alpha * dense + (1 - alpha) * sparse
        elif kind == "idf-ceiling":
            model: dict[str, object] = {}
            bm25_variant(m, terms=model)
            weights = model["query"] @ model["idf"]  # type: ignore[operator]
            ceiling = np.where(sparse > 0, m.sparse / np.maximum(sparse, 1e-12), 0.0).max(1)
            span = np.maximum((1 - number) * ceiling + number * weights, 1e-12)[:, None]
            sparse = np.where(sparse > 0, np.clip(m.sparse / span, 0.0, 1.0), 0.0)
            fused = alpha * dense + (1 - alpha) * sparse
        elif kind == "product":
            fused = fused + number * dense * sparse
        elif kind == "power":
            fused = alpha * dense ** number + (1 - alpha) * sparse ** number
        elif kind == "rrf":
            ranks = [np.argsort(np.argsort(-np.where(candidates, part, -np.inf), 1), 1) + 1
                     for part in (dense, sparse)]
            fused = fused + number * 30 * sum(np.where(part > 0, 1 / (60 + rank), 0.0)
                                              for part, rank in zip((dense, sparse), ranks,
                                                                    strict=True))
        elif kind == "decisive":
            gaps = [np.maximum(-np.diff(-np.sort(-np.where(candidates, part, -np.inf), 1)
                                        [:, [0, 4]], axis=1)[:, 0], 1e-6) ** number
                    for part in (dense, sparse)]
            weight = (alpha * gaps[0] / (alpha * gaps[0] + (1 - alpha) * gaps[1]))[:, None]
            fused = weight * dense + (1 - weight) * sparse
        elif kind == "coverage":
            fused = (1 - number) * fused + number * coverage(m)
        elif kind == "prf":
            top = top_columns(np.where(candidates, fused, -np.inf), 3)
            moved = m.query_vectors + number * m.vectors[top].mean(1)
            moved /= np.linalg.norm(moved, axis=1, keepdims=True)
            candidates, dense, sparse = halves(m, dense=(moved @ m.vectors.T).astype(float))
            fused = alpha * dense + (1 - alpha) * sparse
        elif kind == "title":
            candidates, dense, sparse = halves(m, sparse=title_sparse(m, int(number)))
            fused = alpha * dense + (1 - alpha) * sparse
        elif kind == "windows":
            candidates, dense, sparse = halves(m, dense=windowed(m, embedder, number))
            fused = alpha * dense + (1 - alpha) * sparse
        elif kind == "learned":
            fused = learned_fusion(m, candidates, dense, sparse, folds, None)
        elif kind == "transfer":
            fused = learned_fusion(m, candidates, dense, sparse, folds, transferred)
        return fused, candidates

    transferred = None
    if "transfer" in levers:
        first = matrices[0]
        candidates, dense, sparse = halves(first)
        transferred = listnet_weights(first, candidates,
                                      learned_features(first, candidates, dense, sparse),
                                      np.arange(len(first.queries)))
        print(f"learned on {first.name}: weights (dense, sparse, in dense top, coverage) "
              f"{np.round(transferred, 3).tolist()}")
    for lever in levers:
        line = f"{lever:<28}"
        for m in matrices:
            fused, candidates = fused_by(m, lever)
            means = matrix_means(m, fused, candidates)
            line += " |" + "".join(f"{means[name]:>7.4f}" for name in SHOWN)
        print(line, flush=True)


def reshaped_cosines(m: Matrices, kind: str, beta: float) -> np.ndarray:
    """The cosines after subtracting the rows' mean vector from rows and queries
    (``centred``), or less ``beta`` times each row's mean cosine to its 10 nearest other rows
    (``hub``: a row near everything is a hub, near every query too)."""
    if kind == "centred":
        mean = m.vectors.mean(0)
        rows, queries = m.vectors - mean, m.query_vectors - mean
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
        centred: np.ndarray = (queries @ rows.T).astype(np.float64)
        return centred
    between = m.vectors @ m.vectors.T
    np.fill_diagonal(between, -np.inf)
    nearest = -np.sort(-between, 1)[:, :10]
    hubbed: np.ndarray = m.dense - beta * nearest.mean(1)[None, :]
    return hubbed


def windowed(m: Matrices, embedder: CachedEmbedder, mix: float) -> np.ndarray:
    """Cosines raised by each row's best sentence window, ``whole + mix · max(0, best -
    whole)`` (the engine's ``dense_sentence_windows``), every row scored exactly."""
    owners: list[int] = []
    texts: list[str] = []
    for row, text in enumerate(m.texts):
        windows = sentence_windows(text)
        owners.extend([row] * len(windows))
        texts.extend(windows)
    if not texts:
        return m.dense
    similarities = m.query_vectors @ embedder.embed(texts, "document").T
    best = np.full(m.dense.shape, -np.inf)
    for column, row in enumerate(owners):
        best[:, row] = np.maximum(best[:, row], similarities[:, column])
    raised: np.ndarray = m.dense + mix * np.maximum(0.0, best - m.dense)
    return raised


def title_sparse(m: Matrices, repeat: int) -> np.ndarray:
    """BM25 where a text's title (:func:`~rcpkit.engine.indexes.lexical.leading_title`) counts
    ``repeat`` times (the engine's ``lexical_title_repeat``)."""
    index = LexicalIndex(title_repeat=repeat)
    index.add(np.arange(len(m.texts)), m.texts)
    sparse = np.zeros(m.sparse.shape)
    for number, query in enumerate(m.queries):
        full = index._score(query, None, None)
        if full is not None:
            sparse[number] = full
    return sparse


def learned_features(m: Matrices, candidates: np.ndarray, dense: np.ndarray,
                     sparse: np.ndarray) -> np.ndarray:
    """Per query and row: dense part, sparse part, whether the dense top 100 holds the row,
    and the query-term coverage (0 outside the candidates)."""
    ranked = np.zeros(candidates.shape, bool)
    np.put_along_axis(ranked, top_columns(m.dense, DEPTH), True, 1)
    return np.stack([dense, sparse, ranked.astype(float),
                     np.where(candidates, coverage(m), 0.0)], -1)


def listnet_weights(m: Matrices, candidates: np.ndarray, features: np.ndarray,
                    queries: np.ndarray) -> np.ndarray:
    """Linear weights minimising the ListNet loss (softmax cross-entropy against the judged
    rows) over ``queries``."""
    from scipy.optimize import minimize  # a benchmark-only dependency (numpy's companion)

    data = [(features[q][candidates[q]], m.relevant[q][candidates[q]].astype(float))
            for q in queries if m.relevant[q][candidates[q]].any()]

    def loss(weights: np.ndarray) -> tuple[float, np.ndarray]:
        total, gradient = 0.0, np.zeros_like(weights)
        for x, y in data:
            s = x @ weights
            p = np.exp(s - s.max())
            p /= p.sum()
            target = y / y.sum()
            total -= float((target * np.log(p + 1e-12)).sum())
            gradient -= x.T @ (target - p)
        return total / len(data), gradient / len(data)

    start = np.zeros(features.shape[-1])
    start[0] = 1.0
    weights: np.ndarray = minimize(loss, start, jac=True, method="L-BFGS-B").x
    return weights


def learned_fusion(m: Matrices, candidates: np.ndarray, dense: np.ndarray, sparse: np.ndarray,
                   folds: int, weights: np.ndarray | None) -> np.ndarray:
    """Scores of the linear ListNet fusion: with ``weights`` (learned elsewhere) as given,
    else each query scored by weights learned on the other folds' queries."""
    features = learned_features(m, candidates, dense, sparse)
    if weights is not None:
        fused: np.ndarray = features @ weights
        return fused
    order = np.random.default_rng(0).permutation(len(m.queries))
    fused = np.zeros(candidates.shape)
    for fold in range(folds):
        held = order[fold::folds]
        fused[held] = features[held] @ listnet_weights(m, candidates, features,
                                                       np.setdiff1d(order, held))
    return fused


def bm25_variant(m: Matrices, *, analyzer: Analyzer | None = None, k1: float = 1.2,
                 b: float = 0.75, title_repeat: int = 2, form: str = "okapi",
                 delta: float = 0.0, distinct: bool = True, title_field: tuple[float, float]
                 | None = None, pairs: int = 0, terms: dict[str, object] | None = None,
                 idf_exponent: float = IDF_EXPONENT) -> np.ndarray:
    """Every query's BM25 against every row, in a variant of the engine's scoring (its
    defaults reproduce the engine's index): ``form`` ``okapi``, ``bm25+`` (``delta`` added to
    every matching term's saturated tf, Lv and Zhai), ``bm25l`` (``delta`` added to the
    length-normalised tf before saturation) or ``logtf``; ``distinct`` False counts a
    repeated query term once per occurrence (Lucene); ``title_field`` (weight, b) scores the
    title as its own BM25F field instead of repeating it; ``pairs`` n indexes the ordered
    pairs of terms at most n apart instead of the terms; a term weighs its idf to the power
    ``idf_exponent`` (1 is Lucene). ``terms``, if given, receives the model: the saturated
    ``tf`` (rows x terms), ``idf`` (the term weights, the exponent applied), the ``query``
    term weights before idf, and the raw ``counts`` (the texts as indexed)."""
    from scipy import sparse  # a benchmark-only dependency (numpy's companion)

    analyzer = analyzer if analyzer is not None else Analyzer()

    def tokens(text: str) -> list[str]:
        words = analyzer.tokens(text)
        if not pairs:
            return words
        return [f"{a} {c}" for i, a in enumerate(words) for c in words[i + 1:i + 1 + pairs]]

    def counts(texts: Sequence[str], vocabulary: dict[str, int]) -> sparse.csr_matrix:
        rows, columns, values = [], [], []
        for row, text in enumerate(texts):
            for term, count in Counter(tokens(text)).items():
                rows.append(row)
                columns.append(vocabulary.setdefault(term, len(vocabulary)))
                values.append(count)
        matrix = sparse.csr_matrix((values, (rows, columns)), shape=(len(texts), 1 << 24))
        matrix.sum_duplicates()
        return matrix

    def normalised(frequencies: sparse.csr_matrix, slope: float) -> sparse.csr_matrix:
        """``tf / (1 - b + b |d| / avgdl)`` entry by entry, on the same sparsity layout."""
        length = np.asarray(frequencies.sum(1)).ravel()
        average = length[length > 0].mean() if (length > 0).any() else 1.0  # no titles: 1
        norm = 1.0 - slope + slope * length / average
        row_of = np.repeat(np.arange(frequencies.shape[0]), np.diff(frequencies.indptr))
        result = frequencies.copy()
        result.data = frequencies.data / norm[row_of]
        return result

    vocabulary: dict[str, int] = {}
    if title_field is None:
        texts = [text + f"\n{title}" * (title_repeat - 1) if (title := leading_title(text))
                 else text for text in m.texts]
        frequencies = counts(texts, vocabulary)[:, :len(vocabulary)].astype(np.float64)
        tf = frequencies.copy()
        pseudo = normalised(frequencies, b)  # tf / (1 - b + b |d| / avgdl)
        if form == "bm25l":
            tf.data = (pseudo.data + delta) / (k1 + pseudo.data + delta)
        elif form == "logtf":
            logged = 1.0 + np.log(frequencies.data)
            tf.data = logged / (logged + k1 * frequencies.data / pseudo.data)
        else:
            tf.data = pseudo.data / (pseudo.data + k1) + (delta / (k1 + 1) if form == "bm25+"
                                                          else 0.0)
    else:
        weight, title_b = title_field
        titles = [leading_title(text) or "" for text in m.texts]
        bodies = [text.partition("\n\n")[2] if title else text
                  for text, title in zip(m.texts, titles, strict=True)]
        title_counts = counts(titles, vocabulary)
        body_counts = counts(bodies, vocabulary)
        combined = (weight * normalised(title_counts[:, :len(vocabulary)].astype(np.float64),
                                        title_b)
                    + normalised(body_counts[:, :len(vocabulary)].astype(np.float64), b)).tocsr()
        tf = combined.copy()
        tf.data = combined.data / (combined.data + k1)
        frequencies = (title_counts + body_counts)[:, :len(vocabulary)].astype(np.float64)
    present = tf.copy()
    present.data = np.ones_like(present.data)
    frequency = np.asarray(present.sum(0)).ravel()
    idf = np.log1p((len(m.texts) - frequency + 0.5) / (frequency + 0.5)) ** idf_exponent
    weights = np.zeros((len(m.queries), len(vocabulary)))
    for number, query in enumerate(m.queries):
        for term, count in Counter(tokens(query)).items():
            if term in vocabulary:
                weights[number, vocabulary[term]] = 1 if distinct else count
    if terms is not None:
        terms.update(tf=tf, idf=idf, query=weights, counts=frequencies)
    scores: np.ndarray = np.asarray((tf @ (weights * idf).T).T)
    return scores


LEXICAL: dict[str, dict[str, object]] = {
    "engine default (distinct terms, title 2, idf^1.4)": {},
    **{f"idf to the power {p}": {"idf_exponent": p}
       for p in (1.0, 1.1, 1.2, 1.25, 1.3, 1.5, 1.75, 2.0)},
    "query terms counted per occurrence (Lucene)": {"distinct": False},
    **{f"k1 {k1} b {b}": {"k1": k1, "b": b}
       for k1 in (0.6, 0.9, 1.2, 1.5, 2.0) for b in (0.3, 0.5, 0.75, 0.9, 1.0)},
    **{f"{form} delta {delta}": {"form": form, "delta": delta}
       for form in ("bm25+", "bm25l") for delta in (0.25, 0.5, 1.0)},
    "log tf": {"form": "logtf"},
    "Porter stemmer": {"analyzer": Analyzer("porter")},
    "no stemming": {"analyzer": Analyzer(stem=False)},
    "no stop words": {"analyzer": Analyzer(stopwords=False)},
    **{f"title {repeat}x": {"title_repeat": repeat} for repeat in (1, 3, 4)},
    **{f"title field w {w} b {tb}": {"title_field": (w, tb)}
       for w in (1.0, 2.0, 3.0) for tb in (0.0, 0.5, 1.0)},
}


def sweep_lexical(matrices: list[Matrices], alpha: float) -> None:
    """The BM25 half in variants, each fused with the same dense half as the default does
    (completed convex, dense weight ``alpha``); BM25 alone in brackets."""
    header("BM25 variants under the default fusion: nDCG@10 / Recall@100 (BM25 alone "
           "nDCG@10) per collection")
    for m in matrices:  # the variant code with its defaults is the engine's index
        np.testing.assert_allclose(bm25_variant(m), m.sparse, rtol=1e-9, atol=1e-12)
    pair_rows = {f"+ word pairs within {n}, weight {w}": (n, w)
                 for n in (1, 2) for w in (0.1, 0.2, 0.3, 0.5)}
    for label in [*LEXICAL, *pair_rows]:
        line = f"{label:<44}"
        for m in matrices:
            if label in pair_rows:
                span, weight = pair_rows[label]
                sparse = m.sparse + weight * bm25_variant(m, pairs=span)
            else:
                sparse = bm25_variant(m, **LEXICAL[label])  # type: ignore[arg-type]
            candidates, dense, lexical = halves(m, sparse=sparse)
            means = matrix_means(m, alpha * dense + (1 - alpha) * lexical, candidates)
            alone = matrix_means(m, sparse, sparse > 0)
            line += (f" | {means['nDCG@10']:.4f} {means['Recall@100']:.4f} "
                     f"({alone['nDCG@10']:.4f})")
        print(line, flush=True)


def expanded_sparse(model: dict[str, object], first: np.ndarray, docs: int, terms: int,
                    original: float, selection: str) -> np.ndarray:
    """BM25 of every query expanded from its top ``docs`` rows by ``first`` (RM3, Lavrenko
    and Croft's relevance model as Anserini runs it): each feedback row weighs its terms'
    ``tf / |d|`` by its share of the feedback rows' ``first`` scores, the ``terms`` best of
    that model (times idf with ``selection`` ``tfidf``; ``rm3`` without) are L1-normalised
    and mixed with the L1-normalised original terms at weight ``original``, and every row
    is scored by the idf-weighted saturated tf of the mixed terms (the engine's BM25 with
    weighted query terms). A row ranked ``-inf`` by ``first`` is never a feedback row."""
    from scipy import sparse  # a benchmark-only dependency (numpy's companion)

    tf, idf, query, counts = (model["tf"], model["idf"], model["query"], model["counts"])
    assert isinstance(tf, sparse.csr_matrix) and isinstance(counts, sparse.csr_matrix)
    assert isinstance(idf, np.ndarray) and isinstance(query, np.ndarray)
    top = top_columns(first, docs)
    scores = np.take_along_axis(first, top, 1)
    shares = np.where(np.isfinite(scores), np.maximum(scores, 0.0), 0.0)  # -inf: not ranked
    shares /= np.maximum(shares.sum(1, keepdims=True), 1e-300)  # nothing ranked: no feedback
    lengths = np.maximum(np.asarray(counts.sum(1)).ravel(), 1.0)
    relative = sparse.diags(1.0 / lengths) @ counts
    feedback = sparse.csr_matrix((shares.ravel(), (np.repeat(np.arange(len(top)), top.shape[1]),
                                                   top.ravel())), shape=(len(top), len(lengths)))
    relevance = (feedback @ relative).tocsr()
    if selection == "tfidf":
        relevance = (relevance @ sparse.diags(idf)).tocsr()
    mixed = original * query / np.maximum(query.sum(1, keepdims=True), 1e-12)
    for number in range(relevance.shape[0]):
        start, end = relevance.indptr[number], relevance.indptr[number + 1]
        columns, values = relevance.indices[start:end], relevance.data[start:end]
        best = np.argsort(-values, kind="stable")[:terms]
        if values[best].sum() > 0:
            mixed[number, columns[best]] += (1 - original) * values[best] / values[best].sum()
    scores: np.ndarray = np.asarray((tf @ (mixed * idf).T).T)
    return scores


PRF_GRID = [(source, docs, terms, original, selection, 0.82)
            for source in ("bm25", "hybrid") for selection in ("rm3", "tfidf")
            for docs in (3, 5, 10) for terms in (10, 20) for original in (0.5, 0.7, 0.9)]
PRF_GRID += [(source, docs, terms, original, "rm3", alpha)
             for source, docs, terms, original in (("bm25", 10, 20, 0.9), ("hybrid", 3, 20, 0.7),
                                                   ("hybrid", 3, 5, 0.95))
             for alpha in (0.7, 0.75, 0.82, 0.88)]


def sweep_prf(matrices: list[Matrices], alpha: float,
              grid: Sequence[tuple[str, int, int, float, str, float]] = PRF_GRID) -> None:
    """Query-side lexical pseudo-relevance feedback before fusion: each query expanded from
    the top rows of BM25 alone (``bm25``) or of the default hybrid (``hybrid``: completed
    convex, dense weight ``alpha``), the lexical half run again with the expanded query and
    fused with the same dense half as the default does (at the dense weight of the row's
    last field, ``a``); BM25 alone in brackets."""
    header("lexical PRF under the default fusion: nDCG@10 / Recall@100 / MRR@10 (expanded "
           "BM25 alone nDCG@10) per collection")
    models: list[dict[str, object]] = []
    firsts: list[dict[str, np.ndarray]] = []
    for m in matrices:
        model: dict[str, object] = {}
        np.testing.assert_allclose(bm25_variant(m, terms=model), m.sparse, rtol=1e-9,
                                   atol=1e-12)
        models.append(model)
        candidates, dense, lexical = halves(m)
        firsts.append({"bm25": np.where(m.sparse > 0, m.sparse, -np.inf),
                       "hybrid": np.where(candidates, alpha * dense + (1 - alpha) * lexical,
                                          -np.inf)})
    for source, docs, terms, original, selection, weight in [("none", 0, 0, 1.0, "", alpha),
                                                              *grid]:
        label = (f"{source} {selection} docs {docs} terms {terms} orig {original} a {weight}"
                 if docs else "no feedback (today)")
        line = f"{label:<47}"
        for m, model, first in zip(matrices, models, firsts, strict=True):
            sparse = (m.sparse if not docs else
                      expanded_sparse(model, first[source], docs, terms, original, selection))
            candidates, dense, lexical = halves(m, sparse=sparse)
            means = matrix_means(m, weight * dense + (1 - weight) * lexical, candidates)
            alone = matrix_means(m, sparse, sparse > 0)
            line += " |" + "".join(f"{means[name]:>7.4f}" for name in SHOWN)
            line += f" ({alone['nDCG@10']:.4f})"
        print(line, flush=True)


DENSE_INPUTS = ("tail 1.0", "tail 0.5", "title 0.1", "title 0.2", "title max", "head 0",
                "head 64", "head 96", "head 128", "head 160", "head 192", "head 254",
                "late 0.25", "late 0.5", "late 1.0", "whole 512")


def late_sentence_cosines(m: Matrices, encoder: object, tokenizer: object) -> np.ndarray:
    """Per query and row the best cosine of the row's sentences, each sentence's vector the
    mean of its tokens' outputs in the row's own forward pass (rows whose sentences the
    encoder did not read keep their whole cosine)."""
    from rcpkit.engine.documents.chunking import sentence_spans
    from rcpkit.engine.models.embedding import OnnxEmbedder

    assert isinstance(encoder, OnnxEmbedder)
    encodings = tokenizer.encode_batch(m.texts)  # type: ignore[attr-defined]
    owners: list[int] = []
    vectors: list[np.ndarray] = []
    for batch in encoder.model.batches(m.texts):
        for row, position in enumerate(batch.positions):
            read = encoder.model.read_positions(len(encodings[position].ids))
            starts = np.asarray([encodings[position].offsets[i][0] for i in read])
            outputs = batch.output[row, :len(read)]
            inner = np.arange(len(read))[1:-1]  # not the special tokens
            for first, end in sentence_spans(m.texts[position]):
                tokens = inner[(starts[inner] >= first) & (starts[inner] < end)]
                if len(tokens):
                    owners.append(position)
                    vectors.append(outputs[tokens].mean(0))
    pooled = np.asarray(vectors)
    pooled /= np.linalg.norm(pooled, axis=1, keepdims=True)
    best = np.full(m.dense.shape, -np.inf)
    np.maximum.at(best.T, np.asarray(owners), (m.query_vectors @ pooled.T).T)
    late: np.ndarray = np.where(np.isfinite(best), best, m.dense)
    return late


def sweep_dense_input(matrices: list[Matrices], alpha: float, embedder: CachedEmbedder,
                      cache: Path, inputs: Sequence[str]) -> None:
    """What the encoder reads, fused as the default does. MiniLM reads 256 tokens of a
    text (the first 254 between its special tokens, in a data directory indexed before the
    encoder read the end of long texts); ``tail MIX`` adds one vector per longer row for its
    text past the first 254 (``whole + mix · max(0, tail - whole)``, mix 1 the max of the two:
    the cheapest window), ``head N`` re-embeds the longer rows reading their first N tokens
    and their last 254 - N (the same 256 tokens), ``title BETA`` mixes in the cosine of the
    title alone (``max``: the larger of the two), ``whole 512`` re-embeds the longer rows
    reading 512 tokens (the model's position limit), ``late MIX`` raises each row's cosine
    toward its best sentence's (``whole + mix · max(0, best - whole)``), the sentence vectors
    pooled from the tokens of the row's own forward pass (late chunking: no extra encoder
    work, a vector a sentence more to keep)."""
    import tokenizers  # installed with the bundled model

    from rcpkit.engine.models.embedding import (
        MINILM_HEAD_IDENTITY,
        OnnxEmbedder,
        minilm,
        minilm_files,
    )

    model, tokenizer_file = minilm_files()
    tokenizer = tokenizers.Tokenizer.from_file(str(tokenizer_file))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    read = 254  # 256 less [CLS] and [SEP]
    header("dense inputs under the default fusion: nDCG@10 / Recall@100 (dense alone "
           "nDCG@10; Recall@100) [the hybrid's nDCG@10 at the dense weight -0.02, +0.02] per "
           "collection")
    rows: dict[str, list[str]] = {label: [] for label in ("as indexed", *inputs)}
    for m in matrices:
        encodings = tokenizer.encode_batch(m.texts, add_special_tokens=False)
        lengths = np.asarray([len(e.ids) for e in encodings])
        long = np.flatnonzero(lengths > read)
        unread = np.maximum(lengths - read, 0).sum() / lengths.sum()
        print(f"{m.name}: {len(long)} of {len(m.texts)} rows longer than {read} tokens "
              f"(mean {lengths.mean():.0f} tokens), {unread:.1%} of all tokens unread")
        variants: dict[str, np.ndarray] = {"as indexed": m.dense}
        if any(label.startswith("tail") for label in inputs) and len(long):
            tails = [m.texts[i][encodings[i].offsets[read][0]:] for i in long]
            tail = np.full(m.dense.shape, -np.inf)
            tail[:, long] = m.query_vectors @ embedder.embed(tails, "document").T
            for label in inputs:
                if label.startswith("tail"):
                    mix = float(label.split()[1])
                    variants[label] = m.dense + mix * np.maximum(0.0, tail - m.dense)
        titled = [i for i, text in enumerate(m.texts) if leading_title(text)]
        if any(label.startswith("title") for label in inputs) and titled:
            title = m.dense.copy()
            title[:, titled] = m.query_vectors @ embedder.embed(
                [leading_title(m.texts[i]) or "" for i in titled], "document").T
            for label in inputs:
                if label == "title max":
                    variants[label] = np.maximum(m.dense, title)
                elif label.startswith("title"):
                    beta = float(label.split()[1])
                    variants[label] = (1 - beta) * m.dense + beta * title
        for label in inputs:
            if label.startswith("head") and len(long):
                reread = CachedEmbedder(minilm(tail_tokens=read - int(label.split()[1])), cache)
                scores = m.dense.copy()
                scores[:, long] = m.query_vectors @ reread.embed([m.texts[i] for i in long],
                                                                 "document").T
                variants[label] = scores
        if any(label.startswith("late") for label in inputs):
            best = late_sentence_cosines(m, embedder.inner, tokenizer)
            for label in inputs:
                if label.startswith("late"):
                    mix = float(label.split()[1])
                    variants[label] = m.dense + mix * np.maximum(0.0, best - m.dense)
        if "whole 512" in inputs and len(long):
            wide = CachedEmbedder(OnnxEmbedder(model, tokenizer_file,
                                               identity=f"{MINILM_HEAD_IDENTITY}@512",
                                               max_tokens=512, dimension=384), cache)
            whole = m.dense.copy()
            whole[:, long] = m.query_vectors @ wide.embed([m.texts[i] for i in long],
                                                          "document").T
            variants["whole 512"] = whole
        for label, cells in rows.items():
            dense_scores = variants.get(label, m.dense)
            candidates, dense, lexical = halves(m, dense=dense_scores)
            means = matrix_means(m, alpha * dense + (1 - alpha) * lexical, candidates)
            alone = matrix_means(m, dense_scores, np.ones(dense_scores.shape, bool))
            beside = [matrix_means(m, weight * dense + (1 - weight) * lexical, candidates)
                      for weight in (alpha - 0.02, alpha + 0.02)]
            cells.append(f" | {means['nDCG@10']:.4f} {means['Recall@100']:.4f} "
                         f"({alone['nDCG@10']:.4f}; {alone['Recall@100']:.4f}) "
                         f"[±0.02: {beside[0]['nDCG@10']:.4f} {beside[1]['nDCG@10']:.4f}]")
    for label, cells in rows.items():
        print(f"{label:<30}" + "".join(cells), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--collection", action="append", required=True,
                        help="NAME=DATASET_DIR:DATA_DIR (the data dir already holds the corpus)")
    parser.add_argument("--split", default=None, help="qrels split (default test / the only one)")
    parser.add_argument("--sweep", action="append",
                        choices=("fusion", "bm25", "windows", "rm3", "rerank", "latency",
                                 "completion", "levers", "lexical", "dense-input", "prf",
                                 "oracle"),
                        default=[])
    parser.add_argument("--embedding-cache", type=Path, default=Path("embedding-cache.sqlite3"),
                        help="content-hash embedding cache (queries, sentence windows)")
    parser.add_argument("--alphas", type=float, nargs="+", default=ALPHAS,
                        help="dense weights of the normalised fusions in the fusion sweep")
    parser.add_argument("--levers", nargs="+", choices=LEVERS, default=LEVERS,
                        help="the levers --sweep levers measures")
    parser.add_argument("--dense-inputs", nargs="+", choices=DENSE_INPUTS,
                        default=DENSE_INPUTS[:5],
                        help="the inputs --sweep dense-input measures (head N and whole 512 "
                             "re-embed every long row: minutes of CPU each)")
    parser.add_argument("--rerank-queries", type=int, default=100,
                        help="judged queries the rerank sweep runs (about a second of CPU each)")
    parser.add_argument("--hybrid-fusion", default="tm2c2 a=0.5",
                        help="the fusion the BM25 and window sweeps measure the hybrid with")
    parser.add_argument("--tail-tokens", type=int, default=MINILM_TAIL_TOKENS,
                        help="the MiniLM the data directories were indexed with: how many "
                             "last tokens of a long text it reads (0: the first 254 only, "
                             "data directories indexed before it read the end)")
    args = parser.parse_args()
    embedder = CachedEmbedder(minilm(tail_tokens=args.tail_tokens), args.embedding_cache)
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
    if "rm3" in args.sweep:
        sweep_rm3(collections, (args.hybrid_fusion, "rrf k=60"))
    if "rerank" in args.sweep:
        sweep_rerank(collections, args.rerank_queries)
    if "latency" in args.sweep:
        sweep_latency(collections)
    if {"completion", "levers", "lexical", "dense-input", "prf", "oracle"} & set(args.sweep):
        matrices = [Matrices.of(collection) for collection in collections]
        if "completion" in args.sweep:
            sweep_completion(matrices, (0.75, 0.8, 0.81, 0.82, 0.83, 0.85))
        if "levers" in args.sweep:
            sweep_levers(matrices, 0.82, embedder, args.levers)
        if "lexical" in args.sweep:
            sweep_lexical(matrices, 0.82)
        if "prf" in args.sweep:
            sweep_prf(matrices, 0.82)
        if "dense-input" in args.sweep:
            sweep_dense_input(matrices, 0.82, embedder, args.embedding_cache, args.dense_inputs)
        if "oracle" in args.sweep:
            sweep_oracle(matrices, 0.82)
    for collection in collections:
        collection.engine.close()


if __name__ == "__main__":
    main()
