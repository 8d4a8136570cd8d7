"""The summary tree (§7.7.2 ``unit: "tree-node"``): build cost per 1k chunks, storage, and
``retrieve`` latency, on data directories the engine has already embedded (real MiniLM
vectors; as for ``tune_quality.py``, the ``rcpkit.toml`` there names an embedding cache).

Measured in one process per directory: the tree build at the latest version (k-means per
level, extractive summaries, ``tree.npz`` written), the file's size against the record's,
the reload from ``tree.npz`` (what a restart pays), and the p50/p95 of a tree search over
the judged queries (query embedding excluded, as it is the same for every unit) for all
levels at once and for level 0, beside a default chunk ``retrieve`` of the same queries.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_tree.py --collection NAME=DATASET_DIR:DATA_DIR
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from _common import percentiles, stamp

from rcpkit.engine.core import open_engine
from rcpkit.engine.knowledge.tree import TREE_FILE, SummaryTree
from rcpkit.engine.types import SearchRequest
from rcpkit.eval.datasets import load_beir

QUERIES = 200


def measure(name: str, dataset_dir: Path, data_dir: Path, split: str | None) -> None:
    texts = list(load_beir(dataset_dir, split).judged_queries().values())[:QUERIES]
    engine = open_engine(data_dir)
    seq = engine.snapshot()
    (data_dir / TREE_FILE).unlink(missing_ok=True)
    tree = SummaryTree(data_dir, engine.store)
    started = time.perf_counter()
    levels = tree.at(seq)
    build_s = time.perf_counter() - started
    chunks = len(engine.store.visible_rowids(seq))
    started = time.perf_counter()
    SummaryTree(data_dir, engine.store).at(seq)
    reload_s = time.perf_counter() - started
    size = (data_dir / TREE_FILE).stat().st_size
    record = sum(p.stat().st_size for p in data_dir.glob("store.sqlite3*"))
    vectors = engine.embed(texts, "query")
    timings: dict[str, list[float]] = {"tree all levels": [], "tree level 0": [],
                                       "retrieve chunk (default)": []}
    for text, vector in zip(texts, np.asarray(vectors, dtype=np.float32), strict=True):
        for label, call in (("tree all levels", lambda v=vector: levels.search(v, 10, None)),
                            ("tree level 0", lambda v=vector: levels.search(v, 10, 0)),
                            ("retrieve chunk (default)", lambda t=text: engine.search(
                                SearchRequest(query=t, k=10)))):
            started = time.perf_counter()
            call()
            timings[label].append(1000 * (time.perf_counter() - started))
    engine.close()
    sizes = " / ".join(str(len(level)) for level in levels.summaries)
    print(f"\n== {name}: {chunks} chunks; nodes per level (0 = coarsest) {sizes}")
    print(f"build {build_s:.2f} s = {1000 * build_s / max(chunks, 1):.2f} s per 1k chunks; "
          f"reload from {TREE_FILE} {1000 * reload_s:.0f} ms")
    print(f"{TREE_FILE} {size / 1e6:.2f} MB = {size / max(chunks, 1):.0f} B per chunk, "
          f"{size / max(record, 1):.2f}x the record")
    for label, samples in timings.items():
        p50, p95, _ = percentiles(samples)
        print(f"{label:<26} p50 {p50:8.2f} ms   p95 {p95:8.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--collection", action="append", required=True,
                        help="NAME=DATASET_DIR:DATA_DIR (an already embedded data directory)")
    parser.add_argument("--split", default=None)
    args = parser.parse_args()
    print(stamp())
    for spec in args.collection:
        name, _, dirs = spec.partition("=")
        dataset_dir, _, data_dir = dirs.partition(":")
        measure(name, Path(dataset_dir), Path(data_dir), args.split)


if __name__ == "__main__":
    main()
