"""Dense vector index for dense recall (§3.1, §7.7): exact numpy search, HNSW beyond a size.

Vectors are keyed by the store's integer row ids (non-negative int64, never reused). Up to
``exact_threshold`` rows every search is an exact matrix-vector product over one contiguous
float32 matrix. Beyond it a usearch HNSW graph (cosine, f16) proposes candidates that are then
re-scored exactly from the float32 matrix, so reported scores are always exact cosines and ties
always go to the smaller row id.

Filters (§8) arrive as a boolean mask indexed by row id. A selective filter is searched exactly
over the allowed rows; a broad one queries the graph with oversampling and falls back to exact
search whenever the graph returns fewer than ``k`` allowed rows, so filtering never costs recall
that exact search would have had.

Readers never lock: every mutation publishes a new immutable :class:`_Snapshot` (appends write
only past the published end of the buffer), so a search running concurrently with ``add`` or
``remove`` sees one consistent state. Writers serialise on a lock.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import tempfile
import threading
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from rcpkit.protocol.errors import InvalidParams, NotFound

if TYPE_CHECKING:
    from usearch.index import Index

__all__ = ["DenseIndex"]

METRICS = ("cosine", "dot")
SELECTIVE_FRACTION = 0.05
"""A filter allowing less than this fraction of rows is searched exactly over the allowed rows."""
SELECTIVE_ROWS = 20_000
"""…as is one allowing fewer rows than this (an exact scan of 20k rows is about a millisecond)."""
OVERSAMPLE = 1.5
MAX_CANDIDATES = 10_000
"""Cap on graph candidates requested for a filtered query before exact fallback."""
GATHER_BELOW = 4
"""Exact filtered search copies the allowed rows out when they are under 1/4 of all rows;
otherwise it scores every row and masks the disallowed scores (cheaper than the copy)."""
_FORMAT = 1
_META = "dense.json"
_QUERY_CHUNK = 256


def _load_usearch() -> type[Index]:
    """Import usearch's ``Index``, loading onnxruntime first when it is installed.

    usearch's extension and onnxruntime's do not coexist if usearch is loaded first (the
    process segfaults when onnxruntime is imported afterwards; the reverse order is fine).
    """
    if importlib.util.find_spec("onnxruntime") is not None:
        import onnxruntime  # noqa: F401
    from usearch.index import Index

    return Index


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """An immutable published view: ``vectors[i]`` belongs to ``rowids[i]``; rowids sorted."""

    vectors: np.ndarray
    rowids: np.ndarray

    def positions(self, rowids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Positions of ``rowids`` here, and a mask of which of them are present."""
        positions = np.searchsorted(self.rowids, rowids)
        inside = positions < len(self.rowids)
        present = np.zeros(len(rowids), dtype=bool)
        present[inside] = self.rowids[positions[inside]] == rowids[inside]
        return np.minimum(positions, max(len(self.rowids) - 1, 0)), present


def _allowed(rowids: np.ndarray, allow: np.ndarray) -> np.ndarray:
    """``allow[rowid]`` for each row id; row ids past the end of the mask are not allowed."""
    inside = rowids < len(allow)
    mask = np.zeros(len(rowids), dtype=bool)
    mask[inside] = allow[rowids[inside]]
    return mask


