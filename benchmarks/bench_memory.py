"""Memory (§7.17): does fanning ``memory/recall`` clues out over ``retrieve`` beat a plain
``retrieve``? Plus the memory's build cost, size and recall latency.

Each collection is a BEIR directory and a data directory the engine has already embedded it
into (as for ``tune_quality.py``; its ``rcpkit.toml`` names an embedding cache, so only the
clue queries are embedded here). In one process, per judged query, at one snapshot:

- ``plain``: ``retrieve`` as served by default (hybrid, ``unit: document``, k=10);
- ``fan-out``: the plain list and one ``retrieve`` per clue (``n`` clues), fused by RRF
  with the clue lists weighted by ``--clue-weight`` × the clue's own weight;
- ``expanded``: the same fan-out, but each clue searched as the query followed by the
  clue's terms (the clue as an expansion of the question, not a question of its own);
- ``clues only``: the clue lists alone, RRF-fused.

The memory is built over the live index (the engine's concept graph), as a client would
with ``memory/build`` without documents. Document-level nDCG@10 / Recall@10 on every judged
query.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_memory.py \\
        --collection scifact-train=DATASET_DIR:DATA_DIR --collection faq-en=...:...
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from _common import percentiles, stamp

from rcpkit import fusion
from rcpkit.engine.core import open_engine
from rcpkit.engine.knowledge.graph import ConceptGraph
from rcpkit.engine.knowledge.memory import CONCEPTS, MEMORY_FILE, KnowledgeMemory
from rcpkit.engine.types import SearchRequest
from rcpkit.eval.datasets import load_beir
from rcpkit.eval.metrics import evaluate

K = 10
SHOWN = ("nDCG@10", "Recall@10")


def measure(name: str, dataset_dir: Path, data_dir: Path, split: str | None, clues: int,
            clue_weights: list[float], concepts: int) -> None:
    dataset = load_beir(dataset_dir, split)
    queries = dataset.judged_queries()
    engine = open_engine(data_dir)
    started = time.perf_counter()
    graph = ConceptGraph.open(engine.config.data_dir, engine.store)
    graph_s = time.perf_counter() - started
    seq = engine.snapshot()
    with tempfile.TemporaryDirectory() as scratch:
        memory = KnowledgeMemory.open(Path(scratch), engine.store, graph.extractor,
                                      lambda: (graph.view(seq), engine.version_token(seq)),
                                      concepts=concepts)
        started = time.perf_counter()
        memory_id, tokens = memory.build(None, memory_id=None, scope="global", caller="bench")
        build_s = time.perf_counter() - started
        size = sum(path.stat().st_size for path in Path(scratch).glob(MEMORY_FILE + "*"))
        pinned = engine.version_token(seq)

        def search(query: str) -> list[tuple[str, float]]:
            found = engine.search(SearchRequest(query=query, k=K, unit="document",
                                                index_version=pinned))
            return [(hit.doc_id or str(hit.id), hit.score) for hit in found.hits]

        plain: dict[str, list[str]] = {}
        fanned: dict[float, dict[str, list[str]]] = {w: {} for w in clue_weights}
        expanded: dict[float, dict[str, list[str]]] = {w: {} for w in clue_weights}
        only: dict[str, list[str]] = {}
        recall_ms: list[float] = []
        clue_counts: list[int] = []
        for query_id, text in queries.items():
            base = search(text)
            plain[query_id] = [doc for doc, _ in base]
            started = time.perf_counter()
            recalled = memory.recall(text, memory_id=memory_id, caller="bench", n=clues)
            recall_ms.append(1000 * (time.perf_counter() - started))
            clue_counts.append(len(recalled.clues))
            lists = [search(clue.query) for clue in recalled.clues]
            longer = [search(f"{text} {clue.query}") for clue in recalled.clues]
            for weight in clue_weights:
                weights = [1.0, *(weight * c.weight for c in recalled.clues)]
                fanned[weight][query_id] = [
                    item.key for item in fusion.rrf([base, *lists], weights)[:K]]
                expanded[weight][query_id] = [
                    item.key for item in fusion.rrf([base, *longer], weights)[:K]]
            only[query_id] = ([item.key for item in fusion.rrf(lists)[:K]] if lists
                              else plain[query_id])
    graph.close()
    engine.close()
    p50, p95, _ = percentiles(recall_ms)
    print(f"\n== {name}: {len(queries)} judged queries, {graph.chunk_count} chunks, "
          f"memory of {concepts} concepts")
    print(f"graph open+sync {graph_s:.1f} s; memory build {build_s:.2f} s, {tokens} tokens, "
          f"{size / 1e6:.2f} MB; recall p50 {p50:.1f} ms p95 {p95:.1f} ms; "
          f"mean clues {sum(clue_counts) / len(clue_counts):.2f} (n={clues})")
    rows = [("plain retrieve", plain),
            *((f"fan-out (clue weight {w})", run) for w, run in fanned.items()),
            *((f"expanded (clue weight {w})", run) for w, run in expanded.items()),
            ("clues only", only)]
    baseline = evaluate(plain, dataset.qrels).means
    print(f"{'run':<30}" + "".join(f"{m:>12}" for m in SHOWN) + f"{'Δ nDCG@10':>12}")
    for label, run in rows:
        means = evaluate(run, dataset.qrels).means
        print(f"{label:<30}" + "".join(f"{means[m]:>12.4f}" for m in SHOWN)
              + f"{means['nDCG@10'] - baseline['nDCG@10']:>+12.4f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--collection", action="append", required=True,
                        help="NAME=DATASET_DIR:DATA_DIR (an already embedded data directory)")
    parser.add_argument("--split", default=None, help="qrels split (default: the only one)")
    parser.add_argument("--clues", type=int, default=3, help="n of memory/recall")
    parser.add_argument("--concepts", type=int, default=CONCEPTS,
                        help="concepts the memory keeps (its size)")
    parser.add_argument("--clue-weight", type=float, action="append", default=None,
                        help="RRF weight of each clue list relative to the plain list")
    args = parser.parse_args()
    print(stamp())
    for spec in args.collection:
        name, _, dirs = spec.partition("=")
        dataset_dir, _, data_dir = dirs.partition(":")
        measure(name, Path(dataset_dir), Path(data_dir), args.split, args.clues,
                args.clue_weight or [1.0, 0.3, 0.1], args.concepts)


if __name__ == "__main__":
    main()
