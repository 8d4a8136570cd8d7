"""The dense index (:class:`DenseIndex`): published views, the background graph builder,
search routing between exact search and the graph, and saves.

Readers never lock: every mutation publishes a new immutable :class:`_View` (appends write only
past the published end of the buffer). Writers serialise on a lock held only for O(batch) work.

**Graph builds never block.** A build takes minutes at 100k rows, so it runs on a background
thread over an immutable snapshot; exact search serves until the graph is published. Rows
added after a build (the *tail*) are searched exactly and merged with the graph's candidates;
once the tail (plus removed rows the graph still holds) outgrows ``max(TAIL_MIN_ROWS,
TAIL_FRACTION × rows)`` the thread extends a copy of the graph and publishes it. Published
graphs are never mutated, so searches and :meth:`DenseIndex.save` need no lock on them, and a
saved graph is reloaded on start instead of rebuilt.

Filters (§8) arrive as a boolean mask indexed by row id. A selective filter is searched exactly
over the allowed rows; a broad one queries the graph with oversampling and falls back to exact
search whenever graph and tail yield fewer than ``k`` allowed rows, so filtering never costs
recall that exact search would have had.
"""


from __future__ import annotations

import atexit
import functools
import json
import logging
import math
import threading
import uuid
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

import rcpkit.engine.indexes.dense.exact as exact_scan
import rcpkit.engine.indexes.dense.hnsw as hnsw
import rcpkit.engine.indexes.dense.usearch_format as usearch_format
from rcpkit.engine.config import GRAPH_DTYPES
from rcpkit.engine.errors import IndexUnavailable
from rcpkit.engine.indexes.dense.exact import NO_ROWS, Snapshot, member
from rcpkit.engine.indexes.dense.hnsw import Graph
from rcpkit.engine.indexes.persist import compact_ints, file_checksum, verify_file
from rcpkit.files import atomic_write, private_dir, write_new

