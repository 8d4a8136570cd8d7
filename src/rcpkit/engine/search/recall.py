"""Recall (§3.1) behind one interface: from this process's derived indexes, or computed by
a store that searches by itself (PostgreSQL with ``pg_recall = "database"``).

Recall returns rowids and scores only; the stored record and vector of a candidate are read
later (:func:`load`) for just the candidates a later stage looks at: most requests read the
``k`` chunks of one page, not all ``candidateK`` of them. Recall from the in-memory indexes
also keeps every chunk's stored fields but its text (:class:`~rcpkit.engine.indexes.records.
ChunkFields`), so a page that does not include text reads nothing from the store.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from rcpkit.engine.errors import IndexUnavailable, SnapshotUnavailable
from rcpkit.engine.indexes.derived import DerivedIndexes
from rcpkit.engine.lru import Recent
from rcpkit.engine.store import ChunkRecord, DatabaseSearch, RecordReads
from rcpkit.engine.timing import StageClock
from rcpkit.engine.types import Citation
from rcpkit.protocol.filters import FilterNode

__all__ = ["Candidate", "DatabaseRecall", "Loaded", "MemoryRecall", "Recall", "Scores", "load",
           "merge"]

Scores = dict[int, float]
"""rowid → score of one recall list."""
Vector = npt.NDArray[np.float32]
Loaded = tuple[ChunkRecord, Vector, Citation]
"""A candidate's stored record, its vector and the citation its hit carries."""


@dataclass(slots=True)
class Candidate:
    """A chunk moving through the pipeline with its per-stage scores."""

    rowid: int
    score: float
    scores: dict[str, float]
    loaded: Loaded | None = None
    has_text: bool = False
    """Whether ``record.text`` was read: a record from the in-memory fields has an empty
    text until a stage that needs it loads the candidate with ``text=True``."""

    @property
    def record(self) -> ChunkRecord:
        assert self.loaded is not None, "candidate read before Recall.load"
        return self.loaded[0]

    @property
    def vector(self) -> Vector:
        assert self.loaded is not None, "candidate read before Recall.load"
        return self.loaded[1]

    @property
    def citation(self) -> Citation:
        assert self.loaded is not None, "candidate read before Recall.load"
        return self.loaded[2]


class Recall(Protocol):
    """Dense and lexical recall at a snapshot under a §8 filter, and candidate loading."""

    def reading(self) -> AbstractContextManager[None]:
        """Held around a read so the indexes do not change under it."""

    def recall(self, query: str, vector: Vector, *, dense: bool, sparse: bool, k: int,
               seq: int, tree: FilterNode | None, schema: Mapping[str, str],
               exact: bool, complete: bool = False,
               clock: StageClock | None = None) -> tuple[Scores, Scores]:
        """(dense, sparse) hits, each list's own at most ``k`` long; a list not asked is
        empty. With ``complete`` and both lists asked, each list also scores the other's
        hits (the lexical list those with a BM25 score above 0), where the recall can.
        ``clock`` is lapped after each list (``dense_recall``, ``lexical_recall``)."""

    def vectors(self, rowids: list[int]) -> npt.NDArray[np.float32]:
        """The stored vectors of ``rowids``, in order."""

    def fields(self, rowids: list[int]) -> dict[int, ChunkRecord]:
        """The records of those of ``rowids`` kept in memory, each with an empty ``text``;
        the others are read from the store."""


def merge(dense_hits: Scores, sparse_hits: Scores) -> list[Candidate]:
    """One candidate per recalled row, with the score of each list that found it; dense
    hits first, then the rows only the sparse list found."""
    merged = {rowid: Candidate(rowid, score, {"dense": score})
              for rowid, score in dense_hits.items()}
    for rowid, score in sparse_hits.items():
        found = merged.get(rowid)
        if found is None:
            merged[rowid] = Candidate(rowid, score, {"sparse": score})
        else:
            found.scores["sparse"] = score
    return list(merged.values())


def load(recall: Recall, store: RecordReads, candidates: list[Candidate], seq: int,
         cache: Recent[int, Loaded], cite: Callable[[ChunkRecord], Citation], *,
         text: bool) -> list[Candidate]:
    """``candidates`` with their stored records, vectors and citations (``cite``), read once
    per candidate and with the text when ``text``; rows the store no longer holds drop out.

    A row's record and vector never change (a write adds rows, a delete marks them,
    collection removes them), so ``cache`` keeps those of recently returned rows: a page of
    popular chunks costs no store read. Without ``text`` the records come from the recall's
    in-memory fields (:meth:`Recall.fields`), which costs none either; with it they are
    read whole from the store, in one query."""
    missing = []
    for candidate in candidates:
        if candidate.loaded is None or (text and not candidate.has_text):
            cached = cache.get(candidate.rowid)
            if cached is not None:
                candidate.loaded, candidate.has_text = cached, True
            else:
                missing.append(candidate.rowid)
    if not missing:  # nothing to read: no row of the snapshot can be missing
        return candidates
    with recall.reading():
        records = {} if text else recall.fields(missing)  # texts empty
        unkept = [rowid for rowid in missing if rowid not in records]
        full = store.chunks(unkept) if unkept else {}
        records.update(full)
        order = [rowid for rowid in missing if rowid in records]
        try:
            vectors = recall.vectors(order)
        except IndexUnavailable as exc:  # indexes disagree with the record: a bug
            raise RuntimeError(f"derived indexes are inconsistent: {exc.message}") from exc
        if (unkept or len(order) < len(missing)) and seq < store.gc_floor():
            # Collected while we read: serve that snapshot whole or not at all (§7.7.1).
            raise SnapshotUnavailable("indexVersion was garbage-collected during the read")
    vectors.flags.writeable = False  # rows shared through the cache
    found = dict(zip(order, vectors, strict=True))
    for candidate in candidates:
        record = records.get(candidate.rowid)
        if record is None:
            continue
        # A candidate loaded before without text keeps its vector and citation.
        loaded = candidate.loaded
        candidate.loaded = ((record, found[candidate.rowid], cite(record)) if loaded is None
                            else (record, loaded[1], loaded[2]))
        candidate.has_text = candidate.rowid in full
        if candidate.has_text:
            cache.put(candidate.rowid, candidate.loaded)
    return [c for c in candidates if c.loaded is not None and (c.has_text or not text)]


