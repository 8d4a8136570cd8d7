"""Dense vector index for dense recall (§3.1, §7.7): exact numpy search, HNSW beyond a size.

Vectors are keyed by the store's integer row ids (non-negative int64, never reused). Up to
``exact_threshold`` rows every search is exact: an int8 first pass over the rows
(:mod:`~rcpkit.engine.indexes.quantised`, from ``CODE_MIN_ROWS`` rows on) proves which rows
cannot reach the top k, and the others are scored from the float32 matrix. Beyond it a
usearch HNSW graph (cosine, f16, bf16 or int8) proposes candidates that are re-scored exactly the
same way, so reported scores are always exact cosines and ties always go to the smaller row
id. Every exact score comes from one kernel (:func:`_scores`), so a row scores the same
whichever path found it.

**Graph builds never block.** A build takes minutes at 100k rows, so it runs on a background
thread over an immutable snapshot; exact search serves until the graph is published. Rows
added after a build (the *tail*) are searched exactly and merged with the graph's candidates;
once the tail (plus removed rows the graph still holds) outgrows ``max(TAIL_MIN_ROWS,
TAIL_FRACTION × rows)`` the thread extends a copy of the graph and publishes it. Published
graphs are never mutated, so searches and :meth:`DenseIndex.save` need no lock on them, and a
saved graph is reloaded on start instead of rebuilt. The saved graph file holds the links
only: usearch's copy of each vector (f16 or i8 codes) is recomputed from the index's own
vectors on load, which the record holds anyway (:meth:`DenseIndex._write_graph`).

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

import atexit
import functools
import importlib.util
import json
import logging
import math
import os
import sys
import threading
import uuid
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import numpy.typing as npt

from rcpkit.engine.config import GRAPH_DTYPES, write_text_atomically
from rcpkit.engine.errors import IndexUnavailable
from rcpkit.engine.indexes import quantised
from rcpkit.engine.indexes.persist import bytes_checksum, compact_ints, file_checksum, verify_file

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
RESCORE = {"f16": 1, "bf16": 2, "i8": 4}
"""Candidates a graph proposes per result wanted, all re-scored exactly from the float32
matrix: a ``bf16`` graph (8 bits of mantissa) or an ``i8`` one (int8 scalar quantisation)
ranks less exactly than an ``f16`` one (``benchmarks/bench_storage.py --graph``)."""
EXPANSION_SEARCH = 128
"""Default HNSW ef_search. On MiniLM vectors of real text (the peer corpus, 100k chunks)
recall@10 is 0.997 at 128 against 0.999 at 256, for about 0.6 of the graph search time. On
synthetic clustered vectors (near-equidistant points, a worst case) 128 gave 0.972–0.982
and 256 0.993–0.994 at 200k: such data wants ``EngineConfig.dense_expansion_search`` raised
(``benchmarks/bench_dense.py``, docs/benchmarks.md "HNSW search width")."""
SEARCH_WIDTH = 3
"""A graph query asks usearch for at least this many candidates per result wanted. usearch
searches with ef = max(``expansion_search``, candidates asked), so a large ``k`` (hybrid's
100 dense candidates) widens the search instead of taking ef 128's recall (on the peer
corpus at 100k: recall@100 0.976 asking 100, 0.996 asking 300; recall@10 0.997 either way,
``benchmarks/bench_dense.py --search-width``)."""
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
ORDERED_BUILD_ROWS = 200_000
SKELETON_FRACTION = 0.1
PIVOTS = 1_024
"""A fresh graph of at least ``ORDERED_BUILD_ROWS`` rows is built in a cache-friendly order
(:func:`_insertion_order`): a random ``SKELETON_FRACTION`` of the rows first, then the rest
grouped by the nearest of ``PIVOTS`` skeleton rows. Each insertion then searches the
neighbourhood the previous one left in cache. usearch built 200k clustered vectors in
35–36 s instead of 61–65 s, and 100k MiniLM vectors of real text in 22 s instead of 32–35 s,
for recall@10 at ef 128 of 0.956 against 0.973–0.978 and 0.992 against 0.996–0.998
(``benchmarks/bench_dense.py --build-order``). So the order is kept for builds large enough
to take minutes: the engine's 1M clustered build settled in 342 s instead of 811 s."""
CHECK_EXPANSIONS = (4, 32, 256)
CHECK_K = 4
"""The search check (used when the graph's layout cannot be read, and by the build bench)
searches each new vector for itself (k ``CHECK_K``), widening the search (ef) for those not
found yet: a greedy search finds most nodes, and one that only a wide search finds is
reachable and needs no repair. Only the nodes the widest search misses count as lost: on
clustered vectors, where many reachable nodes are hard to find, re-inserting every miss of
an ef 32 search (5.7 % of the rows inserted near 200k) slowed the build more and more as
the graph grew (``benchmarks/bench_dense.py --build``)."""
REPAIR_ROUNDS = 3
_FORMAT = 2
_LEAN_FORMAT = 3
"""A save whose graph file leaves out the vectors (:meth:`DenseIndex._write_graph`): older
readers refuse it (the engine then rebuilds) instead of handing usearch a file it cannot read."""
_META = "dense.json"
_MATRIX_HEAD = 8
_DENSE_HEAD = 64
_GRAPH_HEAD = 40
_FREE_KEY = np.iinfo(np.uint64).max
_CODE_ROWS = 4_096
"""Rows converted to graph codes at a time when a save or load compares or rebuilds them."""
_LINK_ROWS = 65_536
"""Nodes whose neighbour lists are read at a time by :func:`_links` (~70 MB of index)."""
CODE_MIN_ROWS = 4_096
"""Below this many rows an exact search scores every row (a float32 scan of 4k × 384 costs
about what the int8 first pass's fixed work does)."""
CODE_TAIL_MIN = 4_096
CODE_TAIL_FRACTION = 0.1
"""Rows appended after the int8 codes were made are scored exactly next to them; the codes
are made again once those exceed ``max(CODE_TAIL_MIN, CODE_TAIL_FRACTION × rows)``, which
keeps their cost per appended row constant."""
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
    codes: quantised.Int8Codes | None = None
    """int8 codes of the first ``codes.rows`` rows, for exact search's first pass."""

    def positions(self, rowids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Positions of ``rowids`` here, and a mask of which of them are present."""
        return _member(self.rowids, rowids)

    def present_positions(self, rowids: np.ndarray) -> np.ndarray | None:
        """Positions of ``rowids`` here when every one is present, else None. Gapless row
        ids (no row removed since the last compaction: the usual case) are offsets from
        the first, found without a search."""
        stored = self.rowids
        if len(stored) and len(rowids):
            first, last = int(stored[0]), int(stored[-1])
            if last - first + 1 == len(stored):
                low, high = int(rowids.min()), int(rowids.max())
                return rowids - first if first <= low and high <= last else None
        positions, present = _member(stored, rowids)
        return positions if present.all() else None


@dataclass(frozen=True, slots=True)
class _Graph:
    """A published HNSW graph (never mutated once published) and its sorted row ids."""

    index: Index
    rowids: np.ndarray
    orphans: int = 0
    """Rows this graph's build left out because no link led to them even after the repair
    (:meth:`DenseIndex._repair`): they are in the tail, scored exactly with every query."""


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


_BUILDING: weakref.WeakSet[DenseIndex] = weakref.WeakSet()
"""Indexes that started a background builder (while they are alive)."""


@atexit.register
def _stop_builders() -> None:
    """Stop every background build (at its next batch) before the interpreter exits.

    The builder is a daemon thread, so a program that never closes its engine can still
    exit; but one caught inside usearch's native insertion while the process tears down
    aborts it ("terminate called without an active exception", exit status 134)."""
    for index in list(_BUILDING):
        index.close()


def _lacking(view: _View) -> int:
    """Rows the graph should take in: the tail, less its build's orphans (another build
    would only leave them out again; never below 0, since orphans can be removed since)."""
    return max(0, len(view.tail) - (view.graph.orphans if view.graph is not None else 0))


def _view_of(snapshot: _Snapshot, graph: _Graph | None) -> _View:
    """Pair rows with a graph, working out the tail and the stale count (O(n log n))."""
    if graph is None:
        return _View(snapshot, None, _NO_ROWS, 0)
    in_graph = _member(graph.rowids, snapshot.rowids)[1]
    tail = np.flatnonzero(~in_graph)
    return _View(snapshot, graph, tail, len(graph.rowids) - (len(snapshot.rowids) - len(tail)))


def _allowed(rowids: np.ndarray, allow: np.ndarray) -> np.ndarray:
    """``allow[rowid]`` for each row id; row ids past the end of the mask are not allowed.
    Sorted row ids with no gap between them (no row removed since the last compaction: the
    usual case) are a slice of the mask, read without a copy."""
    if len(rowids):
        first, last = int(rowids[0]), int(rowids[-1])
        if last - first + 1 == len(rowids) and last < len(allow):
            return allow[first:last + 1]
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
    and ef_search (see ``EXPANSION_SEARCH``; a query for many results searches wider,
    ``SEARCH_WIDTH``). ef_construction 64 instead of 128 reached only 0.972 even at ef_search
    384 on 200k clustered vectors (``benchmarks/bench_dense.py --build``, docs/benchmarks.md).
    ``build_threads`` > 1 insert in parallel on the background thread (default 1: on a
    loaded 2-core host two threads plus the self-check below settled 50k clustered vectors in
    1.5x the time of one, ``benchmarks/bench_dense.py --build``; with idle cores to spare
    they pay). Parallel HNSW insertion can leave a node unreachable: two close vectors inserted
    at once do not see each other, and when a shared neighbour's full list is pruned by the
    diversity heuristic it keeps only one of them, "covered" by the other, which has no link
    to it (usearch 2.26: a few of 3000 clustered vectors not found by their own vector with
    two threads, none with one). So a graph built in parallel is checked before it is
    published: a walk over its links from the entry node (:func:`_unlinked`) finds the nodes
    no path leads to, which are removed and inserted again one at a time, when their
    neighbours are all linked (:meth:`_repair`); the few still unlinked after that leave
    the graph for the exactly scored tail, so no row is lost to search. One pass over the
    links costs a few seconds at 1M rows, where searching for every new vector cost about a
    quarter of the insertion time; if usearch serialises a layout this code does not know,
    every new vector searches for itself instead, widening the search for those a narrower
    one misses (``CHECK_EXPANSIONS``).
    """

    def __init__(
        self,
        dimension: int,
        *,
        exact_threshold: int = 50_000,
        metric: str = "cosine",
        connectivity: int = 16,
        expansion_add: int = 128,
        expansion_search: int = EXPANSION_SEARCH,
        build_threads: int = 1,
        graph_dtype: str = "f16",
        first_pass: bool = True,
    ) -> None:
        if dimension < 1:
            raise ValueError("dimension must be positive")
        if metric not in METRICS:
            raise ValueError(f"metric must be one of {METRICS}, not {metric!r}")
        if graph_dtype not in GRAPH_DTYPES:
            raise ValueError(f"graph_dtype must be one of {GRAPH_DTYPES}, not {graph_dtype!r}")
        if expansion_search < 1:
            raise ValueError(f"expansion_search must be at least 1, not {expansion_search}")
        self.dimension = dimension
        self.metric = metric
        self.exact_threshold = exact_threshold
        self.connectivity = connectivity
        self.expansion_add = expansion_add
        self.expansion_search = expansion_search
        self.build_threads = build_threads
        self.graph_dtype = graph_dtype
        self.first_pass = first_pass
        """Whether exact search keeps int8 codes for its first pass (off for vectors that
        are only read back by row id, never searched)."""
        self.saved_graph_unused = False
        """Set by :meth:`load` when the save held a graph of another ``graph_dtype``: saving
        again records the graph being built instead."""
        self._buffer = np.zeros((0, dimension), dtype=np.float32)
        self._buffer_rowids = np.zeros(0, dtype=np.int64)
        self._view = _view_of(_Snapshot(self._buffer, self._buffer_rowids), None)
        self._write_lock = threading.Lock()
        self._save_lock = threading.Lock()
        self._builder: threading.Thread | None = None
        self._closing = threading.Event()
        self._restored = threading.Event()
        """Clear while a loaded graph is being restored in the background (saves wait)."""
        self._restored.set()
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
        """Rows searched exactly next to the graph because it does not hold them: not yet,
        or (its build's orphans) because no link led to them."""
        return len(self._view.tail)

    @property
    def graph_pending(self) -> int:
        """Rows not in a published graph yet (0 while exact search needs none): what the
        background build has still to insert, counting down as it goes, so that a long
        first build shows progress."""
        view, plan = self._view, self._plan
        if len(view.snapshot.rowids) <= self.exact_threshold:
            return 0
        lacking = _lacking(view) if view.graph is not None else len(view.snapshot.rowids)
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
            snapshot = self._coded(self._publish(current.vectors[keep], current.rowids[keep],
                                                 spare=0))
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
        return _lacking(view) + view.stale >= max(TAIL_MIN_ROWS, TAIL_FRACTION * rows)

    def _schedule_build(self) -> None:
        """Start the builder thread if the graph is missing or behind (caller holds the lock)."""
        running = self._builder is not None and self._builder.is_alive()
        if running or self._closing.is_set() or not self._needs_build(self._view):
            return
        self._start_builder(self._build_loop)

    def _start_builder(self, work: Callable[[], None]) -> None:
        self._builder = threading.Thread(target=work, name="rcpkit-dense-graph", daemon=True)
        _BUILDING.add(self)
        self._builder.start()

    def _restore_then_build(self, saved: np.ndarray, lean: dict[str, int | str],
                            snapshot: _Snapshot, rowids: np.ndarray, orphans: int) -> None:
        """The builder thread of a load whose graph file left out the vectors: restore the
        saved graph (:meth:`_restored_graph`) and publish it — even when :meth:`close` was
        called meanwhile, so that a save at close keeps it — then build on as
        :meth:`_build_loop` does (from scratch if it could not be restored)."""
        try:
            graph = self._restored_graph(saved, lean, snapshot)
            if graph is not None:
                with self._write_lock:
                    self._view = _view_of(self._view.snapshot, _Graph(graph, rowids, orphans))
        except Exception:  # a damaged graph must not take the process down; exact serves
            logger.exception("the saved dense graph could not be restored; it is rebuilt")
        finally:
            self._restored.set()
        self._build_loop()

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
            if len(pending) >= ORDERED_BUILD_ROWS:
                pending = _insertion_order(snapshot.vectors, pending)
        else:
            graph = old.index.copy()
            present = _member(snapshot.rowids, old.rowids)[1]
            if not present.all():
                graph.remove(old.rowids[~present])
            kept, pending = old.rowids[present], view.tail
        lacking = _lacking(view) if old is not None else len(snapshot.rowids)
        for start in range(0, len(pending), BUILD_BATCH):
            self._plan = _BuildPlan(len(pending), start, lacking)
            if self._closing.is_set():
                return None
            batch = pending[start : start + BUILD_BATCH]
            graph.add(snapshot.rowids[batch], snapshot.vectors[batch],
                      threads=self.build_threads)
        orphans = self._repair(graph, snapshot, pending) if self.build_threads > 1 else _NO_ROWS
        graph.expansion_search = self.expansion_search  # type: ignore[misc]  # has a setter
        rowids = np.union1d(kept, snapshot.rowids[pending])
        if len(orphans):
            rowids = np.setdiff1d(rowids, snapshot.rowids[orphans], assume_unique=True)
        return _Graph(graph, rowids, len(orphans))

    def _repair(self, graph: Index, snapshot: _Snapshot, inserted: np.ndarray) -> np.ndarray:
        """Re-insert, one thread at a time, the nodes a parallel build left where no search
        reaches them (class docstring), until there are none or ``REPAIR_ROUNDS`` pass.

        A node re-inserted alone can be pruned from every neighbour's list again (as in a
        single-threaded graph of small connectivity: ~0.06 % of 1M clustered rows). Those
        are removed from the graph and their positions returned: the caller leaves them in
        the tail, so that every row is still found by its own vector."""
        lost = _lost(graph, snapshot, inserted, self.build_threads)
        for _ in range(REPAIR_ROUNDS):
            if len(lost) == 0:
                break
            keys = snapshot.rowids[lost]
            graph.remove(keys)
            graph.add(keys, snapshot.vectors[lost], threads=1)
            lost = _lost(graph, snapshot, lost, 1)
        if len(lost):
            logger.debug("%d dense graph nodes no link leads to after repair; they are "
                         "searched exactly", len(lost))
            graph.remove(snapshot.rowids[lost])
        return lost

    # -- reads ----------------------------------------------------------------------------

    def get(self, rowids: np.ndarray) -> np.ndarray:
        """Stored vectors for ``rowids``, in the given order; :class:`IndexUnavailable` if one
        is absent."""
        ids = np.asarray(rowids, dtype=np.int64).reshape(-1)
        snapshot = self._view.snapshot
        positions = snapshot.present_positions(ids)
        if positions is None:
            present = snapshot.positions(ids)[1]
            raise IndexUnavailable(f"no vector stored for row id {int(ids[~present][0])}")
        stored: npt.NDArray[np.float32] = snapshot.vectors[positions]  # a copy: fancy index
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
        width: float = max(SEARCH_WIDTH, RESCORE[self.graph_dtype]) * k
        if allowed is not None:
            # Only ``fraction`` of what a graph search visits passes the filter afterwards,
            # so it looks 1/fraction times as wide as an unfiltered one would.
            width = max(width * OVERSAMPLE, self.expansion_search) / fraction
        oversampled = min(math.ceil(width) + view.stale, MAX_CANDIDATES, len(graph.rowids))
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
        """Write the index under ``directory`` atomically (``.npy`` arrays, the graph's links);
        ``vectors=False`` leaves the vectors out (they are in the record: :meth:`load` then
        reads them from it).

        Data files carry a fresh generation tag and ``dense.json`` is replaced last to point
        at them, so a crash mid-save leaves the previous save readable. Writers are not held
        up: the published view is immutable.
        """
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self._restored.wait()
        with self._save_lock:
            view = self._view
            generation = uuid.uuid4().hex
            names = {"rowids": f"rowids.{generation}.npy"}
            if vectors:
                names["vectors"] = f"vectors.{generation}.npy"
                _write_npy(directory / names["vectors"], view.snapshot.vectors)
            _write_npy(directory / names["rowids"], compact_ints(view.snapshot.rowids))
            lean: dict[str, object] | None = None
            if view.graph is not None:
                names["graph"] = f"graph.{generation}.usearch"
                names["graph_rowids"] = f"graph_rowids.{generation}.npy"
                lean = self._write_graph(directory / names["graph"], view.graph, view.snapshot)
                _write_npy(directory / names["graph_rowids"], compact_ints(view.graph.rowids))
            meta = {
                "format": _FORMAT if lean is None else _LEAN_FORMAT,
                "dimension": self.dimension,
                "metric": self.metric,
                "exact_threshold": self.exact_threshold,
                "connectivity": self.connectivity,
                "expansion_add": self.expansion_add,
                "expansion_search": self.expansion_search,  # earlier versions' load reads it
                "graph_dtype": self.graph_dtype,
                "files": names,
                "checksums": {key: file_checksum(directory / name) for key, name in names.items()},
            }
            if lean is not None:
                meta["graph_vectors"] = lean
            if view.graph is not None and view.graph.orphans:
                meta["graph_orphans"] = view.graph.orphans
            write_text_atomically(directory / _META, json.dumps(meta, indent=1))
            _remove_stale(directory, keep=set(names.values()))

    @classmethod
    def load(cls, directory: Path, *, build_threads: int = 1,
             vectors: StoredVectors | None = None, graph_dtype: str = "f16",
             expansion_search: int = EXPANSION_SEARCH, first_pass: bool = True) -> DenseIndex:
        """Read an index written by :meth:`save` (no pickle); a missing or lagging graph is
        built or extended in the background with ``build_threads`` (a property of the
        machine, not of the saved index), and searched with ``expansion_search`` (one of the
        queries, whatever the saved index used). A save without vectors takes them from
        ``vectors`` (the record), dropping rows it no longer holds: they were collected
        since, and the write log the caller applies next removes them anyway. A saved graph of
        another ``graph_dtype`` is left unread: a graph of this one is built in the background
        while exact search serves, and the rows need no rebuild."""
        directory = Path(directory)
        meta_path = directory / _META
        if not meta_path.is_file():
            raise IndexUnavailable(f"no dense index saved in {directory}")
        meta = json.loads(meta_path.read_text())
        if meta.get("format") not in (_FORMAT, _LEAN_FORMAT):
            raise ValueError(f"unsupported dense index format {meta.get('format')!r}")
        saved_dtype = meta.get("graph_dtype", "f16")
        keep_graph = saved_dtype == graph_dtype
        if not keep_graph and "graph" in meta["files"]:
            logger.info("the saved dense graph is %s, not %s: a new graph is built in the "
                        "background (exact search serves meanwhile)", saved_dtype, graph_dtype)
        index = cls(
            meta["dimension"],
            exact_threshold=meta["exact_threshold"],
            metric=meta["metric"],
            connectivity=meta["connectivity"],
            expansion_add=meta["expansion_add"],
            expansion_search=expansion_search,
            build_threads=build_threads,
            graph_dtype=graph_dtype,
            first_pass=first_pass,
        )
        index.saved_graph_unused = not keep_graph and "graph" in meta["files"]
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
        snapshot = index._coded(_Snapshot(index._buffer, rowids))
        graph = None
        restore: Callable[[], None] | None = None
        if "graph" in files and keep_graph:
            graph_rowids = np.load(directory / files["graph_rowids"],
                                   allow_pickle=False).astype(np.int64)
            lean = meta.get("graph_vectors")
            orphans = int(meta.get("graph_orphans", 0))
            if lean is None:
                graph_index = index._new_graph()
                graph_index.load(str(directory / files["graph"]))
                graph = _Graph(graph_index, graph_rowids, orphans)
            else:
                # Read now (a later save deletes the file); the vectors are rebuilt in the
                # background while exact search serves.
                saved = np.fromfile(directory / files["graph"], dtype=np.uint8)
                restore = functools.partial(index._restore_then_build, saved, lean, snapshot,
                                            graph_rowids, orphans)
        with index._write_lock:
            index._view = _view_of(snapshot, graph)
            if restore is None:
                index._schedule_build()
            else:
                index._restored.clear()
                index._start_builder(restore)
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
            # np.linalg.norm's arithmetic for real rows, without its argument handling, which
            # costs more than the sum itself for the one query of a search.
            norms = np.sqrt(np.add.reduce(matrix * matrix, axis=1, keepdims=True))
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
            self._publish(current.vectors, current.rowids, spare=growth)
        self._buffer[start:end] = vectors
        self._buffer_rowids[start:end] = rowids
        # The rows already coded keep their positions: their codes still hold.
        return self._coded(_Snapshot(self._buffer[:end], self._buffer_rowids[:end],
                                     current.codes))

    def _merge(self, current: _Snapshot, rowids: np.ndarray, vectors: np.ndarray) -> _Snapshot:
        """Insert out-of-order row ids, keeping rows sorted by id (rare; O(n))."""
        all_ids = np.concatenate([current.rowids, rowids])
        order = np.argsort(all_ids, kind="stable")
        merged = np.concatenate([current.vectors, vectors])[order]
        return self._coded(self._publish(merged, all_ids[order], spare=len(all_ids) // 2))

    def _coded(self, snapshot: _Snapshot) -> _Snapshot:
        """``snapshot`` with int8 codes for exact search's first pass: none below
        ``CODE_MIN_ROWS`` rows (or without ``first_pass``), made again when the rows appended
        since outgrow ``max(CODE_TAIL_MIN, CODE_TAIL_FRACTION × rows)``, else those it has."""
        rows, codes = len(snapshot.rowids), snapshot.codes
        if rows < CODE_MIN_ROWS or not self.first_pass:
            return _Snapshot(snapshot.vectors, snapshot.rowids) if codes is not None else snapshot
        if codes is not None and rows - codes.rows <= max(CODE_TAIL_MIN,
                                                          CODE_TAIL_FRACTION * rows):
            return snapshot
        return _Snapshot(snapshot.vectors, snapshot.rowids, quantised.encode(snapshot.vectors))

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

    def _write_graph(self, path: Path, graph: _Graph, snapshot: _Snapshot
                     ) -> dict[str, object] | None:
        """Write ``graph`` to ``path``, leaving out the vectors ``snapshot`` can rebuild.

        usearch keeps its own copy of every vector (as f16 or i8 codes), duplicating the
        rows the record and ``snapshot`` hold. Each slot's codes are recomputed from
        ``snapshot`` and compared byte for byte with usearch's; slots that match are left
        out, the others (removed rows, or a conversion this code does not reproduce) are
        kept verbatim. Returns what :meth:`_restored_graph` needs, or None when the whole file
        was kept as usearch saved it (its layout not recognised, or too few matches).

        usearch writes the whole file first, read back mapped: a serialisation in memory
        would add its size (~0.9 GB at 1M f16 rows) to the process while the save runs."""
        whole = path.with_name(f"{path.stem}.whole{path.suffix}")
        graph.index.save(str(whole))
        try:
            lean = self._write_lean(path, np.memmap(whole, dtype=np.uint8, mode="r"), snapshot)
            if lean is None:
                os.replace(whole, path)
                _fsync(path)
            return lean
        finally:
            whole.unlink(missing_ok=True)

    def _write_lean(self, path: Path, serialised: np.ndarray, snapshot: _Snapshot
                    ) -> dict[str, object] | None:
        """Write ``serialised`` to ``path`` without the codes ``snapshot`` reproduces (see
        :meth:`_write_graph`); None, writing nothing, when that would not pay."""
        layout = _graph_layout(serialised)
        if layout is None:
            return None
        block, keys = layout.block, layout.keys
        positions, present = snapshot.positions(keys.astype(np.int64))
        present &= keys != _FREE_KEY
        matches = present.copy()
        for start in range(0, len(keys), _CODE_ROWS):
            slots = np.flatnonzero(present[start:start + _CODE_ROWS]) + start
            codes = _graph_codes(snapshot.vectors[positions[slots]], self.graph_dtype)
            matches[slots] = (codes == block[slots]).all(axis=1)
        kept = np.flatnonzero(~matches)
        if 2 * len(kept) > len(keys):
            return None
        _write_pieces(path, [serialised[:_MATRIX_HEAD], kept.astype("<u4"), block[kept],
                             layout.index_part])
        return {"rows": len(keys), "bytes_per_vector": block.shape[1], "kept": len(kept),
                "checksum": bytes_checksum(block)}

    def _restored_graph(self, data: np.ndarray, lean: dict[str, int | str],
                        snapshot: _Snapshot) -> Index | None:
        """The graph :meth:`_write_graph` wrote as ``data``, its left-out vectors rebuilt
        from ``snapshot``; None (a new graph is built) when ``snapshot`` lacks a row the
        graph needs or the rebuilt vectors are not the saved ones."""
        rows, width = int(lean["rows"]), int(lean["bytes_per_vector"])
        kept_rows = int(lean["kept"])
        kept_end = _MATRIX_HEAD + kept_rows * 4
        block_end = _MATRIX_HEAD + rows * width
        index_part = data[kept_end + kept_rows * width:]
        serialised = np.empty(block_end + len(index_part), dtype=np.uint8)
        serialised[:_MATRIX_HEAD] = data[:_MATRIX_HEAD]
        serialised[block_end:] = index_part
        layout = _graph_layout(serialised)
        if layout is None or layout.block.shape != (rows, width):
            raise ValueError("the saved dense graph does not have the layout it was saved with")
        block, keys = layout.block, layout.keys
        kept = data[_MATRIX_HEAD:kept_end].view("<u4").astype(np.int64)
        rebuilt = np.ones(rows, dtype=bool)
        rebuilt[kept] = False
        slots = np.flatnonzero(rebuilt)
        positions, present = snapshot.positions(keys[slots].astype(np.int64))
        if not present.all():
            logger.warning("the record lacks %d rows of the saved dense graph; it is rebuilt",
                           int((~present).sum()))
            return None
        for start in range(0, len(slots), _CODE_ROWS):
            chunk = slice(start, start + _CODE_ROWS)
            block[slots[chunk]] = _graph_codes(snapshot.vectors[positions[chunk]],
                                               self.graph_dtype)
        block[kept] = data[kept_end:kept_end + kept_rows * width].reshape(kept_rows, width)
        if bytes_checksum(block, str(lean["checksum"]).partition(":")[0]) != lean["checksum"]:
            logger.warning("the dense graph's vectors rebuilt from the record differ from the "
                           "saved ones; it is rebuilt")
            return None
        graph = self._new_graph()
        graph.load(serialised.data)
        return graph

    def _exact(
        self, snapshot: _Snapshot, queries: np.ndarray, k: int, allowed: np.ndarray | None
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Exact top-k over all rows or the allowed ones: the allowed rows copied out when a
        filter leaves few, else the int8 first pass's candidates plus the rows appended since
        the codes were made (every row when there are no codes), scored by :func:`_scores`."""
        vectors, rowids = snapshot.vectors, snapshot.rowids
        allowed_rows = len(rowids) if allowed is None else int(allowed.sum())
        keep = min(k, allowed_rows)
        codes = snapshot.codes
        if codes is None or (allowed is not None and allowed_rows * GATHER_BELOW < len(rowids)):
            every: np.ndarray | slice = slice(None) if allowed is None else np.flatnonzero(allowed)
            return [_top_k(_scores(vectors, every, query), rowids[every], keep)
                    for query in queries]
        coded_allowed = None if allowed is None else allowed[:codes.rows]
        rest = np.arange(codes.rows, len(rowids))
        if allowed is not None:
            rest = rest[allowed[codes.rows:]]
        results = []
        for query in queries:
            found = np.concatenate([quantised.candidates(codes, query, keep, coded_allowed),
                                    rest])
            results.append(_top_k(_scores(vectors, found, query), rowids[found], keep))
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
        scores = np.concatenate([_scores(snapshot.vectors, positions, query),
                                 _scores(snapshot.vectors, tail, query)])
        return _top_k(scores, snapshot.rowids[np.concatenate([positions, tail])], k)


def _insertion_order(vectors: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """``positions`` in the order a fresh bulk build inserts them (``ORDERED_BUILD_ROWS``):
    a random skeleton first, which gives the graph its long-range links, then the rest
    grouped by nearest pivot (the first ``PIVOTS`` skeleton rows), so that consecutive
    insertions walk the same part of the graph. Seeded by the row count: the same rows are
    always built in the same order."""
    shuffled = np.random.default_rng(len(positions)).permutation(positions)
    skeleton = max(PIVOTS, int(SKELETON_FRACTION * len(shuffled)))
    head, rest = shuffled[:skeleton], shuffled[skeleton:]
    pivots = np.ascontiguousarray(vectors[head[:PIVOTS]].T)
    nearest = np.empty(len(rest), dtype=np.intp)
    for start in range(0, len(rest), _CODE_ROWS):
        block = rest[start:start + _CODE_ROWS]
        nearest[start:start + len(block)] = np.argmax(vectors[block] @ pivots, axis=1)
    ordered: np.ndarray = np.concatenate([head, rest[np.argsort(nearest, kind="stable")]])
    return ordered


def _lost(graph: Index, snapshot: _Snapshot, inserted: np.ndarray, threads: int
          ) -> np.ndarray:
    """Positions in ``snapshot`` of the graph's nodes no search can reach: by a walk over
    its links (:func:`_unlinked`, one pass over the whole graph), or, when this usearch
    serialises a layout :func:`_graph_layout` does not know, by each ``inserted`` position's
    vector searching for itself (:func:`_unreachable`, a search per row)."""
    saved = graph.save()  # the buffer, with no path given
    assert saved is not None
    serialised = np.frombuffer(saved, dtype=np.uint8)
    layout = _graph_layout(serialised)
    if layout is not None:
        positions, present = snapshot.positions(
            layout.keys[_unlinked(serialised, layout)].astype(np.int64))
        found: np.ndarray = positions[present]
        return found
    lost = [chunk[_unreachable(graph, snapshot.rowids[chunk], snapshot.vectors[chunk], threads)]
            for chunk in np.array_split(inserted, max(1, len(inserted) // BUILD_BATCH))]
    return np.concatenate([_NO_ROWS, *lost])


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


def _scores(vectors: np.ndarray, positions: np.ndarray | slice, query: np.ndarray
            ) -> np.ndarray:
    """Exact scores of ``vectors[positions]`` against ``query``, in the order given.

    ``np.vecdot`` takes each row's dot product on its own, so a row's score does not depend on
    which rows are scored with it; BLAS gemv's does (OpenBLAS takes rows in blocks and the
    leftover ones another way, which moves the last bit), and then equal vectors found by
    different paths could fail to tie (§16.3). Positions that fill most of their span (a
    tail appended at the end, a broad filter) are scored in place, not copied out first."""
    scores: npt.NDArray[np.float32]
    if isinstance(positions, slice):
        scores = np.vecdot(vectors[positions], query)
        return scores
    if len(positions) == 0:
        return np.zeros(0, dtype=np.float32)
    first = int(positions.min())
    span = int(positions.max()) - first + 1
    if span > GATHER_BELOW * len(positions):
        scores = np.vecdot(vectors[positions], query)
    else:
        scores = np.vecdot(vectors[first:first + span], query)[positions - first]
    return scores


class _Layout(NamedTuple):
    """Where things are in a usearch 2 serialisation (:func:`_graph_layout`)."""

    block: np.ndarray
    """``(rows, bytes per vector)``: every slot's vector."""
    index_part: np.ndarray
    """The bytes after the vectors (the index proper)."""
    keys: np.ndarray
    """Each slot's key (``_FREE_KEY`` for a removed one)."""
    starts: np.ndarray
    """Each node's offset in the serialisation."""
    levels: np.ndarray
    connectivity: int
    base: int
    """Neighbours a node may have on level 0 (``connectivity`` on the others)."""
    entry: int
    """The slot every search starts from."""


def _graph_layout(serialised: np.ndarray) -> _Layout | None:
    """Parse a usearch 2 dense index serialisation (``Index.save()`` to a buffer): the
    ``(rows, bytes per vector)`` matrix of every slot's vector, then the index (a 64-byte
    head, then the graph: a 40-byte header of five u64 — size, connectivity, base
    connectivity, max level, entry slot — one i16 level per node, then the nodes, each a u64
    key, its i16 level and, per level from 0 up, a u32 count plus a u32 slot per possible
    neighbour). None when the bytes do not add up to that layout, e.g. another usearch
    version's."""
    if len(serialised) < _MATRIX_HEAD:
        return None
    rows, width = (int(n) for n in serialised[:_MATRIX_HEAD].view("<u4"))
    index_start = _MATRIX_HEAD + rows * width
    header_end = index_start + _DENSE_HEAD + _GRAPH_HEAD
    if len(serialised) < header_end + 2 * rows or not rows:
        return None
    size, connectivity, base, max_level, entry = (
        int(n) for n in serialised[header_end - _GRAPH_HEAD:header_end].view("<u8"))
    levels = serialised[header_end:header_end + 2 * rows].view("<i2").astype(np.int64)
    if size != rows or levels.min() < 0 or levels.max() > max_level:
        return None
    node_bytes = 8 + 2 + 4 + 4 * base + levels * (4 + 4 * connectivity)
    starts = header_end + 2 * rows + np.concatenate([[0], np.cumsum(node_bytes)[:-1]])
    if starts[-1] + node_bytes[-1] != len(serialised):
        return None
    heads = serialised[starts[:, None] + np.arange(10)]
    if not np.array_equal(heads[:, 8:].copy().view("<i2").ravel(), levels):
        return None
    keys = heads[:, :8].copy().view("<u8").ravel()
    block = serialised[_MATRIX_HEAD:index_start].reshape(rows, width)
    return _Layout(block, serialised[index_start:], keys, starts, levels, connectivity, base,
                   entry)


class _Links(NamedTuple):
    """One level's links: node ``nodes[i]`` points to ``neighbours[offsets[i]:offsets[i+1]]``."""

    nodes: np.ndarray
    offsets: np.ndarray
    neighbours: np.ndarray


def _links(serialised: np.ndarray, layout: _Layout) -> list[_Links]:
    """Every level's neighbour lists (level 0 first), read ``_LINK_ROWS`` nodes at a time."""
    levels = []
    for level in range(int(layout.levels.max()) + 1):
        nodes = np.flatnonzero(layout.levels >= level)
        width = layout.base if level == 0 else layout.connectivity
        counts, lists = [], []
        for start in range(0, len(nodes), _LINK_ROWS):
            offsets = layout.starts[nodes[start:start + _LINK_ROWS]] + _count_at(layout, level)
            words = serialised[offsets[:, None] + np.arange(4 + 4 * width)].view("<u4")
            count = np.minimum(words[:, 0], width).astype(np.int64)
            counts.append(count)
            lists.append(words[:, 1:][np.arange(width) < count[:, None]].astype(np.int64))
        offsets = np.concatenate([[0], np.cumsum(np.concatenate(counts))])
        levels.append(_Links(nodes, offsets, np.concatenate(lists)))
    return levels


def _count_at(layout: _Layout, level: int) -> int:
    """Offset, from a node's start, of its neighbour count on ``level``: a node is a u64 key,
    an i16 level, then per level from 0 up a u32 count and its neighbour slots (``base`` of
    them on level 0, ``connectivity`` above)."""
    if level == 0:
        return 10
    return 14 + 4 * layout.base + (level - 1) * (4 + 4 * layout.connectivity)


def _unlinked(serialised: np.ndarray, layout: _Layout) -> np.ndarray:
    """Mask of the slots holding a key that no path of links, on any level, leads to from the
    entry slot: what a search can never return, however wide. A breadth-first walk over
    :func:`_links` (O(links))."""
    rows = len(layout.keys)
    steps = []
    for links in _links(serialised, layout):
        row_of = np.full(rows, -1, dtype=np.int64)
        row_of[links.nodes] = np.arange(len(links.nodes))
        steps.append((row_of, links.offsets, links.neighbours))
    reached = np.zeros(rows, dtype=bool)
    frontier = np.array([layout.entry], dtype=np.int64) if layout.entry < rows else _NO_ROWS
    reached[frontier] = True
    while len(frontier):
        found = []
        for row_of, offsets, neighbours in steps:
            at = row_of[frontier]
            at = at[at >= 0]
            low, count = offsets[at], offsets[at + 1] - offsets[at]
            total = int(count.sum())
            if total:
                found.append(neighbours[np.repeat(low - np.cumsum(count) + count, count)
                                        + np.arange(total)])
        if not found:
            break
        step = np.concatenate(found)
        step = step[step < rows]
        frontier = np.unique(step[~reached[step]])
        reached[frontier] = True
    unlinked: np.ndarray = ~reached & (layout.keys != _FREE_KEY)
    return unlinked


def _graph_codes(vectors: np.ndarray, dtype: str) -> np.ndarray:
    """The bytes usearch 2 stores for float32 ``vectors`` in a graph of ``dtype``: f16 by
    IEEE round-to-nearest; bf16 as the upper half of the float32 bits, rounded to nearest
    even; i8 as ``trunc(x * 127 / |x|)`` in double precision, the squares summed one dimension
    after another as usearch does (``accumulate`` is sequential, where ``sum`` is pairwise),
    zero vectors as zeros."""
    codes: np.ndarray
    if dtype == "f16":
        codes = vectors.astype(np.float16).view(np.uint8)
        return codes
    if dtype == "bf16":
        bits = np.ascontiguousarray(vectors, dtype=np.float32).view("<u4")
        rounded = (bits + (0x7FFF + ((bits >> 16) & 1))) >> 16
        codes = rounded.astype("<u2").view(np.uint8)
        return codes
    wide = vectors.astype(np.float64)
    squares = np.multiply(wide, wide)
    magnitude = np.sqrt(np.add.accumulate(squares, axis=1, out=squares)[:, -1:])
    np.multiply(wide, 127.0, out=wide)
    np.divide(wide, magnitude, out=wide, where=magnitude > 0)
    wide[magnitude[:, 0] <= 0] = 0
    np.clip(wide, -127.0, 127.0, out=wide)
    codes = np.trunc(wide, out=wide).astype(np.int8).view(np.uint8)
    return codes


def _fsync(path: Path) -> None:
    with path.open("rb") as stream:
        os.fsync(stream.fileno())


def _write_pieces(path: Path, pieces: Iterable[np.ndarray]) -> None:
    """Write the arrays' bytes one after another to ``path`` and flush it to disk."""
    with path.open("wb") as stream:
        for piece in pieces:
            stream.write(np.ascontiguousarray(piece).data)
        stream.flush()
        os.fsync(stream.fileno())


def _write_npy(path: Path, array: np.ndarray) -> None:
    """Save ``array`` as ``.npy`` (no pickle) and flush it to disk."""
    with path.open("wb") as stream:
        np.save(stream, array, allow_pickle=False)
        stream.flush()
        os.fsync(stream.fileno())


def _remove_stale(directory: Path, *, keep: Iterable[str]) -> None:
    """Delete data files of earlier saves (those ``dense.json`` no longer points at)."""
    kept = set(keep)
    for pattern in ("vectors.*.npy", "rowids.*.npy", "graph.*.usearch", "graph_rowids.*.npy"):
        for path in directory.glob(pattern):
            if path.name not in kept:
                path.unlink(missing_ok=True)
