"""How ``rcpkit index add`` spends its time on a folder of short notes, and how often its
progress moves: reading, model load, ingest (passages/s), final save, and the longest gap
between two progress updates — with the per-slice ``embedded`` callback the bar uses, and
with the per-batch updates a bar counting 64-document writes would give.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_folder_index.py --docs 500
    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_folder_index.py --docs 3000 --embedder hashing
"""

from __future__ import annotations

import argparse
import itertools
import random
import tempfile
import time
from pathlib import Path

from rcpkit.engine.core import open_engine
from rcpkit.ingest.folders import read_folder

WORDS = ("bee", "hive", "honey", "tide", "harbour", "kite", "wind", "glacier", "valley",
         "moraine", "compost", "worm", "bread", "starter", "oven", "moon", "star", "comet",
         "rain", "cloud")


def _folder(root: Path, count: int, words: int) -> Path:
    docs = root / "docs"
    docs.mkdir()
    rng = random.Random(3)
    for i in range(count):
        (docs / f"n{i:05d}.txt").write_text(" ".join(rng.choice(WORDS) for _ in range(words)))
    return docs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=500)
    parser.add_argument("--words", type=int, default=25, help="words per note")
    parser.add_argument("--batch", type=int, default=64, help="documents per write (CLI default)")
    parser.add_argument("--embedder", default="minilm", choices=("minilm", "hashing"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        docs = _folder(root, args.docs, args.words)
        started = time.perf_counter()
        folder = read_folder([docs])
        read_s = time.perf_counter() - started
        documents = [doc for source in folder.files for doc in source.documents]

        started = time.perf_counter()
        engine = open_engine(root / "kb", embedder={"name": args.embedder})
        engine.embed(["warm"])  # the model's first forward pass belongs to loading it
        load_s = time.perf_counter() - started

        updates: list[float] = []
        batch_ends: list[float] = []
        started = ingest_start = time.perf_counter()
        for start in range(0, len(documents), args.batch):
            engine.add(documents[start:start + args.batch], chunk=True,
                       embedded=lambda done, total: updates.append(time.perf_counter()))
            batch_ends.append(time.perf_counter())
        ingest_s = time.perf_counter() - started
        passages = engine.stats()["chunks"]

        started = time.perf_counter()
        engine.wait_for_indexes()
        engine.close()
        save_s = time.perf_counter() - started

    def longest_gap(stamps: list[float]) -> float:
        points = [ingest_start, *stamps]
        return max(b - a for a, b in itertools.pairwise(points))

    print(f"embedder {args.embedder}: {len(documents)} documents, {passages} passages, "
          f"batches of {args.batch}")
    print(f"read folder     {read_s:8.2f} s")
    print(f"load model      {load_s:8.2f} s")
    print(f"ingest          {ingest_s:8.2f} s  ({passages / ingest_s:,.0f} passages/s)")
    print(f"save and close  {save_s:8.2f} s")
    print(f"progress updates: {len(updates)} per-slice vs {len(batch_ends)} per-batch; "
          f"longest gap {longest_gap(updates):.2f} s vs {longest_gap(batch_ends):.2f} s")


if __name__ == "__main__":
    main()
