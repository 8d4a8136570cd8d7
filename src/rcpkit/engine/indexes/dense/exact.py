"""Exact dense search (§7.7): the stored rows, the one scoring kernel, and top-k.

Every exact score comes from :func:`scores`, so a row scores the same whichever path found
it (exact scan, graph candidate or tail), and :func:`top_k` breaks equal scores by the
smaller row id (§16.3). From ``CODE_MIN_ROWS`` rows on, a :class:`Snapshot` carries int8
codes (:mod:`~rcpkit.engine.indexes.dense.quantised`) whose first pass proves which rows
cannot reach the top k; only the others are scored from the float32 matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rcpkit.engine.indexes.dense.quantised import Int8Codes, candidates, encode

__all__ = ["Snapshot", "allowed_rows", "coded", "member", "scores", "search", "top_k"]

GATHER_BELOW = 4
"""Exact filtered search copies the allowed rows out when they are under 1/4 of all rows;
otherwise it scores every row and masks the disallowed scores (cheaper than the copy)."""
CODE_MIN_ROWS = 4_096
"""Below this many rows an exact search scores every row (a float32 scan of 4k × 384 costs
about what the int8 first pass's fixed work does)."""
CODE_TAIL_MIN = 4_096
CODE_TAIL_FRACTION = 0.1
"""Rows appended after the int8 codes were made are scored exactly next to them; the codes
are made again once those exceed ``max(CODE_TAIL_MIN, CODE_TAIL_FRACTION × rows)``, which
keeps their cost per appended row constant."""
NO_ROWS = np.zeros(0, dtype=np.int64)


def member(sorted_keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions of ``values`` in ``sorted_keys`` (clipped) and a mask of which are present."""
    positions = np.searchsorted(sorted_keys, values)
    inside = positions < len(sorted_keys)
    present = np.zeros(len(values), dtype=bool)
    present[inside] = sorted_keys[positions[inside]] == values[inside]
    return np.minimum(positions, max(len(sorted_keys) - 1, 0)), present


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Stored rows: ``vectors[i]`` belongs to ``rowids[i]``; rowids sorted; never mutated."""

    vectors: np.ndarray
    rowids: np.ndarray
    codes: Int8Codes | None = None
    """int8 codes of the first ``codes.rows`` rows, for exact search's first pass."""

    def positions(self, rowids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Positions of ``rowids`` here, and a mask of which of them are present."""
        return member(self.rowids, rowids)

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
        positions, present = member(stored, rowids)
        return positions if present.all() else None


def coded(snapshot: Snapshot, first_pass: bool) -> Snapshot:
    """``snapshot`` with int8 codes for exact search's first pass: none below
    ``CODE_MIN_ROWS`` rows (or without ``first_pass``), made again when the rows appended
    since outgrow ``max(CODE_TAIL_MIN, CODE_TAIL_FRACTION × rows)``, else those it has."""
    rows, codes = len(snapshot.rowids), snapshot.codes
    if rows < CODE_MIN_ROWS or not first_pass:
        return Snapshot(snapshot.vectors, snapshot.rowids) if codes is not None else snapshot
    if codes is not None and rows - codes.rows <= max(CODE_TAIL_MIN, CODE_TAIL_FRACTION * rows):
        return snapshot
    return Snapshot(snapshot.vectors, snapshot.rowids, encode(snapshot.vectors))


def allowed_rows(rowids: np.ndarray, allow: np.ndarray) -> np.ndarray:
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


def top_k(scored: np.ndarray, rowids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best ``(rowid, score)`` pairs, best first, equal scores by smaller row id."""
    if k < len(scored):
        boundary = scored[np.argpartition(scored, len(scored) - k)[len(scored) - k :]].min()
        keep = np.flatnonzero(scored >= boundary)
        scored, rowids = scored[keep], rowids[keep]
    order = np.lexsort((rowids, -scored))[:k]
    return rowids[order].astype(np.int64), scored[order].astype(np.float32)


def scores(vectors: np.ndarray, positions: np.ndarray | slice, query: np.ndarray
           ) -> np.ndarray:
    """Exact scores of ``vectors[positions]`` against ``query``, in the order given.

    ``np.vecdot`` takes each row's dot product on its own, so a row's score does not depend on
    which rows are scored with it; BLAS gemv's does (OpenBLAS takes rows in blocks and the
    leftover ones another way, which moves the last bit), and then equal vectors found by
    different paths could fail to tie (§16.3). Positions that fill most of their span (a
    tail appended at the end, a broad filter) are scored in place, not copied out first."""
    scored: npt.NDArray[np.float32]
    if isinstance(positions, slice):
        scored = np.vecdot(vectors[positions], query)
        return scored
    if len(positions) == 0:
        return np.zeros(0, dtype=np.float32)
    first = int(positions.min())
    span = int(positions.max()) - first + 1
    if span > GATHER_BELOW * len(positions):
        scored = np.vecdot(vectors[positions], query)
    else:
        scored = np.vecdot(vectors[first:first + span], query)[positions - first]
    return scored


def search(snapshot: Snapshot, queries: np.ndarray, k: int, allowed: np.ndarray | None
           ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Exact top-k over all rows or the allowed ones (a mask by position): the allowed rows
    copied out when a filter leaves few, else the int8 first pass's candidates plus the rows
    appended since the codes were made (every row when there are no codes), scored by
    :func:`scores`."""
    vectors, rowids = snapshot.vectors, snapshot.rowids
    allowed_count = len(rowids) if allowed is None else int(allowed.sum())
    keep = min(k, allowed_count)
    codes = snapshot.codes
    if codes is None or (allowed is not None and allowed_count * GATHER_BELOW < len(rowids)):
        every: np.ndarray | slice = slice(None) if allowed is None else np.flatnonzero(allowed)
        return [top_k(scores(vectors, every, query), rowids[every], keep) for query in queries]
    coded_allowed = None if allowed is None else allowed[:codes.rows]
    rest = np.arange(codes.rows, len(rowids))
    if allowed is not None:
        rest = rest[allowed[codes.rows:]]
    results = []
    for query in queries:
        found = np.concatenate([candidates(codes, query, keep, coded_allowed), rest])
        results.append(top_k(scores(vectors, found, query), rowids[found], keep))
    return results
