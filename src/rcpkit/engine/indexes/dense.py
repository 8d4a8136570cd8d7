"""Dense vector index for dense recall (§3.1, §7.7): exact numpy search, HNSW beyond a size.

Vectors are keyed by the store's integer row ids (non-negative int64, never reused). Up to
``exact_threshold`` rows every search is one BLAS matrix-vector product over a contiguous
float32 matrix plus ``argpartition``. Beyond it a usearch HNSW graph (cosine, f16 or int8)
proposes candidates that are re-scored exactly from the float32 matrix, so reported scores are
always exact cosines and ties always go to the smaller row id.

**Graph builds never block.** A build takes minutes at 100k rows, so it runs on a background
thread over an immutable snapshot; exact search serves until the graph is published. Rows
added after a build (the *tail*) are searched exactly and merged with the graph's candidates;
once the tail (plus removed rows the graph still holds) outgrows ``max(TAIL_MIN_ROWS,
TAIL_FRACTION × rows)`` the thread extends a copy of the graph and publishes it. Published
graphs are never mutated, so searches and :meth:`DenseIndex.save` need no lock on them, and a
saved graph is reloaded on start instead of rebuilt.

**Determinism (§7.7.1).** Graph results depend on which graph is published, and that changes
whenever a background build finishes, so ``exact=True`` bypasses the graph: results are then a
pure function of the query and the stored rows. The engine asks for it when a request carries a
``seed`` or is pinned to a snapshot (``indexVersion`` or a §10 cursor), so identical
``(query, params, seed, indexVersion)`` give identical results.

Filters (§8) arrive as a boolean mask indexed by row id. A selective filter is searched exactly
over the allowed rows; a broad one queries the graph with oversampling and falls back to exact
search whenever graph and tail yield fewer than ``k`` allowed rows, so filtering never costs
recall that exact search would have had.

Readers never lock: every mutation publishes a new immutable :class:`_View` (appends write only
past the published end of the buffer). Writers serialise on a lock held only for O(batch) work.

usearch must never be imported before onnxruntime (the process then segfaults when onnxruntime
loads); :func:`_load_usearch` is the only place rcpkit imports it and enforces the order.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import os
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from rcpkit.engine.errors import IndexUnavailable
from rcpkit.engine.indexes.persist import compact_ints, file_checksum, verify_file

if TYPE_CHECKING:
    from usearch.index import Index

__all__ = ["DenseIndex", "StoredVectors"]

logger = logging.getLogger(__name__)

METRICS = ("cosine", "dot")
StoredVectors = Callable[[npt.NDArray[np.int64]],
                         tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]]
"""``(rowids, vectors)``, ascending, of those of the given rows the record still holds."""
SELECTIVE_FRACTION = 0.05
"""A filter allowing less than this fraction of rows is searched exactly over the allowed rows."""
SELECTIVE_ROWS = 20_000
"""…as is one allowing fewer rows than this (an exact scan of 20k rows is about a millisecond)."""
OVERSAMPLE = 1.5
GRAPH_DTYPES = ("f16", "i8")
I8_RESCORE = 4
"""An ``i8`` graph (int8 scalar quantisation) ranks less exactly than an ``f16`` one: it
proposes this many times the candidates, all re-scored exactly from the float32 matrix
(``benchmarks/bench_storage.py --graph``)."""
MAX_CANDIDATES = 10_000
"""Cap on graph candidates requested for a filtered query before exact fallback."""
GATHER_BELOW = 4
"""Exact filtered search copies the allowed rows out when they are under 1/4 of all rows;
otherwise it scores every row and masks the disallowed scores (cheaper than the copy)."""
TAIL_MIN_ROWS = 2_048
TAIL_FRACTION = 0.02
"""The graph is extended once the rows it lacks plus the removed rows it still holds exceed
``max(TAIL_MIN_ROWS, TAIL_FRACTION × rows)``; an exact scan of that tail costs well under 1 ms."""
REBUILD_STALE_FRACTION = 0.25
"""A graph holding more removed rows than this fraction of its size is rebuilt, not extended."""
BUILD_BATCH = 4_096
"""Rows per usearch insertion call; the builder checks for :meth:`DenseIndex.close` between."""
CHECK_EXPANSIONS = (4, 32, 256)
CHECK_K = 4
"""The self-check after a parallel insertion searches each new vector for itself (k
``CHECK_K``), widening the search (ef) for those not found yet: a greedy search finds most
nodes, and one that only a wide search finds is reachable and needs no repair. Only the
nodes the widest search misses are re-inserted: on clustered vectors, where many reachable
nodes are hard to find, re-inserting every miss of an ef 32 search (5.7 % of the rows
inserted near 200k) slowed the build more and more as the graph grew
(``benchmarks/bench_dense.py --build``)."""
REPAIR_ROUNDS = 3
_FORMAT = 2
_META = "dense.json"
_QUERY_CHUNK = 256
_NO_ROWS = np.zeros(0, dtype=np.int64)


def _load_usearch() -> type[Index]:
    """Import usearch's ``Index``, loading onnxruntime first when it is installed.

    usearch's extension and onnxruntime's do not coexist if usearch is loaded first (the
    process segfaults when onnxruntime is imported afterwards; the reverse order is fine).
    If something else already imported usearch alone, fail loudly instead of crashing later.
    """
    if importlib.util.find_spec("onnxruntime") is not None:
        if "usearch.index" in sys.modules and "onnxruntime" not in sys.modules:
            raise RuntimeError("usearch was imported before onnxruntime; importing onnxruntime "
                               "now would crash the process (import this module first)")
        import onnxruntime  # noqa: F401
    from usearch.index import Index

    return Index


def _member(sorted_keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions of ``values`` in ``sorted_keys`` (clipped) and a mask of which are present."""
    positions = np.searchsorted(sorted_keys, values)
    inside = positions < len(sorted_keys)
    present = np.zeros(len(values), dtype=bool)
    present[inside] = sorted_keys[positions[inside]] == values[inside]
    return np.minimum(positions, max(len(sorted_keys) - 1, 0)), present


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """Stored rows: ``vectors[i]`` belongs to ``rowids[i]``; rowids sorted; never mutated."""

    vectors: np.ndarray
    rowids: np.ndarray

    def positions(self, rowids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Positions of ``rowids`` here, and a mask of which of them are present."""
        return _member(self.rowids, rowids)


@dataclass(frozen=True, slots=True)
class _Graph:
    """A published HNSW graph (never mutated once published) and its sorted row ids."""

    index: Index
    rowids: np.ndarray


@dataclass(frozen=True, slots=True)
class _View:
    """What a reader sees: the rows, the graph (if any), and how the two differ."""

    snapshot: _Snapshot
    graph: _Graph | None
    tail: np.ndarray
    """Positions in ``snapshot`` of rows the graph lacks (empty without a graph)."""
    stale: int
    """Rows the graph still holds that were removed since."""


@dataclass(frozen=True, slots=True)
class _BuildPlan:
    """The in-flight graph build, for :attr:`DenseIndex.graph_pending` (all 0 when idle)."""

    rows: int
    """Rows this build inserts."""
    inserted: int
    """…of which inserted so far."""
    lacking: int
    """Rows the published view lacked when the build began."""


def _view_of(snapshot: _Snapshot, graph: _Graph | None) -> _View:
    """Pair rows with a graph, working out the tail and the stale count (O(n log n))."""
    if graph is None:
        return _View(snapshot, None, _NO_ROWS, 0)
    in_graph = _member(graph.rowids, snapshot.rowids)[1]
    tail = np.flatnonzero(~in_graph)
    return _View(snapshot, graph, tail, len(graph.rowids) - (len(snapshot.rowids) - len(tail)))


def _allowed(rowids: np.ndarray, allow: np.ndarray) -> np.ndarray:
    """``allow[rowid]`` for each row id; row ids past the end of the mask are not allowed."""
    inside = rowids < len(allow)
    mask = np.zeros(len(rowids), dtype=bool)
    mask[inside] = allow[rowids[inside]]
    return mask


def _top_k(scores: np.ndarray, rowids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best ``(rowid, score)`` pairs, best first, equal scores by smaller row id."""
    if k < len(scores):
        boundary = scores[np.argpartition(scores, len(scores) - k)[len(scores) - k :]].min()
        keep = np.flatnonzero(scores >= boundary)
        scores, rowids = scores[keep], rowids[keep]
    order = np.lexsort((rowids, -scores))[:k]
    return rowids[order].astype(np.int64), scores[order].astype(np.float32)


class DenseIndex:
    """Row-id-keyed vectors with exact or HNSW top-k search (see module docstring).

    ``connectivity``, ``expansion_add`` and ``expansion_search`` are the HNSW M, ef_construction
    and ef_search. ef_search 256 (usearch's default is 64): on 200k clustered 384-d vectors
    recall@10 was 0.994 against 0.982 at 128 (0.972 in another build of the same rows), for
    1.50 against 1.28 ms a graph search; ef_construction 64 instead of 128 reached only 0.972
    even at ef_search 384 (``benchmarks/bench_dense.py --build``, docs/benchmarks.md).
    ``build_threads`` > 1 insert in parallel on the background thread (default 1: on a
    loaded 2-core host two threads plus the self-check below settled 50k clustered vectors in
    1.5x the time of one, ``benchmarks/bench_dense.py --build``; with idle cores to spare
    they pay). Parallel HNSW insertion can leave a node unreachable: two close vectors inserted
    at once do not see each other, and when a shared neighbour's full list is pruned by the
    diversity heuristic it keeps only one of them, "covered" by the other, which has no link
    to it (usearch 2.26: a few of 3000 clustered vectors not found by their own vector with
    two threads, none with one). So every parallel batch is self-checked — each new vector
    must find itself, in a search widened step by step for those a narrower one misses
    (``CHECK_EXPANSIONS``) — and the nodes that do not are removed and inserted again one at
    a time, when their neighbours are all linked (:meth:`_insert`).
    """

    def __init__(
        self,
        dimension: int,
        *,
        exact_threshold: int = 50_000,
        metric: str = "cosine",
        connectivity: int = 16,
        expansion_add: int = 128,
        expansion_search: int = 256,
        build_threads: int = 1,
        graph_dtype: str = "f16",
    ) -> None:
        if dimension < 1:
            raise ValueError("dimension must be positive")
        if metric not in METRICS:
            raise ValueError(f"metric must be one of {METRICS}, not {metric!r}")
        if graph_dtype not in GRAPH_DTYPES:
            raise ValueError(f"graph_dtype must be one of {GRAPH_DTYPES}, not {graph_dtype!r}")
        self.dimension = dimension
        self.metric = metric
        self.exact_threshold = exact_threshold
        self.connectivity = connectivity
        self.expansion_add = expansion_add
        self.expansion_search = expansion_search
        self.build_threads = build_threads
        self.graph_dtype = graph_dtype
        self._buffer = np.zeros((0, dimension), dtype=np.float32)
        self._buffer_rowids = np.zeros(0, dtype=np.int64)
        self._view = _view_of(_Snapshot(self._buffer, self._buffer_rowids), None)
        self._write_lock = threading.Lock()
        self._save_lock = threading.Lock()
        self._builder: threading.Thread | None = None
        self._closing = threading.Event()
        self._plan = _BuildPlan(0, 0, 0)

    @property
    def count(self) -> int:
        """Number of stored vectors."""
        return len(self._view.snapshot.rowids)

    @property
    def uses_graph(self) -> bool:
        """Whether unfiltered, non-exact searches currently consult the HNSW graph."""
        view = self._view
        return view.graph is not None and len(view.snapshot.rowids) > self.exact_threshold

    @property
    def graph_tail(self) -> int:
        """Rows searched exactly next to the graph because it does not hold them yet."""
        return len(self._view.tail)

    @property
    def graph_pending(self) -> int:
        """Rows not in a published graph yet (0 while exact search needs none): what the
        background build has still to insert, counting down as it goes, so that a long
        first build shows progress."""
        view, plan = self._view, self._plan
        if len(view.snapshot.rowids) <= self.exact_threshold:
            return 0
        lacking = len(view.tail) if view.graph is not None else len(view.snapshot.rowids)
        if not plan.rows:
            return lacking
        return plan.rows - plan.inserted + max(0, lacking - plan.lacking)

    # -- writes ---------------------------------------------------------------------------

    def add(self, rowids: np.ndarray, vectors: np.ndarray) -> None:
        """Store ``vectors[i]`` under ``rowids[i]``; row ids must be new, non-negative, unique.

        Cosine indexes store unit-normalised copies. Appending ids above the current maximum
        (the store's normal case) is amortised O(batch); graph work happens in the background.
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
            view = self._view
            current = view.snapshot
            if current.positions(ids)[1].any():
                raise ValueError("rowid already present in the dense index")
            order = np.argsort(ids, kind="stable")
            ids, matrix = ids[order], matrix[order]
            if len(current.rowids) == 0 or ids[0] > current.rowids[-1]:
                snapshot = self._append(current, ids, matrix)
                tail = view.tail
                if view.graph is not None:
                    tail = np.concatenate(
                        [tail, np.arange(len(current.rowids), len(snapshot.rowids))])
                self._view = _View(snapshot, view.graph, tail, view.stale)
            else:
                self._view = _view_of(self._merge(current, ids, matrix), view.graph)
            self._schedule_build()

    def remove(self, rowids: np.ndarray) -> None:
        """Drop the given row ids; ids that are not stored are ignored (idempotent delete)."""
        ids = np.asarray(rowids, dtype=np.int64).reshape(-1)
        with self._write_lock:
            view = self._view
            current = view.snapshot
            positions, present = current.positions(ids)
            if not present.any():
                return
            keep = np.ones(len(current.rowids), dtype=bool)
            keep[positions[present]] = False
            snapshot = self._publish(current.vectors[keep], current.rowids[keep], spare=0)
            self._view = _view_of(snapshot, view.graph)
            self._schedule_build()

    # -- background graph -----------------------------------------------------------------

    def wait_for_graph(self, timeout: float | None = None) -> bool:
        """Block until no graph build is running (or ``timeout`` s pass); True when idle."""
        builder = self._builder
        if builder is not None:
            builder.join(timeout)
        return self._builder is None or not self._builder.is_alive()

    def close(self) -> None:
        """Stop the background builder (its unfinished graph is dropped) and wait for it."""
        self._closing.set()
        builder = self._builder
        if builder is not None:
            builder.join()

    def _needs_build(self, view: _View) -> bool:
        rows = len(view.snapshot.rowids)
        if rows <= self.exact_threshold:
            return False
        if view.graph is None:
            return True
        return len(view.tail) + view.stale >= max(TAIL_MIN_ROWS, TAIL_FRACTION * rows)

    def _schedule_build(self) -> None:
        """Start the builder thread if the graph is missing or behind (caller holds the lock)."""
        running = self._builder is not None and self._builder.is_alive()
        if running or self._closing.is_set() or not self._needs_build(self._view):
            return
        self._builder = threading.Thread(target=self._build_loop, name="rcpkit-dense-graph",
                                         daemon=True)
        self._builder.start()

    def _build_loop(self) -> None:
        """Build or extend graphs until one covers the rows closely enough, publishing each."""
        try:
            while True:
                with self._write_lock:
                    view = self._view
                    if self._closing.is_set() or not self._needs_build(view):
                        return
                graph = self._graph_for(view)
                if graph is None:
                    return
                with self._write_lock:
                    self._view = _view_of(self._view.snapshot, graph)
                    self._plan = _BuildPlan(0, 0, 0)
        except Exception:  # a failed build must not take the process down; exact still serves
            logger.exception("dense graph build failed; exact search keeps serving")
        finally:
            self._plan = _BuildPlan(0, 0, 0)

    def _graph_for(self, view: _View) -> _Graph | None:
        """A new graph covering ``view.snapshot``: a fresh build, or a copy of the current
        graph minus removed rows plus the tail. None if :meth:`close` interrupted it."""
        snapshot, old = view.snapshot, view.graph
        if old is None or view.stale > REBUILD_STALE_FRACTION * len(old.rowids):
            graph, kept = self._new_graph(), _NO_ROWS
            pending = np.arange(len(snapshot.rowids))
        else:
            graph = old.index.copy()
            present = _member(snapshot.rowids, old.rowids)[1]
            if not present.all():
                graph.remove(old.rowids[~present])
            kept, pending = old.rowids[present], view.tail
        lacking = len(view.tail) if old is not None else len(snapshot.rowids)
        for start in range(0, len(pending), BUILD_BATCH):
            self._plan = _BuildPlan(len(pending), start, lacking)
            if self._closing.is_set():
                return None
            batch = pending[start : start + BUILD_BATCH]
            self._insert(graph, snapshot.rowids[batch], snapshot.vectors[batch])
        graph.expansion_search = self.expansion_search  # type: ignore[misc]  # has a setter
        return _Graph(graph, np.union1d(kept, snapshot.rowids[pending]))

    def _insert(self, graph: Index, keys: np.ndarray, vectors: np.ndarray) -> None:
        """Add to an unpublished graph; after a parallel add, re-insert (one thread) the
        nodes their own vector does not find (see the class docstring)."""
        graph.add(keys, vectors, threads=self.build_threads)
        if self.build_threads == 1:
            return
        lost = _unreachable(graph, keys, vectors, self.build_threads)
        for _ in range(REPAIR_ROUNDS):
            if not lost.any():
                return
            graph.remove(keys[lost])
            graph.add(keys[lost], vectors[lost], threads=1)
            keys, vectors = keys[lost], vectors[lost]
            lost = _unreachable(graph, keys, vectors, 1)
        if lost.any():  # e.g. more identical vectors than CHECK_K: a duplicate is found
            logger.debug("%d vectors not found by themselves after repair", int(lost.sum()))

    # -- reads ----------------------------------------------------------------------------

    def get(self, rowids: np.ndarray) -> np.ndarray:
        """Stored vectors for ``rowids``, in the given order; :class:`IndexUnavailable` if one
        is absent."""
        ids = np.asarray(rowids, dtype=np.int64).reshape(-1)
        snapshot = self._view.snapshot
        positions, present = snapshot.positions(ids)
        if not present.all():
            raise IndexUnavailable(f"no vector stored for row id {int(ids[~present][0])}")
        stored: npt.NDArray[np.float32] = snapshot.vectors[positions].copy()
        return stored

    def search(
        self,
        queries: np.ndarray,
        k: int,
        *,
        allow: np.ndarray | None = None,
        exact: bool = False,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` ``(rowids int64, scores float32)`` for one ``(d,)`` query, best first.

        ``allow`` is a boolean mask indexed by row id (None: every row). ``exact=True`` skips
        the graph so the result depends only on the stored rows (§7.7.1, module docstring).
        """
        query = np.asarray(queries)
        if query.ndim != 1:
            raise ValueError(f"expected one query vector of shape ({self.dimension},)")
        return self.search_batch(query[None, :], k, allow=allow, exact=exact)[0]

    def search_batch(
        self,
        queries: np.ndarray,
        k: int,
        *,
        allow: np.ndarray | None = None,
        exact: bool = False,
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """:meth:`search` for each row of an ``(m, d)`` matrix of queries (same ``allow``)."""
        matrix = self._as_matrix(queries)
        view = self._view
        snapshot = view.snapshot
        rows = len(snapshot.rowids)
        allowed = None if allow is None else _allowed(snapshot.rowids, np.asarray(allow, bool))
        allowed_rows = rows if allowed is None else int(allowed.sum())
        if k < 1 or allowed_rows == 0:
            return [self._empty() for _ in range(len(matrix))]
        fraction = allowed_rows / rows
        selective = allowed is not None and (
            fraction < SELECTIVE_FRACTION or allowed_rows < SELECTIVE_ROWS
        )
        graph = view.graph
        if exact or graph is None or rows <= self.exact_threshold or selective:
            return self._exact(snapshot, matrix, k, allowed)
        oversampled = k if allowed is None else math.ceil(k / fraction * OVERSAMPLE)
        oversampled *= I8_RESCORE if self.graph_dtype == "i8" else 1
        oversampled = min(max(oversampled, k) + view.stale, MAX_CANDIDATES, len(graph.rowids))
        tail_allowed = view.tail if allowed is None else view.tail[allowed[view.tail]]
        wanted = min(k, allowed_rows)
        results = []
        for query in matrix:
            found = self._from_graph(snapshot, graph, query, k, oversampled, allowed,
                                     tail_allowed)
            if len(found[0]) < wanted:
                found = self._exact(snapshot, query[None, :], k, allowed)[0]
            results.append(found)
        return results

    # -- persistence ----------------------------------------------------------------------

    def save(self, directory: Path, *, vectors: bool = True) -> None:
        """Write the index under ``directory`` atomically (``.npy`` arrays, usearch graph file);
        ``vectors=False`` leaves the vectors out (they are in the record: :meth:`load` then
        reads them from it).

        Data files carry a fresh generation tag and ``dense.json`` is replaced last to point
        at them, so a crash mid-save leaves the previous save readable. Writers are not held
        up: the published view is immutable.
        """
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        with self._save_lock:
            view = self._view
            generation = uuid.uuid4().hex
            names = {"rowids": f"rowids.{generation}.npy"}
            if vectors:
                names["vectors"] = f"vectors.{generation}.npy"
                _write_npy(directory / names["vectors"], view.snapshot.vectors)
            _write_npy(directory / names["rowids"], compact_ints(view.snapshot.rowids))
            if view.graph is not None:
                names["graph"] = f"graph.{generation}.usearch"
                names["graph_rowids"] = f"graph_rowids.{generation}.npy"
                view.graph.index.save(str(directory / names["graph"]))
                _fsync(directory / names["graph"])
                _write_npy(directory / names["graph_rowids"], compact_ints(view.graph.rowids))
            meta = {
                "format": _FORMAT,
                "dimension": self.dimension,
                "metric": self.metric,
                "exact_threshold": self.exact_threshold,
                "connectivity": self.connectivity,
                "expansion_add": self.expansion_add,
                "expansion_search": self.expansion_search,
                "graph_dtype": self.graph_dtype,
                "files": names,
                "checksums": {key: file_checksum(directory / name) for key, name in names.items()},
            }
            _atomic_write_text(directory / _META, json.dumps(meta, indent=1))
            _remove_stale(directory, keep=set(names.values()))

    @classmethod
    def load(cls, directory: Path, *, build_threads: int = 1,
             vectors: StoredVectors | None = None, graph_dtype: str = "f16") -> DenseIndex:
        """Read an index written by :meth:`save` (no pickle); a missing or lagging graph is
        built or extended in the background with ``build_threads`` (a property of the
        machine, not of the saved index). A save without vectors takes them from
        ``vectors`` (the record), dropping rows it no longer holds: they were collected
        since, and the write log the caller applies next removes them anyway. A save whose
        graph has another ``graph_dtype`` is refused (ValueError): the caller rebuilds."""
        directory = Path(directory)
        meta_path = directory / _META
        if not meta_path.is_file():
            raise IndexUnavailable(f"no dense index saved in {directory}")
        meta = json.loads(meta_path.read_text())
        if meta.get("format") != _FORMAT:
            raise ValueError(f"unsupported dense index format {meta.get('format')!r}")
        if meta.get("graph_dtype", "f16") != graph_dtype:
            raise ValueError(f"the saved dense graph is {meta.get('graph_dtype', 'f16')}, "
                             f"not {graph_dtype}")
        index = cls(
            meta["dimension"],
            exact_threshold=meta["exact_threshold"],
            metric=meta["metric"],
            connectivity=meta["connectivity"],
            expansion_add=meta["expansion_add"],
            expansion_search=meta["expansion_search"],
            build_threads=build_threads,
            graph_dtype=graph_dtype,
        )
        files = meta["files"]
        checksums = meta.get("checksums", {})
        for key, name in files.items():
            verify_file(directory / name, checksums.get(key))
        # Mapped, not read: a saved file is never rewritten (each save writes a new
        # generation), and a mapping outlives the unlink of a later save. Nothing writes into
        # the buffer either: it has no spare rows, so the first add, remove or merge
        # publishes fresh buffers first (_append, _publish).
        rowids = np.load(directory / files["rowids"], allow_pickle=False).astype(np.int64)
        if np.any(np.diff(rowids) <= 0):
            raise ValueError("the saved dense row ids are not ascending")
        if "vectors" in files:
            matrix = np.load(directory / files["vectors"], allow_pickle=False, mmap_mode="r")
        elif vectors is None:
            raise IndexUnavailable(f"the dense index in {directory} was saved without vectors")
        else:
            rowids, stored = vectors(rowids)
            matrix = index._as_matrix(stored) if len(rowids) else index._buffer
        if matrix.shape != (len(rowids), index.dimension):
            raise ValueError("the saved dense vectors and row ids do not match")
        index._buffer = matrix if matrix.dtype == np.float32 else matrix.astype(np.float32)
        index._buffer_rowids = rowids
        snapshot = _Snapshot(index._buffer, rowids)
        graph = None
        if "graph" in files:
            graph_index = index._new_graph()
            graph_index.load(str(directory / files["graph"]))
            graph_rowids = np.load(directory / files["graph_rowids"], allow_pickle=False)
            graph = _Graph(graph_index, graph_rowids.astype(np.int64))
        with index._write_lock:
            index._view = _view_of(snapshot, graph)
            index._schedule_build()
        return index

    # -- internals ------------------------------------------------------------------------

    def _as_matrix(self, vectors: np.ndarray) -> np.ndarray:
        """A C-contiguous float32 ``(n, d)`` copy, unit-normalised for the cosine metric."""
        matrix = np.array(vectors, dtype=np.float32, ndmin=2, order="C")
        if matrix.ndim != 2 or matrix.shape[1] != self.dimension:
            raise ValueError(
                f"vector dimension {matrix.shape[-1]} does not match the index dimension "
                f"{self.dimension}"
            )
        if not np.isfinite(matrix).all():
            raise ValueError("vectors must contain only finite numbers")
        if self.metric == "cosine":
            norms = np.linalg.norm(matrix, axis=1, keepdims=True)
            np.divide(matrix, norms, out=matrix, where=norms > 0)
        return matrix

    def _empty(self) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)

    def _publish(self, vectors: np.ndarray, rowids: np.ndarray, *, spare: int) -> _Snapshot:
        """Fresh buffers holding ``vectors``/``rowids`` plus ``spare`` free rows."""
        size = len(rowids)
        self._buffer = np.zeros((size + spare, self.dimension), dtype=np.float32)
        self._buffer_rowids = np.zeros(size + spare, dtype=np.int64)
        self._buffer[:size] = vectors
        self._buffer_rowids[:size] = rowids
        return _Snapshot(self._buffer[:size], self._buffer_rowids[:size])

    def _append(self, current: _Snapshot, rowids: np.ndarray, vectors: np.ndarray) -> _Snapshot:
        """Write past the published end (invisible to readers); grow ×1.5 when full."""
        start = len(current.rowids)
        end = start + len(rowids)
        if end > len(self._buffer_rowids):
            growth = len(rowids) + max(end // 2, 1024)
            current = self._publish(current.vectors, current.rowids, spare=growth)
        self._buffer[start:end] = vectors
        self._buffer_rowids[start:end] = rowids
        return _Snapshot(self._buffer[:end], self._buffer_rowids[:end])

    def _merge(self, current: _Snapshot, rowids: np.ndarray, vectors: np.ndarray) -> _Snapshot:
        """Insert out-of-order row ids, keeping rows sorted by id (rare; O(n))."""
        all_ids = np.concatenate([current.rowids, rowids])
        order = np.argsort(all_ids, kind="stable")
        merged = np.concatenate([current.vectors, vectors])[order]
        return self._publish(merged, all_ids[order], spare=len(all_ids) // 2)

    def _new_graph(self) -> Index:
        index_class = _load_usearch()
        return index_class(
            ndim=self.dimension,
            metric="cos" if self.metric == "cosine" else "ip",
            dtype=self.graph_dtype,
            connectivity=self.connectivity,
            expansion_add=self.expansion_add,
            expansion_search=self.expansion_search,
        )

    def _exact(
        self, snapshot: _Snapshot, queries: np.ndarray, k: int, allowed: np.ndarray | None
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Exact top-k: one BLAS product per query block, over all rows or the allowed ones."""
        vectors, rowids = snapshot.vectors, snapshot.rowids
        disallowed: np.ndarray | None = None
        keep = k
        if allowed is not None and allowed.sum() * GATHER_BELOW < len(rowids):
            vectors, rowids = vectors[allowed], rowids[allowed]
        elif allowed is not None:
            # Score every row and give disallowed rows -inf: allowed scores are finite, so
            # the top min(k, allowed) never include a disallowed row.
            disallowed, keep = ~allowed, min(k, int(allowed.sum()))
        if len(queries) == 1:  # matrix-vector product: BLAS gemv, no transposed copy
            blocks = [(vectors @ queries[0])[None, :]]
        else:
            blocks = [queries[start : start + _QUERY_CHUNK] @ vectors.T
                      for start in range(0, len(queries), _QUERY_CHUNK)]
        results: list[tuple[np.ndarray, np.ndarray]] = []
        for scores in blocks:
            if disallowed is not None:
                np.copyto(scores, -np.inf, where=disallowed)
            results.extend(_top_k(row, rowids, keep) for row in scores)
        return results

    def _from_graph(
        self,
        snapshot: _Snapshot,
        graph: _Graph,
        query: np.ndarray,
        k: int,
        candidates: int,
        allowed: np.ndarray | None,
        tail: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Graph candidates still stored and allowed, plus the allowed ``tail`` positions,
        all re-scored exactly. The two sets are disjoint: the tail is what the graph lacks."""
        keys = np.asarray(graph.index.search(query, candidates).keys, dtype=np.int64)
        positions, present = snapshot.positions(keys)
        positions = positions[present]
        if allowed is not None:
            positions = positions[allowed[positions]]
        scores = np.concatenate([snapshot.vectors[positions] @ query,
                                 _tail_scores(snapshot.vectors, tail, query)])
        return _top_k(scores, snapshot.rowids[np.concatenate([positions, tail])], k)


def _unreachable(graph: Index, keys: np.ndarray, vectors: np.ndarray, threads: int
                 ) -> np.ndarray:
    """Mask of ``keys`` whose own vector does not find them in ``graph`` even with the widest
    of ``CHECK_EXPANSIONS`` (each wider search only for those the narrower one missed; the
    caller restores the graph's ef afterwards)."""
    lost = np.ones(len(keys), dtype=bool)
    for expansion in CHECK_EXPANSIONS:
        suspects = np.flatnonzero(lost)
        if len(suspects) == 0:
            break
        graph.expansion_search = expansion  # type: ignore[misc]  # has a setter
        found = np.asarray(graph.search(vectors[suspects], CHECK_K, threads=threads).keys)
        found = found.reshape(len(suspects), -1)
        lost[suspects] = ~(found == keys[suspects, None]).any(axis=1)
    return lost


def _tail_scores(vectors: np.ndarray, tail: np.ndarray, query: np.ndarray) -> np.ndarray:
    """``vectors[tail] @ query`` for sorted positions. Rows appended after a build sit at the
    end of the buffer, so the tail is usually (nearly) one contiguous span: scoring the span
    in place avoids copying the rows out, which for a long tail (a bulk load outrunning the
    build) would cost more than an exact search over every row."""
    if len(tail) == 0:
        return np.zeros(0, dtype=np.float32)
    first, span = int(tail[0]), int(tail[-1]) - int(tail[0]) + 1
    scores: npt.NDArray[np.float32]
    if span > GATHER_BELOW * len(tail):
        scores = vectors[tail] @ query
    else:
        scores = (vectors[first:first + span] @ query)[tail - first]
    return scores


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
    for pattern in ("vectors.*.npy", "rowids.*.npy", "graph.*.usearch", "graph_rowids.*.npy"):
        for path in directory.glob(pattern):
            if path.name not in kept:
                path.unlink(missing_ok=True)