if TYPE_CHECKING:
    from rcpkit.engine.indexes.dense.usearch_format import Index

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
and 256 0.993–0.994 at 200k: such data wants ``[dense] expansion_search`` raised
(``benchmarks/bench_dense.py``, docs/benchmarks.md "HNSW search width")."""
SEARCH_WIDTH = 3
"""A graph query asks usearch for at least this many candidates per result wanted. usearch
searches with ef = max(``expansion_search``, candidates asked), so a large ``k`` (hybrid's
100 dense candidates) widens the search instead of taking ef 128's recall (on the peer
corpus at 100k: recall@100 0.976 asking 100, 0.996 asking 300; recall@10 0.997 either way,
``benchmarks/bench_dense.py --search-width``)."""
MAX_CANDIDATES = 10_000
"""Cap on graph candidates requested for a filtered query before exact fallback."""
TAIL_MIN_ROWS = 2_048
TAIL_FRACTION = 0.02
"""The graph is extended once the rows it lacks plus the removed rows it still holds exceed
``max(TAIL_MIN_ROWS, TAIL_FRACTION × rows)``; an exact scan of that tail costs well under 1 ms."""
REBUILD_STALE_FRACTION = 0.25
"""A graph holding more removed rows than this fraction of its size is rebuilt, not extended."""
_FORMAT = 2
_LEAN_FORMAT = 3
"""A save whose graph file leaves out the vectors (:func:`.hnsw.write_graph`): older readers
refuse it (the engine then rebuilds) instead of handing usearch a file it cannot read."""
_META = "dense.json"


@dataclass(frozen=True, slots=True)
class _View:
    """What a reader sees: the rows, the graph (if any), and how the two differ."""

    snapshot: Snapshot
    graph: Graph | None
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


def _view_of(snapshot: Snapshot, graph: Graph | None) -> _View:
    """Pair rows with a graph, working out the tail and the stale count (O(n log n))."""
    if graph is None:
        return _View(snapshot, None, NO_ROWS, 0)
    in_graph = member(graph.rowids, snapshot.rowids)[1]
    tail = np.flatnonzero(~in_graph)
    return _View(snapshot, graph, tail, len(graph.rowids) - (len(snapshot.rowids) - len(tail)))


class DenseIndex:
    """Row-id-keyed vectors with exact or HNSW top-k search (see module docstring).

    ``connectivity``, ``expansion_add`` and ``expansion_search`` are the HNSW M, ef_construction
    and ef_search (see ``EXPANSION_SEARCH``; a query for many results searches wider,
    ``SEARCH_WIDTH``). ef_construction 64 instead of 128 reached only 0.972 even at ef_search
    384 on 200k clustered vectors (``benchmarks/bench_dense.py --build``, docs/benchmarks.md).
    ``build_threads`` > 1 insert in parallel on the background thread (default 1: on a
    loaded 2-core host two threads plus the self-check below settled 50k clustered vectors in
    1.5x the time of one, ``benchmarks/bench_dense.py --build``; with idle cores to spare
    they pay). A graph built in parallel is checked and repaired before it is published
    (:func:`.hnsw.repair`), so no row is lost to search.
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
        self._view = _view_of(Snapshot(self._buffer, self._buffer_rowids), None)
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
                            snapshot: Snapshot, rowids: np.ndarray, orphans: int) -> None:
        """The builder thread of a load whose graph file left out the vectors: restore the
        saved graph (:func:`.hnsw.restored_graph`) and publish it — even when :meth:`close`
        was called meanwhile, so that a save at close keeps it — then build on as
        :meth:`_build_loop` does (from scratch if it could not be restored)."""
        try:
            graph = hnsw.restored_graph(saved, lean, snapshot, self.graph_dtype,
                                        self._new_graph)
            if graph is not None:
                with self._write_lock:
                    self._view = _view_of(self._view.snapshot, Graph(graph, rowids, orphans))
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

    def _graph_for(self, view: _View) -> Graph | None:
        """A new graph covering ``view.snapshot``: a fresh build, or a copy of the current
        graph minus removed rows plus the tail. None if :meth:`close` interrupted it."""
        snapshot, old = view.snapshot, view.graph
        if old is None or view.stale > REBUILD_STALE_FRACTION * len(old.rowids):
            graph, kept = self._new_graph(), NO_ROWS
            pending = hnsw.build_order(snapshot.vectors, np.arange(len(snapshot.rowids)))
        else:
            graph = old.index.copy()
            present = member(snapshot.rowids, old.rowids)[1]
            if not present.all():
                graph.remove(old.rowids[~present])
            kept, pending = old.rowids[present], view.tail
        lacking = _lacking(view) if old is not None else len(snapshot.rowids)

        def progress(inserted: int) -> None:
            self._plan = _BuildPlan(len(pending), inserted, lacking)

        return hnsw.fill(graph, snapshot, kept, pending, threads=self.build_threads,
                         expansion_search=self.expansion_search, progress=progress,
                         stop=self._closing)

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
        allowed = (None if allow is None
                   else exact_scan.allowed_rows(snapshot.rowids, np.asarray(allow, bool)))
        allowed_rows = rows if allowed is None else int(allowed.sum())
        if k < 1 or allowed_rows == 0:
            return [self._empty() for _ in range(len(matrix))]
        fraction = allowed_rows / rows
        selective = allowed is not None and (
            fraction < SELECTIVE_FRACTION or allowed_rows < SELECTIVE_ROWS
        )
        graph = view.graph
        if exact or graph is None or rows <= self.exact_threshold or selective:
            return exact_scan.search(snapshot, matrix, k, allowed)
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
                found = exact_scan.search(snapshot, query[None, :], k, allowed)[0]
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
        private_dir(directory)
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
                lean = hnsw.write_graph(directory / names["graph"], view.graph, view.snapshot,
                                        self.graph_dtype)
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
            atomic_write(directory / _META, json.dumps(meta, indent=1))
            _remove_stale(directory, keep=set(names.values()))

    @staticmethod
    def _read_saved(directory: Path) -> tuple[dict[str, Any], npt.NDArray[np.int64]]:
        """The manifest and row ids of a saved index, after checking every file it names
        against its checksum."""
        meta_path = directory / _META
        if not meta_path.is_file():
            raise IndexUnavailable(f"no dense index saved in {directory}")
        meta = json.loads(meta_path.read_text())
        if meta.get("format") not in (_FORMAT, _LEAN_FORMAT):
            raise ValueError(f"unsupported dense index format {meta.get('format')!r}")
        checksums = meta.get("checksums", {})
        for key, name in meta["files"].items():
            verify_file(directory / name, checksums.get(key))
        rowids = np.load(directory / meta["files"]["rowids"], allow_pickle=False)
        rowids = rowids.astype(np.int64)
        if np.any(np.diff(rowids) <= 0):
            raise ValueError("the saved dense row ids are not ascending")
        return meta, rowids

    @classmethod
    def saved_rowids(cls, directory: Path) -> npt.NDArray[np.int64]:
        """The row ids a saved index holds, its files checked (an audit: no vector is read,
        and none is dropped for missing from the record as :meth:`load` does)."""
        return cls._read_saved(Path(directory))[1]

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
        meta, rowids = cls._read_saved(directory)
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
        # Mapped, not read: a saved file is never rewritten (each save writes a new
        # generation), and a mapping outlives the unlink of a later save. Nothing writes into
        # the buffer either: it has no spare rows, so the first add, remove or merge
        # publishes fresh buffers first (_append, _publish).
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
        snapshot = index._coded(Snapshot(index._buffer, rowids))
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
                graph = Graph(graph_index, graph_rowids, orphans)
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

    def _publish(self, vectors: np.ndarray, rowids: np.ndarray, *, spare: int) -> Snapshot:
        """Fresh buffers holding ``vectors``/``rowids`` plus ``spare`` free rows."""
        size = len(rowids)
        self._buffer = np.zeros((size + spare, self.dimension), dtype=np.float32)
        self._buffer_rowids = np.zeros(size + spare, dtype=np.int64)
        self._buffer[:size] = vectors
        self._buffer_rowids[:size] = rowids
        return Snapshot(self._buffer[:size], self._buffer_rowids[:size])

    def _append(self, current: Snapshot, rowids: np.ndarray, vectors: np.ndarray) -> Snapshot:
        """Write past the published end (invisible to readers); grow ×1.5 when full."""
        start = len(current.rowids)
        end = start + len(rowids)
        if end > len(self._buffer_rowids):
            growth = len(rowids) + max(end // 2, 1024)
            self._publish(current.vectors, current.rowids, spare=growth)
        self._buffer[start:end] = vectors
        self._buffer_rowids[start:end] = rowids
        # The rows already coded keep their positions: their codes still hold.
        return self._coded(Snapshot(self._buffer[:end], self._buffer_rowids[:end],
                                     current.codes))

    def _merge(self, current: Snapshot, rowids: np.ndarray, vectors: np.ndarray) -> Snapshot:
        """Insert out-of-order row ids, keeping rows sorted by id (rare; O(n))."""
        all_ids = np.concatenate([current.rowids, rowids])
        order = np.argsort(all_ids, kind="stable")
        merged = np.concatenate([current.vectors, vectors])[order]
        return self._coded(self._publish(merged, all_ids[order], spare=len(all_ids) // 2))

    def _coded(self, snapshot: Snapshot) -> Snapshot:
        return exact_scan.coded(snapshot, self.first_pass)

    def _new_graph(self) -> Index:
        index_class = usearch_format.load_usearch()
        return index_class(
            ndim=self.dimension,
            metric="cos" if self.metric == "cosine" else "ip",
            dtype=self.graph_dtype,
            connectivity=self.connectivity,
            expansion_add=self.expansion_add,
            expansion_search=self.expansion_search,
        )

    def _from_graph(
        self,
        snapshot: Snapshot,
        graph: Graph,
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
        scores = np.concatenate([exact_scan.scores(snapshot.vectors, positions, query),
                                 exact_scan.scores(snapshot.vectors, tail, query)])
        return exact_scan.top_k(scores, snapshot.rowids[np.concatenate([positions, tail])], k)


def _write_npy(path: Path, array: np.ndarray) -> None:
    """Save ``array`` as ``.npy`` (no pickle), flushed to disk."""
    write_new(path, lambda stream: np.save(stream, array, allow_pickle=False))


def _remove_stale(directory: Path, *, keep: Iterable[str]) -> None:
    """Delete data files of earlier saves (those ``dense.json`` no longer points at)."""
    kept = set(keep)
    for pattern in ("vectors.*.npy", "rowids.*.npy", "graph.*.usearch", "graph_rowids.*.npy"):
        for path in directory.glob(pattern):
            if path.name not in kept:
                path.unlink(missing_ok=True)