def _lap(clock: StageClock | None, name: str) -> None:
    if clock is not None:
        clock.lap(name)


class MemoryRecall:
    """Recall from the in-memory indexes; snapshot and filter become rowid masks."""

    def __init__(self, indexes: DerivedIndexes) -> None:
        self._indexes = indexes

    def reading(self) -> AbstractContextManager[None]:
        return self._indexes.lock.reading()

    def recall(self, query: str, vector: Vector, *, dense: bool, sparse: bool, k: int,
               seq: int, tree: FilterNode | None, schema: Mapping[str, str],
               exact: bool, complete: bool = False,
               clock: StageClock | None = None) -> tuple[Scores, Scores]:
        indexes = self._indexes
        mask = indexes.visible_mask(seq)
        # When the snapshot shows every indexed row (no hidden versions), the visibility mask
        # is a no-op the indexes skip when given None, using their precomputed statistics.
        visible = None if int(np.count_nonzero(mask)) == indexes.dense.count else mask
        allow = visible if tree is None else indexes.filtered_mask(seq, tree, schema)
        dense_hits: Scores = {}
        sparse_hits: Scores = {}
        dense_rows = np.zeros(0, np.int64)
        if dense:
            dense_rows, scores = indexes.dense.search(vector, k, allow=allow, exact=exact)
            dense_hits = dict(zip(dense_rows.tolist(), scores.tolist(), strict=True))
            _lap(clock, "dense_recall")
        if sparse and not (dense and complete):
            rowids, scores = indexes.lexical.search(query, k, visible=visible, allow=allow)
            sparse_hits = dict(zip(rowids.tolist(), scores.tolist(), strict=True))
            _lap(clock, "lexical_recall")
        elif sparse:
            # One BM25 pass gives the lexical top k and the dense hits' BM25 scores.
            rowids, scores, of_dense = indexes.lexical.search_scoring(
                query, k, dense_rows, visible=visible, allow=allow)
            sparse_hits = dict(zip(rowids.tolist(), scores.tolist(), strict=True))
            only_lexical = [rowid for rowid in sparse_hits if rowid not in dense_hits]
            cosines = indexes.dense.score(vector, np.asarray(only_lexical, np.int64))
            dense_hits.update(zip(only_lexical, cosines.tolist(), strict=True))
            sparse_hits.update((rowid, score) for rowid, score
                               in zip(dense_rows.tolist(), of_dense.tolist(), strict=True)
                               if score > 0.0 and rowid not in sparse_hits)
            _lap(clock, "lexical_recall")
        return dense_hits, sparse_hits

    def vectors(self, rowids: list[int]) -> npt.NDArray[np.float32]:
        return self._indexes.dense.get(np.asarray(rowids, dtype=np.int64))

    def fields(self, rowids: list[int]) -> dict[int, ChunkRecord]:
        return self._indexes.fields.get(rowids)


class DatabaseRecall:
    """Recall computed by the store's database at the snapshot, under the filter compiled
    to SQL (§7.7, §8); no in-memory index is involved."""

    def __init__(self, database: DatabaseSearch) -> None:
        self._database = database

    def reading(self) -> AbstractContextManager[None]:
        return nullcontext()

    def recall(self, query: str, vector: Vector, *, dense: bool, sparse: bool, k: int,
               seq: int, tree: FilterNode | None, schema: Mapping[str, str],
               exact: bool, complete: bool = False,
               clock: StageClock | None = None) -> tuple[Scores, Scores]:
        # ``complete`` is not honoured: each list is the database's own top k (the store's
        # SQL searches score no given rows).
        dense_hits: Scores = {}
        sparse_hits: Scores = {}
        if dense:
            rowids, scores = self._database.dense_search(vector, k, seq, tree, exact=exact)
            dense_hits = dict(zip(rowids.tolist(), scores.tolist(), strict=True))
            _lap(clock, "dense_recall")
        if sparse:
            rowids, scores = self._database.lexical_search(query, k, seq, tree)
            sparse_hits = dict(zip(rowids.tolist(), scores.tolist(), strict=True))
            _lap(clock, "lexical_recall")
        return dense_hits, sparse_hits

    def vectors(self, rowids: list[int]) -> npt.NDArray[np.float32]:
        return self._database.vectors(rowids)

    def fields(self, rowids: list[int]) -> dict[int, ChunkRecord]:
        return {}  # the database keeps no copy of its records in memory
