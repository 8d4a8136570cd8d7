"""The HNSW graph beside exact search: building it, repairing a parallel build, and saving it
without the vectors rcpkit holds anyway.

A build inserts ``BUILD_BATCH`` rows per usearch call and stops between calls when asked
(:func:`fill`). A fresh graph of at least ``ORDERED_BUILD_ROWS`` rows goes in a cache-friendly
order (:func:`build_order`). A parallel build is checked before it is published: a walk over
its links (:func:`~rcpkit.engine.indexes.dense.usearch_format.unlinked`) finds the nodes no
search can reach, which are inserted again one thread at a time (:func:`repair`); those still
unlinked leave the graph for the exactly scored tail. The saved graph file holds the links
only (:func:`write_graph`, :func:`restored_graph`): usearch's copy of each vector is
recomputed from the index's float32 rows on load.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import numpy as np

import rcpkit.engine.indexes.dense.usearch_format as usearch_format
from rcpkit.engine.indexes.dense.exact import NO_ROWS, Snapshot
from rcpkit.engine.indexes.persist import bytes_checksum
from rcpkit.files import replace_durably, write_new

if TYPE_CHECKING:
    from rcpkit.engine.indexes.dense.usearch_format import Index

__all__ = ["Graph", "build_order", "fill", "lost", "repair", "restored_graph", "unreachable",
           "write_graph"]

logger = logging.getLogger(__name__)

BUILD_BATCH = 4_096
"""Rows per usearch insertion call; the builder checks for a stop between them."""
ORDERED_BUILD_ROWS = 200_000
SKELETON_FRACTION = 0.1
PIVOTS = 1_024
"""A fresh graph of at least ``ORDERED_BUILD_ROWS`` rows is built in a cache-friendly order
(:func:`insertion_order`): a random ``SKELETON_FRACTION`` of the rows first, then the rest
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
CODE_ROWS = 4_096
"""Rows converted to graph codes (or grouped by pivot) at a time."""


@dataclass(frozen=True, slots=True)
class Graph:
    """A published HNSW graph (never mutated once published) and its sorted row ids."""

    index: Index
    rowids: np.ndarray
    orphans: int = 0
    """Rows this graph's build left out because no link led to them even after the repair
    (:func:`repair`): they are in the tail, scored exactly with every query."""


