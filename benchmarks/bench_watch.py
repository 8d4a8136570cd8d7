"""A watched folder (issue 33): ``watch`` times the first sync of a generated folder and its
peak RSS, then change → searchable latency (p50/p99) of adds, edits, renames and deletes made
while the real watcher runs (watchfiles events, the default settle time), and the chunks each
change sends to the model (an edit of one paragraph re-embeds that chunk; a rename none);
``ingest`` compares ``rcpkit index add`` end to end with the model alone embedding the same
passages (the model-bound rate), with the command's peak RSS.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_watch.py watch --files 10000 --embedder hashing
    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_watch.py watch --files 2000 --embedder minilm
    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_watch.py ingest --files 200
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from rcpkit.engine.config import EmbedderConfig, EngineConfig
from rcpkit.engine.core import Engine, open_engine
from rcpkit.engine.models.embedding import Embedder, HashingEmbedder, minilm
from rcpkit.engine.types import SearchRequest
from rcpkit.ingest.roots import Root
from rcpkit.ingest.watch import FolderWatcher

WORDS = ("bee", "hive", "honey", "tide", "harbour", "kite", "wind", "glacier", "valley",
         "moraine", "compost", "worm", "bread", "starter", "oven", "moon", "star", "comet",
         "rain", "cloud", "seed", "frost", "soil", "root", "leaf", "river", "stone", "salt")
PARAGRAPHS = 4
PARAGRAPH_WORDS = 70
TIMEOUT_S = 60.0


class CountingEmbedder:
    """Counts the texts that reach the model (behind the engine's embedding cache)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.identity = inner.identity
        self.dimension = inner.dimension
        self.texts = 0

    def embed(self, texts: Sequence[str], kind: str = "document") -> np.ndarray:
        self.texts += len(texts) if kind == "document" else 0
        return self.inner.embed(texts, kind)

    def token_embeddings(self, texts: Sequence[str], kind: str = "document") -> list[np.ndarray]:
        return self.inner.token_embeddings(texts, kind)


def _paragraph(rng: random.Random, token: str = "") -> str:
    words = [rng.choice(WORDS) for _ in range(PARAGRAPH_WORDS)]
    return " ".join([token, *words] if token else words) + "."


def _note(rng: random.Random, number: int) -> str:
    return "\n\n".join([f"# Note {number}", _paragraph(rng, f"tok{number}"),
                        *(_paragraph(rng) for _ in range(PARAGRAPHS - 1))])


def _make_folder(folder: Path, count: int) -> random.Random:
    rng = random.Random(7)
    folder.mkdir(parents=True)
    for number in range(count):
        (folder / f"n{number:05d}.md").write_text(_note(rng, number))
    return rng


def _rss_mb(who: int = resource.RUSAGE_SELF) -> float:
    return resource.getrusage(who).ru_maxrss / 1024


def _wait(engine: Engine, token: str, *, present: str | None = None,
          absent: str | None = None) -> float:
    """Seconds until a sparse retrieve of ``token`` finds document ``present`` and not
    ``absent`` (polled every 5 ms)."""
    started = time.perf_counter()
    while True:
        found = _documents(engine, token)
        if (present is None or present in found) and (absent is None or absent not in found):
            return time.perf_counter() - started
        if time.perf_counter() - started > TIMEOUT_S:
            raise SystemExit("a change was not searchable within a minute")
        time.sleep(0.005)


def _documents(engine: Engine, token: str) -> set[str]:
    hits = engine.search(SearchRequest(query=token, k=3, mode="sparse")).hits
    return {hit.id.rpartition("#")[0] for hit in hits}


def watch(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp, "docs").resolve()
        rng = _make_folder(folder, args.files)
        counting = CountingEmbedder(minilm() if args.embedder == "minilm"
                                    else HashingEmbedder(dimension=384))
        config = EngineConfig(data_dir=Path(tmp, "kb"),
                              embedder=EmbedderConfig(cache=Path(tmp, "kb", "cache.sqlite")))
        engine = Engine.open(config, embedder=counting)
        watcher = FolderWatcher(engine, Root(folder, "docs"), settle=args.settle)
        started = time.perf_counter()
        first = watcher.apply([folder])
        engine.wait_for_indexes()
        sync_s = time.perf_counter() - started
        print(f"first sync: {args.files} files, {first.added} documents, {counting.texts} "
              f"chunks embedded in {sync_s:.1f} s ({args.files / sync_s:.0f} files/s); peak RSS "
              f"{_rss_mb():.0f} MB", flush=True)
        stop = threading.Event()
        thread = threading.Thread(target=watcher.run, args=(stop,), daemon=True)
        thread.start()
        time.sleep(1.0)  # the watch is set up
        latencies: dict[str, list[float]] = {"add": [], "edit": [], "rename": [], "delete": []}
        embedded: dict[str, list[int]] = {kind: [] for kind in latencies}
        picks = iter(rng.sample(range(args.files), 3 * args.rounds))
        for round_ in range(args.rounds):
            before = counting.texts
            name = f"added{round_}.md"
            (folder / name).write_text(_note(rng, 100_000 + round_))
            latencies["add"].append(_wait(engine, f"tok{100_000 + round_}", present=name))
            embedded["add"].append(counting.texts - before)

            number = next(picks)
            path = folder / f"n{number:05d}.md"
            paragraphs = path.read_text().split("\n\n")
            paragraphs[-1] = _paragraph(rng, f"edit{round_}")  # one paragraph of four
            before = counting.texts
            path.write_text("\n\n".join(paragraphs))
            latencies["edit"].append(_wait(engine, f"edit{round_}", present=path.name))
            embedded["edit"].append(counting.texts - before)

            number = next(picks)
            old, new = folder / f"n{number:05d}.md", folder / f"moved{number:05d}.md"
            before = counting.texts
            old.rename(new)
            latencies["rename"].append(_wait(engine, f"tok{number}", present=new.name,
                                             absent=old.name))
            embedded["rename"].append(counting.texts - before)

            number = next(picks)
            gone = folder / f"n{number:05d}.md"
            before = counting.texts
            gone.unlink()
            latencies["delete"].append(_wait(engine, f"tok{number}", absent=gone.name))
            embedded["delete"].append(counting.texts - before)
        stop.set()
        thread.join()
        print(f"\n{args.rounds} rounds, settle {args.settle} s, {args.embedder}; queue depth "
              f"at the end {watcher.stats.queue_depth}; peak RSS {_rss_mb():.0f} MB")
        print("| change | p50 | p99 | max | chunks sent to the model (mean) |")
        print("|--------|----:|----:|----:|-------------------------------:|")
        for kind, values in latencies.items():
            ordered = sorted(values)
            p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
            print(f"| {kind} | {statistics.median(values):.2f} s | {p99:.2f} s | "
                  f"{ordered[-1]:.2f} s | {statistics.mean(embedded[kind]):.1f} |")
        engine.close()


def ingest(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp, "docs")
        _make_folder(folder, args.files)
        kb = Path(tmp, "kb")
        command = [sys.executable, "-c", "from rcpkit.cli import main; main()", "index", "add",
                   str(folder), "--data", str(kb)]
        started = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env={**os.environ, "COLUMNS": "120"})
        wall_s = time.perf_counter() - started
        peak_mb = _rss_mb(resource.RUSAGE_CHILDREN)
        engine = open_engine(kb)
        records = engine.store.chunks(engine.store.visible_rowids(engine.snapshot()).tolist())
        texts = [record.indexed_text for record in records.values()]
        engine.close(save=False)

        started = time.perf_counter()
        model = minilm()
        model.embed(["warm"], "document")
        load_s = time.perf_counter() - started
        started = time.perf_counter()
        for start in range(0, len(texts), 128):  # the writer's slices
            model.embed(texts[start:start + 128], "document")
        model_s = time.perf_counter() - started
        print(f"{args.files} files, {len(texts)} passages")
        print(f"model alone: load {load_s:.1f} s, embed {model_s:.1f} s "
              f"({len(texts) / model_s:.1f} passages/s)")
        print(f"rcpkit index add: {wall_s:.1f} s end to end ({len(texts) / wall_s:.1f} "
              f"passages/s), peak RSS {peak_mb:.0f} MB")
        print(f"end to end / model-bound: {wall_s / model_s:.2f}x; without the model's load: "
              f"{(wall_s - load_s) / model_s:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    watching = commands.add_parser("watch")
    watching.add_argument("--files", type=int, default=10_000)
    watching.add_argument("--rounds", type=int, default=20)
    watching.add_argument("--settle", type=float, default=0.5)
    watching.add_argument("--embedder", default="hashing", choices=("minilm", "hashing"))
    ingesting = commands.add_parser("ingest")
    ingesting.add_argument("--files", type=int, default=200)
    args = parser.parse_args()
    (watch if args.command == "watch" else ingest)(args)


if __name__ == "__main__":
    main()
