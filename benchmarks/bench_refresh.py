"""Cost of ``Engine.refresh`` (scale-out): the per-request check every search and write
makes so that engines sharing one record stay in step.

Prints, per backend, the mean µs of ``refresh()`` when nothing changed, the mean µs of a sparse
``search`` (which includes one refresh) and the ratio of the two, then the µs to take in one
document written by another engine. SQLite always; PostgreSQL too when ``--dsn`` (or
``RCPKIT_DSN``) points at a database with pgvector.

    python benchmarks/bench_refresh.py
    python benchmarks/bench_refresh.py --docs 5000 --calls 50000 --dsn postgresql://...
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rcpkit.engine.config import EmbedderConfig, EngineConfig
from rcpkit.engine.core import Engine
from rcpkit.engine.models.embedding import HashingEmbedder
from rcpkit.engine.store import SqliteStore, Store
from rcpkit.engine.types import DocumentIn, SearchRequest


def mean_us(action: Callable[[], object], calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        action()
    return (time.perf_counter() - started) / calls * 1e6


def measure(name: str, open_store: Callable[[], Store], data_dir: Path, docs: int,
            calls: int) -> None:
    config = EngineConfig(data_dir=data_dir, embedder=EmbedderConfig(name="hashing"))
    writer = Engine(config, open_store(), HashingEmbedder(64), {})
    reader = Engine(config, open_store(), HashingEmbedder(64), {})
    for start in range(0, docs, 500):
        writer.add([DocumentIn(f"Site log {i}: crane, scaffold and rebar checks.", id=f"d{i}")
                    for i in range(start, min(start + 500, docs))])
    reader.refresh()
    idle = mean_us(reader.refresh, calls)
    request = SearchRequest("scaffold rebar", k=10, mode="sparse")
    search = mean_us(lambda: reader.search(request), max(1, calls // 20))
    catch_up = []
    for i in range(50):
        writer.add([DocumentIn(f"Late entry {i}: formwork stripped.", id=f"late{i}")])
        started = time.perf_counter()
        reader.refresh()
        catch_up.append((time.perf_counter() - started) * 1e6)
    print(f"{name:8} {docs} docs: refresh (unchanged) {idle:7.1f} µs | sparse search "
          f"{search:8.1f} µs | refresh/search {idle / search:6.1%} | catch-up of one write "
          f"{sorted(catch_up)[len(catch_up) // 2]:8.1f} µs (median)")
    writer.close()
    reader.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--dsn", default=os.environ.get("RCPKIT_DSN"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        measure("sqlite", lambda: SqliteStore.open(root / "sqlite"), root / "sqlite",
                args.docs, args.calls)
        if args.dsn:
            from rcpkit.engine.store.postgres import PostgresStore

            measure("postgres", lambda: PostgresStore.open(args.dsn), root / "pg", args.docs,
                    args.calls)


if __name__ == "__main__":
    main()