def build_order(vectors: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """The order a fresh graph inserts ``positions`` in: :func:`insertion_order` from
    ``ORDERED_BUILD_ROWS`` rows on, else as given."""
    if len(positions) >= ORDERED_BUILD_ROWS:
        return insertion_order(vectors, positions)
    return positions


def insertion_order(vectors: np.ndarray, positions: np.ndarray) -> np.ndarray:
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
    for start in range(0, len(rest), CODE_ROWS):
        block = rest[start:start + CODE_ROWS]
        nearest[start:start + len(block)] = np.argmax(vectors[block] @ pivots, axis=1)
    ordered: np.ndarray = np.concatenate([head, rest[np.argsort(nearest, kind="stable")]])
    return ordered


def fill(graph: Index, snapshot: Snapshot, kept: np.ndarray, pending: np.ndarray, *,
         threads: int, expansion_search: int, progress: Callable[[int], None],
         stop: threading.Event) -> Graph | None:
    """Insert the ``pending`` positions of ``snapshot`` into ``graph`` (which holds the row
    ids ``kept``), ``BUILD_BATCH`` at a time, calling ``progress`` with the rows inserted
    before each batch; repair a parallel build. None once ``stop`` is set."""
    for start in range(0, len(pending), BUILD_BATCH):
        progress(start)
        if stop.is_set():
            return None
        batch = pending[start : start + BUILD_BATCH]
        graph.add(snapshot.rowids[batch], snapshot.vectors[batch], threads=threads)
    orphans = repair(graph, snapshot, pending, threads) if threads > 1 else NO_ROWS
    graph.expansion_search = expansion_search  # type: ignore[misc]  # has a setter
    rowids = np.union1d(kept, snapshot.rowids[pending])
    if len(orphans):
        rowids = np.setdiff1d(rowids, snapshot.rowids[orphans], assume_unique=True)
    return Graph(graph, rowids, len(orphans))


def repair(graph: Index, snapshot: Snapshot, inserted: np.ndarray, threads: int) -> np.ndarray:
    """Re-insert, one thread at a time, the nodes a parallel build left where no search
    reaches them, until there are none or ``REPAIR_ROUNDS`` pass.

    Parallel HNSW insertion can leave a node unreachable: two close vectors inserted at once
    do not see each other, and when a shared neighbour's full list is pruned by the diversity
    heuristic it keeps only one of them (usearch 2.26: a few of 3000 clustered vectors with
    two threads, none with one). A node re-inserted alone can be pruned from every
    neighbour's list again (as in a single-threaded graph of small connectivity: ~0.06 % of
    1M clustered rows). Those are removed from the graph and their positions returned: the
    caller leaves them in the tail, so that every row is still found by its own vector."""
    missing = lost(graph, snapshot, inserted, threads)
    for _ in range(REPAIR_ROUNDS):
        if len(missing) == 0:
            break
        keys = snapshot.rowids[missing]
        graph.remove(keys)
        graph.add(keys, snapshot.vectors[missing], threads=1)
        missing = lost(graph, snapshot, missing, 1)
    if len(missing):
        logger.debug("%d dense graph nodes no link leads to after repair; they are "
                     "searched exactly", len(missing))
        graph.remove(snapshot.rowids[missing])
    return missing


def lost(graph: Index, snapshot: Snapshot, inserted: np.ndarray, threads: int) -> np.ndarray:
    """Positions in ``snapshot`` of the graph's nodes no search can reach: by a walk over
    its links (one pass over the whole graph), or, when this usearch serialises a layout
    :mod:`~rcpkit.engine.indexes.dense.usearch_format` does not know, by each ``inserted``
    position's vector searching for itself (:func:`unreachable`, a search per row)."""
    saved = graph.save()  # the buffer, with no path given
    assert saved is not None
    serialised = np.frombuffer(saved, dtype=np.uint8)
    try:
        layout = usearch_format.parse(serialised)
    except usearch_format.FormatError as exc:
        logger.debug("the graph's links cannot be read (%s): each row searches for itself", exc)
    else:
        positions, present = snapshot.positions(
            layout.keys[usearch_format.unlinked(serialised, layout)].astype(np.int64))
        found: np.ndarray = positions[present]
        return found
    missing = [chunk[unreachable(graph, snapshot.rowids[chunk], snapshot.vectors[chunk],
                                 threads)]
               for chunk in np.array_split(inserted, max(1, len(inserted) // BUILD_BATCH))]
    return np.concatenate([NO_ROWS, *missing])


def unreachable(graph: Index, keys: np.ndarray, vectors: np.ndarray, threads: int
                ) -> np.ndarray:
    """Mask of ``keys`` whose own vector does not find them in ``graph`` even with the widest
    of ``CHECK_EXPANSIONS`` (each wider search only for those the narrower one missed; the
    caller restores the graph's ef afterwards)."""
    missing = np.ones(len(keys), dtype=bool)
    for expansion in CHECK_EXPANSIONS:
        suspects = np.flatnonzero(missing)
        if len(suspects) == 0:
            break
        graph.expansion_search = expansion  # type: ignore[misc]  # has a setter
        found = np.asarray(graph.search(vectors[suspects], CHECK_K, threads=threads).keys)
        found = found.reshape(len(suspects), -1)
        missing[suspects] = ~(found == keys[suspects, None]).any(axis=1)
    return missing


def write_graph(path: Path, graph: Graph, snapshot: Snapshot, dtype: str
                ) -> dict[str, object] | None:
    """Write ``graph`` (of ``dtype``) to ``path``, leaving out the vectors ``snapshot`` can
    rebuild.

    usearch keeps its own copy of every vector (as f16 or i8 codes), duplicating the
    rows the record and ``snapshot`` hold. Each slot's codes are recomputed from
    ``snapshot`` and compared byte for byte with usearch's; slots that match are left
    out, the others (removed rows, or a conversion this code does not reproduce) are
    kept verbatim. Returns what :func:`restored_graph` needs, or None when the whole file
    was kept as usearch saved it (its layout not recognised, or too few matches).

    usearch writes the whole file first, read back mapped: a serialisation in memory
    would add its size (~0.9 GB at 1M f16 rows) to the process while the save runs."""
    whole = path.with_name(f"{path.stem}.whole{path.suffix}")
    graph.index.save(str(whole))
    try:
        lean = _write_lean(path, np.memmap(whole, dtype=np.uint8, mode="r"), snapshot, dtype)
        if lean is None:
            replace_durably(whole, path)
        return lean
    finally:
        whole.unlink(missing_ok=True)


def _write_lean(path: Path, serialised: np.ndarray, snapshot: Snapshot, dtype: str
                ) -> dict[str, object] | None:
    """Write ``serialised`` to ``path`` without the codes ``snapshot`` reproduces (see
    :func:`write_graph`); None, writing nothing, when that would not pay."""
    try:
        layout = usearch_format.parse(serialised)
    except usearch_format.FormatError as exc:
        logger.debug("the dense graph is saved whole: %s", exc)
        return None
    block, keys = layout.block, layout.keys
    positions, present = snapshot.positions(keys.astype(np.int64))
    present &= keys != usearch_format.FREE_KEY
    matches = present.copy()
    for start in range(0, len(keys), CODE_ROWS):
        slots = np.flatnonzero(present[start:start + CODE_ROWS]) + start
        codes = usearch_format.vector_codes(snapshot.vectors[positions[slots]], dtype)
        matches[slots] = (codes == block[slots]).all(axis=1)
    kept = np.flatnonzero(~matches)
    if 2 * len(kept) > len(keys):
        return None

    def write(stream: BinaryIO) -> None:
        for piece in usearch_format.lean_pieces(serialised, layout, kept):
            stream.write(np.ascontiguousarray(piece).data)

    write_new(path, write)
    return {"rows": len(keys), "bytes_per_vector": block.shape[1], "kept": len(kept),
            "checksum": bytes_checksum(block)}


def restored_graph(data: np.ndarray, lean: dict[str, int | str], snapshot: Snapshot,
                   dtype: str, fresh: Callable[[], Index]) -> Index | None:
    """The graph :func:`write_graph` wrote as ``data``, its left-out vectors rebuilt from
    ``snapshot``, loaded into ``fresh()``; None (a new graph is built) when ``snapshot``
    lacks a row the graph needs or the rebuilt vectors are not the saved ones."""
    serialised, layout, kept = usearch_format.unlean(data, int(lean["kept"]))
    rows, width = int(lean["rows"]), int(lean["bytes_per_vector"])
    if layout.block.shape != (rows, width):
        raise usearch_format.FormatError(
            "the saved dense graph does not have the layout it was saved with")
    block, keys = layout.block, layout.keys
    rebuilt = np.ones(rows, dtype=bool)
    rebuilt[kept] = False
    slots = np.flatnonzero(rebuilt)
    positions, present = snapshot.positions(keys[slots].astype(np.int64))
    if not present.all():
        logger.warning("the record lacks %d rows of the saved dense graph; it is rebuilt",
                       int((~present).sum()))
        return None
    for start in range(0, len(slots), CODE_ROWS):
        chunk = slice(start, start + CODE_ROWS)
        block[slots[chunk]] = usearch_format.vector_codes(snapshot.vectors[positions[chunk]],
                                                          dtype)
    if bytes_checksum(block, str(lean["checksum"]).partition(":")[0]) != lean["checksum"]:
        logger.warning("the dense graph's vectors rebuilt from the record differ from the "
                       "saved ones; it is rebuilt")
        return None
    graph = fresh()
    graph.load(serialised.data)
    return graph
