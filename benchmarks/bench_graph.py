"""The concept graph (§7.9) and query/transform (§7.8): index-time cost, storage, latency.

The corpus is SciFact (``../shared/data/scifact-train``): abstracts chunked at 600 characters
until ``--chunks`` chunks (10k by default). The engine runs with the hashing embedder, so the
ingest timings measure the store and indexes; the graph's cost is then set against what the
real MiniLM needs to embed the same chunks (a sample of them, timed in the same process).

Measured, in one process:

1. graph build from scratch (concept extraction + SQLite) per 1k chunks, and incremental
   upkeep through the publish hook (100 new documents);
2. storage: ``graph.sqlite`` bytes per chunk, beside the record's;
3. snapshot view build (the first op after a write) and the community hierarchy;
4. latency p50/p95 of every graph op and transform method over SciFact train queries,
   and of memory recall and tree-node search (after timing their builds);
5. quality: doc-level nDCG@10 / Recall@10 of ``graph local`` against ``retrieve`` in sparse
   mode (BM25) on the train queries whose relevant abstracts are all in the corpus.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_graph.py             # 10k chunks (~3 min)
    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_graph.py --quick     # 1k chunks smoke run
    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_graph.py --chunks 100000 --no-quality
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from _common import percentiles, stamp

from rcpkit.engine.config import ChunkingConfig, EmbedderConfig, EngineConfig, IndexConfig
from rcpkit.engine.core import Engine
from rcpkit.engine.knowledge.graph import GRAPH_FILE, ConceptGraph
from rcpkit.engine.knowledge.memory import MEMORY_FILE, KnowledgeMemory
from rcpkit.engine.knowledge.transform import TRANSFORM_METHODS, QueryTransformer
from rcpkit.engine.knowledge.tree import TREE_FILE, SummaryTree
from rcpkit.engine.models.embedding import minilm
from rcpkit.engine.types import DocumentIn, SearchRequest

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "scifact-train"


def load_corpus(copies: int = 1) -> list[DocumentIn]:
    """Every abstract, its title as the first paragraph; ``copies`` > 1 repeats the corpus
    under new ids (``<id>~<n>``) to reach sizes SciFact alone does not have."""
    with open(DATA / "corpus.jsonl") as stream:
        rows = [json.loads(line) for line in stream]
    return [DocumentIn(text=f"{row['title']}\n\n{row['text']}",
                       id=row["_id"] if copy == 0 else f"{row['_id']}~{copy}")
            for copy in range(copies) for row in rows]


def load_queries(limit: int) -> tuple[list[tuple[str, str]], dict[str, set[str]]]:
    relevant: dict[str, set[str]] = {}
    with open(DATA / "qrels" / "train.tsv") as stream:
        next(stream)
        for line in stream:
            query_id, doc_id, score = line.split("\t")[:3]
            if int(score) > 0:
                relevant.setdefault(query_id, set()).add(doc_id)
    queries = []
    with open(DATA / "queries.jsonl") as stream:
        for line in stream:
            row = json.loads(line)
            if row["_id"] in relevant:
                queries.append((row["_id"], row["text"]))
    return queries[:limit], relevant


def latency(calls: Sequence[Callable[[], object]]) -> str:
    samples = []
    for call in calls:
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1000)
    p50, p95, _ = percentiles(samples)
    return f"p50 {p50:8.1f} ms   p95 {p95:8.1f} ms"


def ndcg_recall(ranked: Sequence[str], relevant: set[str], k: int = 10) -> tuple[float, float]:
    docs = list(dict.fromkeys(ranked))[:k]
    gain = sum(1 / math.log2(i + 2) for i, d in enumerate(docs) if d in relevant)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(k, len(relevant))))
    return gain / ideal, len(set(docs) & relevant) / len(relevant)


def knowledge_latency(engine: Engine, graph: ConceptGraph, seq: int, texts: Sequence[str]
                      ) -> tuple[list[Callable[[], object]], list[Callable[[], object]]]:
    """Build a memory of the live index and the summary tree at ``seq`` (timed), and return
    the recall and tree-node search calls to time."""
    data = engine.config.data_dir
    memory = KnowledgeMemory.open(data, engine.store, graph.extractor,
                                  lambda: (graph.view(seq), engine.version_token(seq)))
    start = time.perf_counter()
    memory_id, tokens = memory.build(None, memory_id=None, scope="global", caller="bench")
    memory_s = time.perf_counter() - start
    tree = SummaryTree(data, engine.store)
    start = time.perf_counter()
    levels = tree.at(seq)
    tree_s = time.perf_counter() - start
    chunks = len(graph.view(seq).rowids)
    print(f"memory build: {memory_s:.1f} s = {memory_s / chunks * 1000:.2f} s per 1k chunks, "
          f"{tokens} tokens, {size_of(data / MEMORY_FILE) / 1e6:.1f} MB")
    print(f"tree build: {tree_s:.1f} s = {tree_s / chunks * 1000:.2f} s per 1k chunks, "
          f"{size_of(data / TREE_FILE) / 1e6:.1f} MB")
    vectors = np.asarray(engine.embed(list(texts), "query"), dtype=np.float32)
    recall = [lambda t=t: memory.recall(t, memory_id=memory_id, caller="bench", n=3)
              for t in texts]
    search = [lambda v=v: levels.search(v, 10, None) for v in vectors]
    return recall, search


def size_of(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--quick", action="store_true", help="1k chunks, 8 queries")
    parser.add_argument("--no-quality", action="store_true",
                        help="skip the quality comparison (slow at 100k chunks)")
    args = parser.parse_args()
    chunks_wanted, query_count = (1_000, 8) if args.quick else (args.chunks, args.queries)
    print(f"# bench_graph — {stamp()}")
    # SciFact train chunks to about 3 chunks per abstract at 600 characters.
    corpus = load_corpus(copies=max(1, math.ceil(chunks_wanted / 14_000)))
    queries, relevant = load_queries(query_count)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        config = EngineConfig(data_dir=data,
                              embedder=EmbedderConfig(name="hashing", hashing_dimension=64),
                              chunking=ChunkingConfig(max_chars=600),
                              index=IndexConfig(save_every=1_000_000))
        engine = Engine.open(config)
        start = time.perf_counter()
        taken = 0
        while engine.store.counts().chunks < chunks_wanted and taken < len(corpus) - 100:
            engine.add(corpus[taken:taken + 250], chunk=True)
            taken = min(taken + 250, len(corpus) - 100)
        ingest_s = time.perf_counter() - start
        documents = corpus[:taken + 100]  # the last 100 are added through the hook below
        chunks = engine.store.counts().chunks
        print(f"corpus: {taken} SciFact abstracts → {chunks} chunks "
              f"(engine ingest with the hashing embedder: {ingest_s:.1f} s)")

        # 1. build from scratch, then incremental upkeep through the hook
        start = time.perf_counter()
        graph = ConceptGraph.open(data, engine.store)
        build_s = time.perf_counter() - start
        engine.on_publish(graph.sync)
        before = graph.chunk_count
        start = time.perf_counter()
        engine.add(corpus[taken:taken + 100], chunk=True)
        with_hook_s = time.perf_counter() - start
        added = graph.chunk_count - before
        sample = [r.indexed_text for r in engine.store.chunks(range(1, 201)).values()]
        embedder = minilm()
        embedder.embed(sample[:8])
        start = time.perf_counter()
        embedder.embed(sample)
        minilm_per_1k = (time.perf_counter() - start) / len(sample) * 1000
        print("\n## index-time cost")
        print(f"graph build (extract + persist):     {build_s / chunks * 1000:6.2f} s per 1k "
              f"chunks ({build_s:.1f} s for {chunks})")
        print(f"MiniLM embedding of the same chunks: {minilm_per_1k:6.2f} s per 1k chunks "
              f"(sample of {len(sample)}; ratio graph/MiniLM "
              f"{build_s / chunks * 1000 / minilm_per_1k:.2f})")
        print(f"index/add of 100 abstracts ({added} chunks) with the graph hook: "
              f"{with_hook_s * 1000:.0f} ms")

        # 2. storage
        graph_bytes = size_of(data / GRAPH_FILE)
        store_bytes = engine.store.counts().bytes_on_disk
        concepts = len(graph.storage.concepts())
        print("\n## storage")
        print(f"graph.sqlite: {graph_bytes / 1e6:.1f} MB = {graph_bytes / graph.chunk_count:.0f} "
              f"B/chunk ({concepts} concepts); the record: {store_bytes / 1e6:.1f} MB "
              f"(ratio {graph_bytes / store_bytes:.2f})")

        # 3. per-version structures
        seq = engine.snapshot()
        start = time.perf_counter()
        view = graph.view(seq)
        view_ms = (time.perf_counter() - start) * 1000
        start = time.perf_counter()
        hierarchy = graph.hierarchy(seq)
        hierarchy_ms = (time.perf_counter() - start) * 1000
        per_level = [len(hierarchy.at_level(level)) for level in range(hierarchy.depth)]
        print("\n## per snapshot (built on the first op after a write, then cached)")
        print(f"view: {view.chunks} chunks, {len(view.keys)} concepts, "
              f"{view.association.nnz // 2} co-occurrence edges — {view_ms:.0f} ms")
        print(f"communities: {per_level} per level — {hierarchy_ms:.0f} ms")

        # 4. latency
        def top_texts(query: str, k: int) -> list[str]:
            found = engine.search(SearchRequest(query=query, k=k, mode="sparse"))
            return [hit.text or "" for hit in found.hits]

        transformer = QueryTransformer(graph, top_texts)
        texts = [text for _, text in queries]
        seeds = [hits[0].nodes[-1] for text in texts if (hits := graph.local(seq, text, 1))]
        print(f"\n## latency at {view.chunks} chunks ({len(texts)} queries, warm snapshot)")
        rows = {
            "local k=10": [lambda t=t: graph.local(seq, t, 10) for t in texts],
            **{f"neighbors hops={hops} k=20": [
                lambda s=s, h=hops: graph.neighbors(seq, [s], h, 20) for s in seeds]
               for hops in (1, 2)},
            "communities level 0": [lambda: graph.communities(seq, 0)],
            "global level 0 k=5": [lambda t=t: graph.ranked_communities(seq, t, 0, 5)
                                   for t in texts],
            "drift followups": [lambda t=t: graph.followups(seq, t, 3) for t in texts],
            "retrieve sparse k=10": [lambda t=t: top_texts(t, 10) for t in texts],
            **{f"transform {method}": [
                lambda t=t, m=method: transformer.transform(t, m, 3, seq) for t in texts]
               for method in TRANSFORM_METHODS},
        }
        for name, calls in rows.items():
            print(f"{name:<22} {latency(calls)}")
        memory_recall, tree_search = knowledge_latency(engine, graph, seq, texts)
        for name, calls in {"memory recall n=3": memory_recall,
                            "tree-node k=10": tree_search}.items():
            print(f"{name:<22} {latency(calls)}")
        if args.no_quality:
            graph.close()
            engine.close()
            return

        # 5. quality against BM25, on the queries the corpus can answer
        present = {d.id for d in documents}
        answerable = [(qid, text) for qid, text in load_queries(10_000)[0]
                      if relevant[qid] <= present]
        scores = {"retrieve sparse": [0.0, 0.0], "graph local": [0.0, 0.0]}
        for qid, text in answerable:
            found = engine.search(SearchRequest(query=text, k=30, mode="sparse"))
            runs = {"retrieve sparse": [hit.doc_id for hit in found.hits],
                    "graph local": [h.nodes[-1].split("#")[0]
                                    for h in graph.local(seq, text, 30)]}
            for name, ranked in runs.items():
                ndcg, recall = ndcg_recall(ranked, relevant[qid])
                scores[name][0] += ndcg
                scores[name][1] += recall
        print(f"\n## quality ({len(answerable)} train queries answerable from this corpus)")
        for name, (ndcg, recall) in scores.items():
            count = max(1, len(answerable))
            print(f"{name:<16} nDCG@10 {ndcg / count:.3f}   Recall@10 {recall / count:.3f}")
        graph.close()
        engine.close()


if __name__ == "__main__":
    main()
