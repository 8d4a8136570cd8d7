"""The engine as served over RCP: what the wire costs on top of the engine.

For each size (10k and 100k chunks by default) the corpus of bench_scale.py is used — Zipfian
pseudo-word text (bench_lexical.py) with random unit vectors (d=384) served by
``_common.LookupEmbedder``, so no embedding model dominates — and the engine is run as
``rcpkit serve --app bench_engine:served`` (this module's factory rebuilds the same corpus and
vectors in the server process). Measured, side by side:

- ingest: documents/s through ``index/add`` over stdio (1000 single-chunk documents per call,
  each acknowledged only once durable) against ``Engine.add`` in-process;
- ``retrieve`` p50/p95 (k=10, candidateK=100, includeText false) for sparse, dense and hybrid
  over stdio and over HTTP (loopback, stateless) against ``Engine.search`` in-process on the
  same data directory, and against bm25s (lexical) and numpy brute force (dense) baselines;
- memory: RSS of the HTTP server process once loaded, minus that of a server on an empty data
  directory, per chunk; and bytes on disk per chunk.

On a shared host run it with ``OPENBLAS_NUM_THREADS=1`` (the servers it starts always are):
a multi-threaded matrix-vector product under CPU contention adds milliseconds of noise.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_engine.py          # 10k and 100k chunks
    python benchmarks/bench_engine.py --sizes 2000 --queries 20       # smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from _common import LookupEmbedder, ingest, open_engine, percentiles, stamp, timed, unit_vectors
from bench_dense import numpy_top_k
from bench_lexical import Bm25s, synthetic_corpus

from rcpkit.binding import bind
from rcpkit.client import AsyncClient, connect_http, connect_stdio
from rcpkit.engine.text import Analyzer
from rcpkit.engine.types import SearchRequest
from rcpkit.server import Server

HERE = Path(__file__).resolve().parent
MODES = ("sparse", "dense", "hybrid")
DEPTH = 100
BATCH = 1000
_ENV_DATA, _ENV_SIZE, _ENV_SEED = "BENCH_ENGINE_DATA", "BENCH_ENGINE_SIZE", "BENCH_ENGINE_SEED"


@dataclass(frozen=True)
class Corpus:
    """Texts with precomputed vectors, and queries whose vectors are noisy corpus vectors."""

    texts: list[str]
    vectors: np.ndarray
    queries: list[str]
    query_vectors: np.ndarray

    @classmethod
    def build(cls, size: int, seed: int) -> Corpus:
        texts, queries = synthetic_corpus(size, seed) if size else ([], [])
        vectors = unit_vectors(size, seed)
        rng = np.random.default_rng(seed + 1)
        noisy = (vectors[rng.integers(0, max(size, 1), len(queries))] if size else
                 np.zeros((0, vectors.shape[1]), np.float32))
        noisy = noisy + 0.05 * rng.standard_normal(noisy.shape, dtype=np.float32)
        norms = np.maximum(np.linalg.norm(noisy, axis=1, keepdims=True), 1e-12)
        return cls(texts, vectors, queries, (noisy / norms).astype(np.float32))

    def embedder(self) -> LookupEmbedder:
        lookup = LookupEmbedder()
        lookup.register(self.texts, self.vectors)
        lookup.register(self.queries, self.query_vectors)
        return lookup


def served() -> Server:
    """``--app`` factory run inside ``rcpkit serve``: the engine over the corpus named by the
    environment, with the lookup embedder."""
    corpus = Corpus.build(int(os.environ[_ENV_SIZE]), int(os.environ[_ENV_SEED]))
    engine = open_engine(Path(os.environ[_ENV_DATA]), corpus.embedder())
    atexit.register(engine.close)
    return bind(engine)


def _server_env(data: Path, size: int, seed: int) -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, _ENV_DATA: str(data), _ENV_SIZE: str(size),
            _ENV_SEED: str(seed), "OPENBLAS_NUM_THREADS": "1"}


def _serve_argv(*transport: str) -> list[str]:
    return [sys.executable, "-c", "from rcpkit.cli import main; main()", "serve", *transport,
            "--app", "bench_engine:served"]


class HttpServer:
    """``rcpkit serve --http`` on a free loopback port, waited for until it answers ``info``."""

    def __init__(self, env: dict[str, str]) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/rcp"
        self.proc = subprocess.Popen(_serve_argv("--http", f"127.0.0.1:{port}"), env=env,
                                     stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 300
        while True:
            try:
                httpx.post(f"{self.url}/info", json={"jsonrpc": "2.0", "id": 0,
                                                     "method": "info"}, timeout=5)
                return
            except httpx.TransportError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the HTTP server did not start") from None
                time.sleep(0.2)

    def rss(self) -> int:
        with open(f"/proc/{self.proc.pid}/statm") as stream:
            return int(stream.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)


@dataclass
class SizeResult:
    size: int
    ingest_wire: float = 0.0
    ingest_local: float = 0.0
    latency: dict[str, tuple[float, float, float]] | None = None
    rss_per_chunk: float = 0.0
    disk_per_chunk: float = 0.0


async def _timed_async(calls: Sequence[Callable[[], Awaitable[object]]]
                       ) -> tuple[float, float, float]:
    samples = []
    for call in calls:
        start = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - start) * 1000)
    return percentiles(samples)


def _params(query: str, mode: str) -> dict[str, Any]:
    return {"query": query, "k": 10, "mode": mode, "candidateK": DEPTH, "includeText": False}


async def _wire_latencies(client: AsyncClient, queries: Sequence[str], label: str,
                          into: dict[str, tuple[float, float, float]]) -> None:
    for mode in MODES:
        await client.call("retrieve", _params(queries[0], mode))  # warm-up
        into[f"{mode}/{label}"] = await _timed_async([
            lambda q=query, m=mode: client.call("retrieve", _params(q, m)) for query in queries])


async def bench_size(size: int, query_count: int, work: Path, seed: int,
                     empty_rss: int) -> SizeResult:
    corpus = Corpus.build(size, seed)
    queries = corpus.queries[:query_count]
    result = SizeResult(size, latency={})
    assert result.latency is not None
    data = work / f"engine-{size}"
    env = _server_env(data, size, seed)
    client = await connect_stdio(_serve_argv("--stdio"), env=env, log_level=None, timeout=300)
    start = time.perf_counter()
    for first in range(0, size, BATCH):
        await client.call("index/add", {"documents": [
            {"id": f"d{first + i}", "text": text}
            for i, text in enumerate(corpus.texts[first:first + BATCH])]})
    result.ingest_wire = size / (time.perf_counter() - start)
    await _wire_latencies(client, queries, "stdio", result.latency)
    await client.close()

    http = HttpServer(env)
    try:
        result.rss_per_chunk = (http.rss() - empty_rss) / size
        http_client = await connect_http(http.url, log_level=None)
        await _wire_latencies(http_client, queries, "http", result.latency)
        await http_client.close()
    finally:
        http.stop()
    result.disk_per_chunk = sum(p.stat().st_size for p in data.rglob("*") if p.is_file()) / size

    engine = open_engine(data, corpus.embedder())
    for mode in MODES:
        engine.search(SearchRequest(**_request(queries[0], mode)))
        result.latency[f"{mode}/in-process"] = timed([
            lambda q=query, m=mode: engine.search(SearchRequest(**_request(q, m)))
            for query in queries])
    engine.close()

    local = open_engine(work / f"local-{size}", corpus.embedder())
    start = time.perf_counter()
    ingest(local, corpus.texts, [{} for _ in corpus.texts], batch=BATCH)
    result.ingest_local = size / (time.perf_counter() - start)
    local.close()

    analyzer = Analyzer()
    bm25 = Bm25s(analyzer, analyzer.tokens_batch(corpus.texts))
    sparse = timed([lambda q=query: bm25.search(q, DEPTH) for query in queries])
    dense = timed([lambda v=vector: numpy_top_k(corpus.vectors, v, DEPTH, None)
                    for vector in corpus.query_vectors[:query_count]])
    result.latency["sparse/baseline"] = sparse
    result.latency["dense/baseline"] = dense
    result.latency["hybrid/baseline"] = (sparse[0] + dense[0], sparse[1] + dense[1],
                                         sparse[2] + dense[2])
    return result


def _request(query: str, mode: str) -> dict[str, Any]:
    return {"query": query, "k": 10, "mode": mode, "candidate_k": DEPTH, "include_text": False}


def report(results: Sequence[SizeResult]) -> None:
    print(f"\nrcpkit engine served over RCP — {stamp()} — {os.cpu_count()} cores")
    print("\ningest (documents/s, one chunk each, 1000 per call)")
    print(f"{'chunks':>8} {'index/add stdio':>16} {'Engine.add':>12} {'wire/local':>11}")
    for r in results:
        print(f"{r.size:>8} {r.ingest_wire:>16.0f} {r.ingest_local:>12.0f} "
              f"{r.ingest_wire / r.ingest_local:>11.2f}")
    print("\nretrieve latency, ms p50 / p95 (k=10, candidateK=100; baseline = bm25s for sparse,"
          " numpy brute force for dense, their sum for hybrid)")
    columns = ("in-process", "stdio", "http", "baseline")
    print(f"{'chunks':>8} {'mode':>7} " + " ".join(f"{c:>15}" for c in columns)
          + f" {'stdio/in-proc':>14} {'in-proc/base':>13}")
    for r in results:
        assert r.latency is not None
        for mode in MODES:
            cells = [r.latency[f"{mode}/{c}"] for c in columns]
            print(f"{r.size:>8} {mode:>7} "
                  + " ".join(f"{p50:>7.2f} / {p95:>5.2f}" for p50, p95, _ in cells)
                  + f" {cells[1][0] / cells[0][0]:>14.2f} {cells[0][0] / cells[3][0]:>13.2f}")
    print("\nmemory")
    print(f"{'chunks':>8} {'RSS bytes/chunk':>16} {'disk bytes/chunk':>17}")
    for r in results:
        print(f"{r.size:>8} {r.rss_per_chunk:>16.0f} {r.disk_per_chunk:>17.0f}")


async def run(sizes: Sequence[int], query_count: int, seed: int) -> None:
    with tempfile.TemporaryDirectory(prefix="rcpkit-bench-engine-") as tmp:
        work = Path(tmp)
        empty = HttpServer(_server_env(work / "empty", 0, seed))
        empty_rss = empty.rss()
        empty.stop()
        results = []
        for size in sizes:
            print(f"… {size} chunks", file=sys.stderr, flush=True)
            results.append(await bench_size(size, query_count, work, seed, empty_rss))
    report(results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    options = parser.parse_args()
    asyncio.run(run(options.sizes, options.queries, options.seed))


if __name__ == "__main__":
    main()
