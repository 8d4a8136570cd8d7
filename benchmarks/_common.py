"""Helpers shared by bench_scale.py, bench_stages.py and bench_quality.py (not a benchmark).

The engine-level benchmarks bypass the embedding model for the corpus: :class:`LookupEmbedder`
hands the engine precomputed vectors for known texts, so ingest and recall timings measure the
engine (store, indexes, pipeline), not MiniLM. Queries may fall through to a real model.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from rcpkit.engine.config import EngineConfig, IndexConfig
from rcpkit.engine.core import Engine
from rcpkit.engine.models.embedding import Embedder
from rcpkit.engine.types import DocumentIn

DIMENSION = 384
PLOTS = Path(__file__).resolve().parent.parent / "docs" / "plots"


class LookupEmbedder:
    """An :class:`~rcpkit.engine.models.embedding.Embedder` that serves registered vectors by text.

    Unknown texts go to ``fallback`` (e.g. MiniLM for real queries and ColBERT token vectors);
    without one they are an error, so a benchmark cannot silently measure the wrong thing.
    """

    identity = "rcpkit-bench/precomputed-384@1"
    dimension = DIMENSION

    def __init__(self, fallback: Embedder | None = None) -> None:
        self.fallback = fallback
        self._rows: dict[str, int] = {}
        self._vectors = np.zeros((0, DIMENSION), dtype=np.float32)

    def register(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Serve ``vectors[i]`` (unit-norm float32) for ``texts[i]`` from now on."""
        base = len(self._vectors)
        self._vectors = np.concatenate([self._vectors, np.asarray(vectors, np.float32)])
        self._rows.update((text, base + i) for i, text in enumerate(texts))

    def embed(self, texts: Sequence[str], kind: str = "document") -> np.ndarray:
        rows = [self._rows.get(text, -1) for text in texts]
        if min(rows, default=0) >= 0:
            return self._vectors[rows]
        if self.fallback is None:
            raise KeyError("text without a registered vector and no fallback embedder")
        return np.asarray(self.fallback.embed(texts, kind), dtype=np.float32)

    def token_embeddings(self, texts: Sequence[str], kind: str = "document") -> list[np.ndarray]:
        if self.fallback is None:
            raise KeyError("token embeddings need a fallback embedder")
        return self.fallback.token_embeddings(texts, kind)


def unit_vectors(count: int, seed: int) -> np.ndarray:
    """``count`` random unit vectors of :data:`DIMENSION`, float32 (generated in blocks)."""
    rng = np.random.default_rng(seed)
    out = np.empty((count, DIMENSION), dtype=np.float32)
    for start in range(0, count, 65_536):
        block = rng.standard_normal((min(65_536, count - start), DIMENSION), dtype=np.float32)
        out[start:start + len(block)] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out


def open_engine(data_dir: Path, embedder: Embedder, **overrides: Any) -> Engine:
    """An engine over a fresh SQLite store in ``data_dir`` with index saves deferred to close."""
    config = EngineConfig(data_dir=data_dir,
                          index=IndexConfig(save_every=1_000_000)).with_overrides(
        **overrides)
    return Engine.open(config, embedder=embedder)


def ingest(engine: Engine, texts: Sequence[str], metas: Sequence[Mapping[str, Any]],
           *, batch: int = 1000, first_id: int = 0,
           progress: Callable[[int], None] | None = None) -> None:
    """``Engine.add`` every text as one single-chunk document ``d<N>``, ``batch`` per call."""
    for start in range(0, len(texts), batch):
        engine.add([DocumentIn(text=text, id=f"d{first_id + start + i}", meta=meta)
                    for i, (text, meta) in enumerate(zip(texts[start:start + batch],
                                                         metas[start:start + batch],
                                                         strict=True))])
        if progress is not None:
            progress(start + batch)


def percentiles(samples_ms: Sequence[float]) -> tuple[float, float, float]:
    """p50, p95 and p99 of latency samples in milliseconds."""
    p50, p95, p99 = np.percentile(np.asarray(samples_ms), [50, 95, 99])
    return float(p50), float(p95), float(p99)


def timed(calls: Sequence[Callable[[], object]]) -> tuple[float, float, float]:
    """p50/p95/p99 in ms of each call, made one after the other."""
    samples = []
    for call in calls:
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1000)
    return percentiles(samples)


def rss_bytes() -> int:
    """Current resident set size of this process."""
    with open("/proc/self/statm") as stream:
        return int(stream.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def stamp() -> str:
    """UTC timestamp for the header of a benchmark's output."""
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")


def figure_path(name: str, quick: bool) -> Path | None:
    """Where a chart goes: ``docs/plots/<name>.png``, or nowhere in ``--quick`` mode."""
    if quick:
        return None
    PLOTS.mkdir(parents=True, exist_ok=True)
    return PLOTS / f"{name}.png"