def _top_k(scores: np.ndarray, rowids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best ``(rowid, score)`` pairs, best first, equal scores by smaller row id."""
    if k < len(scores):
        boundary = scores[np.argpartition(-scores, k - 1)[:k]].min()
        keep = np.flatnonzero(scores >= boundary)
        scores, rowids = scores[keep], rowids[keep]
    order = np.lexsort((rowids, -scores))[:k]
    return rowids[order].astype(np.int64), scores[order].astype(np.float32)


class DenseIndex:
    """Row-id-keyed vectors with exact or HNSW top-k search (see module docstring).

    ``connectivity``, ``expansion_add`` and ``expansion_search`` are the HNSW M, ef_construction
    and ef_search. ef_search 128 (usearch's default is 64) measured recall@10 of 0.71 vs 0.60 on
    random 384-d vectors at similar latency, and 1.0 on clustered ones (benchmarks/bench_dense.py).
    ``build_threads=1`` (default) inserts into the graph sequentially: the graph is then a pure
    function of the insertion sequence, so rebuilding from the store reproduces results
    (§7.7.1). Parallel insertion (``0`` = all cores) is faster on idle machines but
    nondeterministic, and usearch 2.26 then leaves a few nodes unreachable (measured: up to 9
    of 3000 points not found by their own vector; none with one thread).
    """

    def __init__(
        self,
        dimension: int,
        *,
        exact_threshold: int = 50_000,
        metric: str = "cosine",
        connectivity: int = 16,
        expansion_add: int = 128,
        expansion_search: int = 128,
        build_threads: int = 1,
    ) -> None:
        if dimension < 1:
            raise ValueError("dimension must be positive")
        if metric not in METRICS:
            raise ValueError(f"metric must be one of {METRICS}, not {metric!r}")
        self.dimension = dimension
        self.metric = metric
        self.exact_threshold = exact_threshold
        self.connectivity = connectivity
        self.expansion_add = expansion_add
        self.expansion_search = expansion_search
        self.build_threads = build_threads
        self._buffer = np.zeros((0, dimension), dtype=np.float32)
        self._buffer_rowids = np.zeros(0, dtype=np.int64)
        self._snapshot = _Snapshot(self._buffer, self._buffer_rowids)
        self._graph: Index | None = None
        self._write_lock = threading.Lock()

    @property
    def count(self) -> int:
        """Number of stored vectors."""
        return len(self._snapshot.rowids)

    @property
    def uses_graph(self) -> bool:
        """Whether unfiltered searches currently go through the HNSW graph."""
        return self._graph is not None and self.count > self.exact_threshold

    # -- writes ---------------------------------------------------------------------------

    def add(self, rowids: np.ndarray, vectors: np.ndarray) -> None:
        """Store ``vectors[i]`` under ``rowids[i]``; row ids must be new, non-negative, unique.

        Cosine indexes store unit-normalised copies. Appending ids above the current maximum
        (the store's normal case) is amortised O(batch).
        """
        ids = np.asarray(rowids, dtype=np.int64).reshape(-1)
        matrix = self._as_matrix(vectors)
        if len(ids) != len(matrix):
            raise ValueError(f"{len(ids)} rowids for {len(matrix)} vectors")
        if len(ids) == 0:
            return
        if ids.min() < 0:
            raise ValueError("rowids must be non-negative")
        if len(np.unique(ids)) != len(ids):
            raise ValueError("duplicate rowids in one add")
        with self._write_lock:
            current = self._snapshot
            if current.positions(ids)[1].any():
                raise ValueError("rowid already present in the dense index")
            order = np.argsort(ids, kind="stable")
            ids, matrix = ids[order], matrix[order]
            if len(current.rowids) == 0 or ids[0] > current.rowids[-1]:
                self._append(ids, matrix)
            else:
                self._merge(ids, matrix)
            if self._graph is not None:
                self._graph.add(ids, matrix, threads=self.build_threads)
            elif self.count > self.exact_threshold:
                self._build_graph()

    def remove(self, rowids: np.ndarray) -> None:
        """Drop the given row ids; ids that are not stored are ignored (idempotent delete)."""
        ids = np.asarray(rowids, dtype=np.int64).reshape(-1)
        with self._write_lock:
            current = self._snapshot
            positions, present = current.positions(ids)
            if not present.any():
                return
            keep = np.ones(len(current.rowids), dtype=bool)
            keep[positions[present]] = False
            self._publish(current.vectors[keep], current.rowids[keep], spare=0)
            if self._graph is not None:
                self._graph.remove(ids[present])

    # -- reads ----------------------------------------------------------------------------

    def get(self, rowids: np.ndarray) -> np.ndarray:
        """Stored vectors for ``rowids``, in the given order; :class:`NotFound` if one is absent."""
        ids = np.asarray(rowids, dtype=np.int64).reshape(-1)
        snapshot = self._snapshot
        positions, present = snapshot.positions(ids)
        if not present.all():
            raise NotFound(f"no vector stored for row id {int(ids[~present][0])}")
        return snapshot.vectors[positions].copy()

    def search(
        self,
        queries: np.ndarray,
        k: int,
        *,
        allow: np.ndarray | None = None,
        seed: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` ``(rowids int64, scores float32)`` for one ``(d,)`` query, best first.

        ``allow`` is a boolean mask indexed by row id (None: every row). ``seed`` (§7.7.1) is
        accepted for the protocol's sake but changes nothing: exact search is deterministic,
        and so is HNSW search over a graph built with one thread (see the class docstring);
        ties always go to the smaller row id.
        """
        query = np.asarray(queries)
        if query.ndim != 1:
            raise InvalidParams(f"expected one query vector of shape ({self.dimension},)")
        return self.search_batch(query[None, :], k, allow=allow, seed=seed)[0]

    def search_batch(
        self,
        queries: np.ndarray,
        k: int,
        *,
        allow: np.ndarray | None = None,
        seed: int | None = None,
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """:meth:`search` for each row of an ``(m, d)`` matrix of queries (same ``allow``)."""
        del seed  # documented in search(): every path is deterministic already
        matrix = self._as_matrix(queries)
        snapshot = self._snapshot
        if k < 1 or len(snapshot.rowids) == 0:
            return [self._empty() for _ in range(len(matrix))]
        if allow is None:
            candidates = snapshot.rowids
            allowed = None
        else:
            allowed = _allowed(snapshot.rowids, np.asarray(allow, dtype=bool))
            candidates = snapshot.rowids[allowed]
            if len(candidates) == 0:
                return [self._empty() for _ in range(len(matrix))]
        graph = self._graph
        if graph is None or len(snapshot.rowids) <= self.exact_threshold:
            return self._exact(snapshot, matrix, k, allowed)
        fraction = len(candidates) / len(snapshot.rowids)
        if allowed is not None and (
            fraction < SELECTIVE_FRACTION or len(candidates) < SELECTIVE_ROWS
        ):
            return self._exact(snapshot, matrix, k, allowed)
        wanted = min(k, len(candidates))
        oversampled = k if allowed is None else math.ceil(k / fraction * OVERSAMPLE)
        oversampled = min(max(oversampled, k), MAX_CANDIDATES, len(snapshot.rowids))
        results = []
        for query in matrix:
            found = self._from_graph(graph, snapshot, query, k, oversampled, allow)
            if len(found[0]) < wanted:
                found = self._exact(snapshot, query[None, :], k, allowed)[0]
            results.append(found)
        return results

    # -- persistence ----------------------------------------------------------------------

    def save(self, directory: Path) -> None:
        """Write the index under ``directory`` atomically (``.npy`` arrays, usearch graph file).

        Data files carry a fresh generation tag and ``dense.json`` is replaced last to point
        at them, so a crash mid-save leaves the previous save readable.
        """
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        with self._write_lock:
            snapshot = self._snapshot
            generation = uuid.uuid4().hex
            names = {"vectors": f"vectors.{generation}.npy", "rowids": f"rowids.{generation}.npy"}
            _write_npy(directory / names["vectors"], snapshot.vectors)
            _write_npy(directory / names["rowids"], snapshot.rowids)
            if self._graph is not None:
                names["graph"] = f"graph.{generation}.usearch"
                self._graph.save(str(directory / names["graph"]))
                _fsync(directory / names["graph"])
            meta = {
                "format": _FORMAT,
                "dimension": self.dimension,
                "metric": self.metric,
                "exact_threshold": self.exact_threshold,
                "connectivity": self.connectivity,
                "expansion_add": self.expansion_add,
                "expansion_search": self.expansion_search,
                "build_threads": self.build_threads,
                "files": names,
            }
            _atomic_write_text(directory / _META, json.dumps(meta, indent=1))
            _remove_stale(directory, keep=set(names.values()))

    @classmethod
    def load(cls, directory: Path) -> DenseIndex:
        """Read an index written by :meth:`save` (no pickle)."""
        directory = Path(directory)
        meta_path = directory / _META
        if not meta_path.is_file():
            raise NotFound(f"no dense index saved in {directory}")
        meta = json.loads(meta_path.read_text())
        if meta.get("format") != _FORMAT:
            raise ValueError(f"unsupported dense index format {meta.get('format')!r}")
        index = cls(
            meta["dimension"],
            exact_threshold=meta["exact_threshold"],
            metric=meta["metric"],
            connectivity=meta["connectivity"],
            expansion_add=meta["expansion_add"],
            expansion_search=meta["expansion_search"],
            build_threads=meta["build_threads"],
        )
        files = meta["files"]
        vectors = np.load(directory / files["vectors"], allow_pickle=False)
        rowids = np.load(directory / files["rowids"], allow_pickle=False)
        index._publish(vectors.astype(np.float32), rowids.astype(np.int64), spare=0)
        if "graph" in files:
            graph = index._new_graph()
            graph.load(str(directory / files["graph"]))
            index._graph = graph
        elif index.count > index.exact_threshold:
            index._build_graph()
        return index

    # -- internals ------------------------------------------------------------------------

    def _as_matrix(self, vectors: np.ndarray) -> np.ndarray:
        """A C-contiguous float32 ``(n, d)`` copy, unit-normalised for the cosine metric."""
        matrix = np.array(vectors, dtype=np.float32, ndmin=2, order="C")
        if matrix.ndim != 2 or matrix.shape[1] != self.dimension:
            raise InvalidParams(
                f"vector dimension {matrix.shape[-1]} does not match the index dimension "
                f"{self.dimension}"
            )
        if not np.isfinite(matrix).all():
            raise InvalidParams("vectors must contain only finite numbers")
        if self.metric == "cosine":
            norms = np.linalg.norm(matrix, axis=1, keepdims=True)
            np.divide(matrix, norms, out=matrix, where=norms > 0)
        return matrix

    def _empty(self) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)

    def _publish(self, vectors: np.ndarray, rowids: np.ndarray, *, spare: int) -> None:
        """Install fresh buffers holding ``vectors``/``rowids`` plus ``spare`` free rows."""
        size = len(rowids)
        self._buffer = np.zeros((size + spare, self.dimension), dtype=np.float32)
        self._buffer_rowids = np.zeros(size + spare, dtype=np.int64)
        self._buffer[:size] = vectors
        self._buffer_rowids[:size] = rowids
        self._snapshot = _Snapshot(self._buffer[:size], self._buffer_rowids[:size])

    def _append(self, rowids: np.ndarray, vectors: np.ndarray) -> None:
        """Write past the published end (invisible to readers), then publish; grow ×1.5."""
        start = len(self._snapshot.rowids)
        end = start + len(rowids)
        if end > len(self._buffer_rowids):
            current = self._snapshot
            growth = len(rowids) + max(end // 2, 1024)
            self._publish(current.vectors, current.rowids, spare=growth)
        self._buffer[start:end] = vectors
        self._buffer_rowids[start:end] = rowids
        self._snapshot = _Snapshot(self._buffer[:end], self._buffer_rowids[:end])

    def _merge(self, rowids: np.ndarray, vectors: np.ndarray) -> None:
        """Insert out-of-order row ids, keeping rows sorted by id (rare; O(n))."""
        current = self._snapshot
        all_ids = np.concatenate([current.rowids, rowids])
        order = np.argsort(all_ids, kind="stable")
        merged = np.concatenate([current.vectors, vectors])[order]
        self._publish(merged, all_ids[order], spare=len(all_ids) // 2)

    def _new_graph(self) -> Index:
        index_class = _load_usearch()
        return index_class(
            ndim=self.dimension,
            metric="cos" if self.metric == "cosine" else "ip",
            dtype="f16",
            connectivity=self.connectivity,
            expansion_add=self.expansion_add,
            expansion_search=self.expansion_search,
        )

    def _build_graph(self) -> None:
        """Build the HNSW graph over every stored row (once the exact threshold is crossed)."""
        graph = self._new_graph()
        snapshot = self._snapshot
        graph.add(snapshot.rowids, snapshot.vectors, threads=self.build_threads)
        self._graph = graph

    def _exact(
        self, snapshot: _Snapshot, queries: np.ndarray, k: int, allowed: np.ndarray | None
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Exact top-k by matrix product over all rows, or over the allowed ones only."""
        vectors, rowids = snapshot.vectors, snapshot.rowids
        mask: np.ndarray | None = None
        keep = k
        if allowed is not None and allowed.sum() * GATHER_BELOW < len(rowids):
            vectors, rowids = vectors[allowed], rowids[allowed]
        elif allowed is not None:
            # Score every row and give disallowed rows -inf: allowed scores are finite, so
            # the top min(k, allowed) never include a disallowed row.
            mask, keep = allowed, min(k, int(allowed.sum()))
        results: list[tuple[np.ndarray, np.ndarray]] = []
        for start in range(0, len(queries), _QUERY_CHUNK):
            scores = queries[start : start + _QUERY_CHUNK] @ vectors.T
            if mask is not None:
                scores = np.where(mask, scores, -np.inf)
            results.extend(_top_k(row, rowids, keep) for row in scores)
        return results

    def _from_graph(
        self,
        graph: Index,
        snapshot: _Snapshot,
        query: np.ndarray,
        k: int,
        candidates: int,
        allow: np.ndarray | None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Graph candidates, restricted to allowed rows of this snapshot, re-scored exactly."""
        keys = np.asarray(graph.search(query, candidates).keys, dtype=np.int64)
        if allow is not None:
            keys = keys[_allowed(keys, np.asarray(allow, dtype=bool))]
        positions, present = snapshot.positions(keys)
        positions, keys = positions[present], keys[present]
        scores = snapshot.vectors[positions] @ query
        return _top_k(scores, keys, k)


def _fsync(path: Path) -> None:
    with path.open("rb") as stream:
        os.fsync(stream.fileno())


def _write_npy(path: Path, array: np.ndarray) -> None:
    """Save ``array`` as ``.npy`` (no pickle) and flush it to disk."""
    with path.open("wb") as stream:
        np.save(stream, array, allow_pickle=False)
        stream.flush()
        os.fsync(stream.fileno())


def _atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to a temporary sibling, fsync, then rename over ``path``."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _remove_stale(directory: Path, *, keep: Iterable[str]) -> None:
    """Delete data files of earlier saves (those ``dense.json`` no longer points at)."""
    kept = set(keep)
    for pattern in ("vectors.*.npy", "rowids.*.npy", "graph.*.usearch"):
        for path in directory.glob(pattern):
            if path.name not in kept:
                path.unlink(missing_ok=True)
