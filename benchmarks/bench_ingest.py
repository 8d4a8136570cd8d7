"""End-to-end ingest against the rate of the embedding model alone (issue 19).

``Engine.add`` of SciFact abstracts (``../shared/data/scifact-train``, one document each, the
engine's own chunking) with the bundled MiniLM, against ``embed`` of exactly the texts the
engine embeds (its chunks, taken from the store afterwards) with the same model and
threads. Rounds alternate the two, each on a fresh data directory, so background load
lands on both; the ratio of the medians is the engine's overhead over the model.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_ingest.py --documents 300 --rounds 3

``--tail-tokens 0 126`` times ``Engine.add`` of the same abstracts, unchunked (an abstract a
chunk, as ``rcpkit eval`` sends them, so every long one is cut), with MiniLM reading a long
text's first 254 tokens against its first 128 and last 126, the rounds interleaved.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from rcpkit.engine.config import EngineConfig, IndexConfig
from rcpkit.engine.core import Engine
from rcpkit.engine.models.embedding import minilm
from rcpkit.engine.types import DocumentIn

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "scifact-train"


def documents(count: int) -> list[DocumentIn]:
    with (DATA / "corpus.jsonl").open(encoding="utf-8") as stream:
        rows = [json.loads(line) for _, line in zip(range(count), stream, strict=False)]
    return [DocumentIn(text=f"{row['title']}\n\n{row['text']}", id=row["_id"]) for row in rows]


def compare_tails(docs: list[DocumentIn], rounds: int, tails: list[int]) -> None:
    """Median ``Engine.add`` rate per MiniLM ``tail_tokens``, rounds interleaved."""
    embedders = {tail: minilm(tail_tokens=tail) for tail in tails}
    for embedder in embedders.values():
        embedder.embed(["warm up"])
    rates: dict[int, list[float]] = {tail: [] for tail in tails}
    for number in range(rounds):
        for tail in tails if number % 2 == 0 else tails[::-1]:
            with tempfile.TemporaryDirectory() as tmp:
                config = EngineConfig(data_dir=Path(tmp), index=IndexConfig(save_every=1_000_000))
                with Engine.open(config, embedder=embedders[tail]) as engine:
                    start = time.perf_counter()
                    for first in range(0, len(docs), 100):
                        engine.add(docs[first:first + 100], chunk=False)
                    rates[tail].append(len(docs) / (time.perf_counter() - start))
            print(f"round {number + 1}: tail_tokens {tail}: {rates[tail][-1]:.1f} docs/s",
                  flush=True)
    first = statistics.median(rates[tails[0]])
    for tail in tails:
        median = statistics.median(rates[tail])
        print(f"tail_tokens {tail}: median {median:.1f} docs/s, time ratio to tail_tokens "
              f"{tails[0]}: {first / median:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tail-tokens", type=int, nargs="+", default=None,
                        help="compare MiniLM reading the end of long texts (see above)")
    options = parser.parse_args()
    docs = documents(options.documents)
    if options.tail_tokens:
        compare_tails(docs, options.rounds, options.tail_tokens)
        return
    embedder = minilm()
    embedder.embed(["warm up"])
    engine_rates, model_rates = [], []
    for _ in range(options.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            config = EngineConfig(data_dir=Path(tmp), index=IndexConfig(save_every=1_000_000))
            with Engine.open(config, embedder=embedder) as engine:
                start = time.perf_counter()
                for first in range(0, len(docs), 100):
                    engine.add(docs[first:first + 100], chunk=True)
                engine_rates.append(len(docs) / (time.perf_counter() - start))
                rows = range(1, engine.stats()["stored_rows"] + 1)
                texts = [record.indexed_text for record in engine._store.chunks(rows).values()]
        start = time.perf_counter()
        embedder.embed(texts, "document")
        model_rates.append(len(docs) / (time.perf_counter() - start))
        print(f"round: Engine.add {engine_rates[-1]:.1f} docs/s, model alone "
              f"{model_rates[-1]:.1f} docs/s ({len(texts)} chunks)", flush=True)
    ours, model = statistics.median(engine_rates), statistics.median(model_rates)
    print(f"\nmedian: Engine.add {ours:.1f} docs/s, embedding alone {model:.1f} docs/s "
          f"({embedder.model.threads} onnxruntime threads): model-bound rate / ingest rate = "
          f"{model / ours:.2f}")


if __name__ == "__main__":
    main()
