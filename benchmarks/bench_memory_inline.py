"""``memory/build`` over inline documents (§7.17): what one build costs at the inline bound
(``memory_max_inline_bytes``), and how soon a cancelled build stops (§7.14).

Builds memories from synthetic documents (words drawn from a 20,000-word vocabulary, a few
shared topic words) totalling each ``--bytes`` size, in this process, and reports the CPU
seconds of each build; then starts the largest build again in a thread, cancels it after
``--cancel-after`` seconds and reports how long it took to stop.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_memory_inline.py \\
        --bytes 250000 --bytes 1000000 --bytes 4000000
"""

from __future__ import annotations

import argparse
import random
import tempfile
import threading
import time
from pathlib import Path

from _common import stamp

from rcpkit.engine.config import EmbedderConfig, EngineConfig
from rcpkit.engine.core import Engine
from rcpkit.engine.errors import Cancelled
from rcpkit.engine.knowledge.graph import ConceptGraph
from rcpkit.engine.knowledge.memory import KnowledgeMemory
from rcpkit.interrupts import checked_by

DOCUMENT_WORDS = 600


def documents(total_bytes: int, seed: int = 1) -> list[tuple[str | None, str]]:
    rng = random.Random(seed)
    vocabulary = [f"term{i}" for i in range(20_000)] + [
        "honey", "bees", "bread", "weather", "glacier", "river", "volcano", "harbour"]
    made: list[tuple[str | None, str]] = []
    size = 0
    while True:
        text = " ".join(rng.choice(vocabulary) for _ in range(DOCUMENT_WORDS)) + "."
        if size + len(text.encode()) > total_bytes:
            return made
        made.append((f"d{len(made)}", text))
        size += len(text.encode())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bytes", type=int, action="append", required=True,
                        help="Total inline text of one build (repeatable).")
    parser.add_argument("--cancel-after", type=float, default=0.5)
    args = parser.parse_args()
    print(f"bench_memory_inline, {stamp()}")
    with tempfile.TemporaryDirectory() as scratch:
        engine = Engine.open(EngineConfig(data_dir=Path(scratch),
                                          embedder=EmbedderConfig(name="hashing")))
        graph = ConceptGraph.open(engine.config.data_dir, engine.store)
        memory = KnowledgeMemory.open(
            Path(scratch), engine.store, graph.extractor,
            lambda: (graph.view(engine.snapshot()), engine.index_version),
            max_inline_bytes=max(args.bytes))
        print(f"{'inline bytes':>12}  {'documents':>9}  {'build CPU s':>11}")
        for total in args.bytes:
            inline = documents(total)
            started = time.process_time()
            memory.build(inline, memory_id=None, scope=None, caller="bench")
            print(f"{total:>12,}  {len(inline):>9,}  {time.process_time() - started:>11.2f}")

        stop = threading.Event()
        stopped_at: list[float] = []

        def check() -> None:
            if stop.is_set():
                raise Cancelled("cancelled")

        def build() -> None:
            with checked_by(check):
                try:
                    memory.build(documents(max(args.bytes)), memory_id=None, scope=None,
                                 caller="bench")
                except Cancelled:
                    stopped_at.append(time.perf_counter())

        worker = threading.Thread(target=build)
        worker.start()
        time.sleep(args.cancel_after)
        cancelled = time.perf_counter()
        stop.set()
        worker.join()
        if stopped_at:
            print(f"cancelled after {args.cancel_after:.1f} s: stopped "
                  f"{(stopped_at[0] - cancelled) * 1000:.1f} ms later")
        else:
            print("the build finished before the cancel")
        memory.close()
        graph.close()
        engine.close()


if __name__ == "__main__":
    main()
